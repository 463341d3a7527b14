package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Target names one sandbox's endpoint and how to start it.
type Target struct {
	// Home is the runbox home (absolute), Provider and ID the sandbox.
	Home, Provider, ID string
	// Full is the path of runbox-full, run as `runbox-full endpoint
	// PROVIDER ID` to start the endpoint.
	Full string
}

// Dial connects to t's endpoint, starting it when nothing accepts on its
// socket (never started, exited when idle, or killed: a stale socket). The
// connection carries bytes to the sandbox's runboxd; the caller
// authenticates on it with the sandbox's secret.
func Dial(ctx context.Context, t Target) (net.Conn, error) {
	if _, err := Idle(); err != nil {
		return nil, err
	}
	sock, err := Socket(t.Home, t.Provider, t.ID)
	if err != nil {
		return nil, err
	}
	// The caller sends the sandbox's secret on what this returns: only to
	// an endpoint of this user's, in a directory of this user's (a socket
	// or log another user planted there is theirs).
	if err := ownDir(Dir(t.Home)); err != nil {
		return nil, err
	}
	if c, err := dialSocket(ctx, sock); err == nil || !absent(err) {
		return c, err
	}
	if err := start(ctx, t); err != nil {
		return nil, err
	}
	// Started, or another endpoint took the lock first and is about to
	// listen: a few quick tries.
	deadline := time.Now().Add(startTimeout)
	for {
		c, err := dialSocket(ctx, sock)
		if err == nil || !absent(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return c, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialSocket dials the endpoint's socket, and keeps the connection only
// when the process listening on it is of this user's uid (peerIsSelf).
func dialSocket(ctx context.Context, sock string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	if err := peerIsSelf(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// absent reports whether err says no endpoint listens on the socket: no
// file, or a file nothing accepts on (stale).
func absent(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// start runs `runbox-full endpoint PROVIDER ID` detached (its own session,
// stdio on /dev/null, its log beside its socket) and waits until it says
// it listens, on a pipe given as its descriptor 3.
func start(ctx context.Context, t Target) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	logf, err := openLog(logPath(t.Home, t.Provider, t.ID))
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	env := append(os.Environ(), "RUNBOX_HOME="+t.Home)
	proc, err := os.StartProcess(t.Full, []string{t.Full, "endpoint", t.Provider, t.ID}, &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{null, null, logf, w},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	w.Close()
	if err != nil {
		return fmt.Errorf("start the endpoint of %s sandbox %s: %w", t.Provider, t.ID, err)
	}
	defer proc.Release()
	deadline := time.Now().Add(startTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r.SetReadDeadline(deadline)
	msg, err := io.ReadAll(io.LimitReader(r, 4096))
	switch s := strings.TrimSpace(string(msg)); {
	case s == readyWord:
		return nil
	case err != nil:
		return fmt.Errorf("the endpoint of %s sandbox %s did not start: %w", t.Provider, t.ID, err)
	case s == "":
		return fmt.Errorf("the endpoint of %s sandbox %s exited at start (see %s)", t.Provider, t.ID, logPath(t.Home, t.Provider, t.ID))
	default:
		return fmt.Errorf("the endpoint of %s sandbox %s: %s", t.Provider, t.ID, s)
	}
}

// readyWord is what a starting endpoint writes on its descriptor 3 once
// it listens (or once it finds another endpoint holding the lock).
const readyWord = "ok"

// logPath is where an endpoint's stderr goes.
func logPath(home, provider, id string) string {
	return filepath.Join(Dir(home), provider+"-"+id+".log")
}

// LogHandOver appends to t's endpoint log why the CLI did not reach the
// sandbox through the endpoint (and reached it the slow way, through
// runbox-full): a slow exec then has its reason on record.
func LogHandOver(t Target, why error) {
	if ownDir(Dir(t.Home)) != nil {
		return // not this user's to write in
	}
	f, err := openLog(logPath(t.Home, t.Provider, t.ID))
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s runbox: not through the endpoint (runbox-full reaches the sandbox itself): %v\n",
		time.Now().Format("2006/01/02 15:04:05"), why)
}

// Forget removes what an endpoint leaves beside its socket (its lock and
// log), once its sandbox is removed.
func Forget(home, provider, id string) {
	if sock, err := Socket(home, provider, id); err == nil {
		os.Remove(sock + ".lock")
	}
	os.Remove(logPath(home, provider, id))
}
