package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/remotecommand"
)

// stderrKeep is how much of the proxy's stderr a stream keeps for error
// messages (the proxy writes a line or two when it fails).
const stderrKeep = 2048

// execConn is the byte stream to runboxd through the API server's pod exec
// stream running `runboxd proxy` (WebSocket, or SPDY where the server or a
// proxy on the way does not upgrade to WebSocket): writes go to the
// proxy's stdin, reads return its stdout. The stream runs in a goroutine;
// the client's side is one end of an in-memory pipe (net.Pipe, which has
// deadlines). When the stream ends, reads and writes fail with why:
// the stream's error, the proxy's last words, and (through explain) the
// pod's state when the pod is gone or its container has stopped.
type execConn struct {
	net.Conn // the client's end of the pipe
	far      net.Conn
	cancel   context.CancelFunc
	done     chan struct{}
	what     string // "pod NS/NAME", for errors

	mu     sync.Mutex
	stderr []byte
	err    error // why the stream ended (nil: the proxy exited cleanly)
	lost   error // why the stream was cut (fail), which explains it first
	// onEnd is called once the stream has ended or the conn is closed.
	onEnd func()
	ended bool

	closeOnce sync.Once
}

// dialExec opens an exec stream of command (`runboxd proxy ...`) in the
// sandbox's workload container. explain, called once when the stream fails, may turn
// the failure into runbox.ErrSandboxLost naming the pod's state.
func dialExec(api *kubeAPI, namespace, pod string, command []string, explain func(error) error) (*execConn, error) {
	req := api.rest.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: containerName,
			Command:   command,
			Stdin:     true, Stdout: true, Stderr: true,
		}, api.params)
	ws, err := remotecommand.NewWebSocketExecutor(api.cfg, "GET", req.URL().String())
	if err != nil {
		return nil, fmt.Errorf("exec stream to pod %s/%s: %w", namespace, pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(api.cfg, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("exec stream to pod %s/%s: %w", namespace, pod, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("exec stream to pod %s/%s: %w", namespace, pod, err)
	}
	near, far := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	c := &execConn{Conn: near, far: far, cancel: cancel, done: make(chan struct{}), what: "pod " + namespace + "/" + pod}
	go func() {
		defer close(c.done)
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{
			Stdin:  stdinOf{far},
			Stdout: far,
			Stderr: (*stderrTail)(c),
		})
		if ctx.Err() == nil && err != nil && explain != nil {
			err = explain(err)
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		far.Close() // the client's reads see the end
		c.end()
	}()
	return c, nil
}

// end calls onEnd once.
func (c *execConn) end() {
	c.mu.Lock()
	f := c.onEnd
	c.onEnd, c.ended = nil, true
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// setOnEnd sets what end calls; f runs at once if the stream has ended.
func (c *execConn) setOnEnd(f func()) {
	c.mu.Lock()
	ended := c.ended
	if !ended {
		c.onEnd = f
	}
	c.mu.Unlock()
	if ended {
		f()
	}
}

// fail cuts the stream because the sandbox is lost (err says why): reads
// and writes fail with err from now on.
func (c *execConn) fail(err error) {
	c.mu.Lock()
	if c.lost == nil {
		c.lost = err
	}
	c.mu.Unlock()
	c.far.Close()
	c.cancel()
}

// stdinOf hides far's other methods from the executor, which must only
// read from it.
type stdinOf struct{ r io.Reader }

func (s stdinOf) Read(p []byte) (int, error) { return s.r.Read(p) }

// stderrTail keeps the end of what the proxy writes to stderr.
type stderrTail execConn

func (t *stderrTail) Write(p []byte) (int, error) {
	c := (*execConn)(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stderr = append(c.stderr, p...)
	if len(c.stderr) > stderrKeep {
		c.stderr = append([]byte(nil), c.stderr[len(c.stderr)-stderrKeep:]...)
	}
	return len(p), nil
}

// Read returns what runboxd sent; at the end of the stream, io.EOF when the
// proxy exited cleanly, else why it ended.
func (c *execConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		err = c.endErr(err)
	}
	return n, err
}

// Write sends p to runboxd.
func (c *execConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		err = c.endErr(err)
	}
	return n, err
}

// endErr explains a failed read or write: once the stream has ended, its
// error (with the proxy's stderr); otherwise err as it is.
func (c *execConn) endErr(err error) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		return err // a deadline, say
	}
	c.mu.Lock()
	lost := c.lost
	c.mu.Unlock()
	if lost != nil {
		return fmt.Errorf("exec stream to %s cut: %w", c.what, lost)
	}
	select {
	case <-c.done:
	case <-time.After(time.Second): // the stream's goroutine is finishing
		return err
	}
	c.mu.Lock()
	serr, tail := c.err, strings.TrimSpace(string(c.stderr))
	c.mu.Unlock()
	switch {
	case serr == nil && tail == "":
		return err
	case serr == nil:
		return fmt.Errorf("exec stream to %s (runboxd proxy) ended: %s: %w", c.what, tail, err)
	case tail == "":
		return fmt.Errorf("exec stream to %s (runboxd proxy): %w", c.what, serr)
	}
	return fmt.Errorf("exec stream to %s (runboxd proxy) ended: %s: %w", c.what, tail, serr)
}

// Close ends the stream: the proxy sees the end of its input and exits,
// and the exec request is cancelled. It is idempotent.
func (c *execConn) Close() error {
	c.closeOnce.Do(func() {
		c.Conn.Close()
		c.far.Close()
		c.cancel()
		c.end()
	})
	return nil
}
