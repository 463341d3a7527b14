package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/runbox/runbox"
)

// TestDialPastKilledProxies: a proxy killed by a signal (exit 137, the OOM
// killer) is started again; a proxy that exited on its own, a lost pod and
// an ended context are answers, not retried.
func TestDialPastKilledProxies(t *testing.T) {
	killed := fmt.Errorf("runboxd authentication: exec stream to pod ns/p (runboxd proxy): %w",
		utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137})
	for _, tc := range []struct {
		name      string
		failures  []error // the dials' errors, then a connection
		wantDials int
		wantErr   error
	}{
		{"killed twice, then up", []error{killed, killed}, 3, nil},
		{"OOM-killed as it started, then up", []error{fmt.Errorf("exec stream to pod ns/p: %w", apierrors.NewInternalError(errors.New(
			`error executing command in container: failed to exec in container: OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer (possibly OOM-killed): unknown`)))}, 2, nil},
		{"OOM-killed as it started, as plain text", []error{errors.New(`runboxd authentication: exec stream to pod ns/p (runboxd proxy): Internal error occurred: error executing command in container: OCI runtime exec failed: exec failed: unable to start container process: read init-p: connection reset by peer (possibly OOM-killed): unknown`)}, 2, nil},
		{"internal error", []error{apierrors.NewInternalError(errors.New("etcd is down"))}, 1, errors.New("")},
		{"exited 1", []error{fmt.Errorf("x: %w", utilexec.CodeExitError{Err: errors.New("exit 1"), Code: 1})}, 1, errors.New("")},
		{"pod lost", []error{fmt.Errorf("%w: pod ns/p is gone: %w", runbox.ErrSandboxLost, killed)}, 1, runbox.ErrSandboxLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dials := 0
			near, far := net.Pipe()
			defer near.Close()
			defer far.Close()
			conn, err := dialPastKilledProxies(context.Background(), func(context.Context) (net.Conn, error) {
				dials++
				if dials <= len(tc.failures) {
					return nil, tc.failures[dials-1]
				}
				return near, nil
			})
			if dials != tc.wantDials {
				t.Errorf("%d dials, want %d", dials, tc.wantDials)
			}
			switch {
			case tc.wantErr == nil && (err != nil || conn != near):
				t.Errorf("got %v, %v; want the connection", conn, err)
			case tc.wantErr != nil && err == nil:
				t.Errorf("got a connection, want an error")
			case tc.wantErr == runbox.ErrSandboxLost && !errors.Is(err, runbox.ErrSandboxLost):
				t.Errorf("got %v, want ErrSandboxLost", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	dials := 0
	_, err := dialPastKilledProxies(ctx, func(context.Context) (net.Conn, error) {
		dials++
		cancel()
		return nil, killed
	})
	if dials != 1 || err == nil {
		t.Errorf("ended context: %d dials, err %v; want 1 dial and the proxy's error", dials, err)
	}
}
