package daemon_test

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// TestDurationsOutOfRange: runboxd itself (a raw Connect client, past the
// Go client's own check) refuses a huge timeout, idle timeout or grace as
// invalid_argument naming the limit, rather than reading it as negative or
// as an immediate SIGKILL.
func TestDurationsOutOfRange(t *testing.T) {
	_, socket, served := serve(t)
	ctx := testCtx(t)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	t.Cleanup(hc.CloseIdleConnections)
	rpc := runboxv1connect.NewRunboxServiceClient(hc, "http://runboxd")
	for _, c := range []struct {
		spec  *runboxv1.ExecSpec
		limit string
	}{
		{&runboxv1.ExecSpec{Command: "sleep 5", TimeoutMs: math.MaxInt64}, "runbox.MaxTimeout"},
		{&runboxv1.ExecSpec{Command: "sleep 5", IdleTimeoutMs: math.MaxInt64 / 1000}, "runbox.MaxIdleTimeout"},
		{&runboxv1.ExecSpec{Command: "sleep 5", GraceMs: math.MaxInt64}, "runbox.MaxGrace"},
	} {
		st, err := rpc.Run(ctx, connect.NewRequest(&runboxv1.RunRequest{Spec: c.spec}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
			st.Close()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), c.limit) {
			t.Errorf("%v: want invalid_argument naming %s, got %v", c.spec, c.limit, err)
		}
	}
	_, err := rpc.Cancel(ctx, connect.NewRequest(&runboxv1.CancelRequest{Id: "x", GraceMs: math.MaxInt64}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "runbox.MaxGrace") {
		t.Errorf("cancel with grace MaxInt64: %v", err)
	}
	_, err = rpc.Shutdown(ctx, connect.NewRequest(&runboxv1.ShutdownRequest{GraceMs: math.MaxInt64}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "runbox.MaxGrace") {
		t.Errorf("shutdown with grace MaxInt64: %v", err)
	}
	if _, err := rpc.Shutdown(ctx, connect.NewRequest(&runboxv1.ShutdownRequest{GraceMs: 100})); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
