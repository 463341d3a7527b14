package docker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	moby "github.com/moby/moby/client"
)

// waitReady polls until the container's runboxd answers Info, the container
// stops (the error then quotes its log), or startTimeout passes.
func (p *Provider) waitReady(ctx context.Context, cli *moby.Client, c ctr) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	dial := p.dialerFor(c)
	socket := c.Labels[LabelSocket]
	var last error
	for {
		// On the socket stream, dial first: it is cheap, and the client
		// would otherwise retry a socket that is not there yet.
		ready := true
		if socket != "" && !p.execForced() {
			if conn, err := net.Dial("unix", socket); err == nil {
				conn.Close()
			} else {
				ready, last = false, err
			}
		}
		if ready {
			if last = probe(ctx, dial, c.Labels[LabelSandbox]); last == nil {
				return nil
			}
		}
		ir, err := cli.ContainerInspect(ctx, c.ID, moby.ContainerInspectOptions{})
		if err == nil && ir.Container.State != nil && !ir.Container.State.Running {
			st := ir.Container.State
			return fmt.Errorf("container %.12s stopped (status %s, exit code %d%s) before runboxd answered%s",
				c.ID, st.Status, st.ExitCode, errSuffix(st.Error), logTail(cli, c.ID))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runboxd in container %.12s did not answer within %v (%v): %w%s",
				c.ID, startTimeout, last, ctx.Err(), logTail(cli, c.ID))
		case <-time.After(pollInterval):
		}
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

// logTail returns the last lines of the container's log (runboxd's stderr),
// formatted to follow an error message, or "".
func logTail(cli *moby.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, moby.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: logTailLines})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, rc)
	s := strings.TrimSpace(out.String())
	if s == "" {
		return ""
	}
	return "; container log: " + s
}
