package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/processrecord"
)

// listenEgress opens the egress proxy's listeners on the sandbox's own
// loopback (before any command runs, so none can take the ports) and
// returns what mounts its EgressService on the daemon's server and returns
// the proxy (for fd passing, see serveOn).
func listenEgress() (func(*daemon.Server, *slog.Logger) *egress.Proxy, error) {
	httpLn, err := net.Listen("tcp", egress.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	socksLn, err := net.Listen("tcp", egress.SOCKSAddr)
	if err != nil {
		httpLn.Close()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	return func(srv *daemon.Server, log *slog.Logger) *egress.Proxy {
		p := egress.NewProxy(log)
		srv.Also(p.Handler())
		go func() {
			<-srv.Stopping()
			p.Close()
		}()
		go p.ServeHTTPProxy(httpLn)
		go p.ServeSOCKS(socksLn)
		return p
	}, nil
}

// Lifecycle of the host side (runboxd egress).
const (
	// egressFirstContact bounds how long the host side waits for its
	// sandbox's runboxd to answer the first time.
	egressFirstContact = 30 * time.Second
	// egressRetry is the pause between attempts to reach runboxd again.
	egressRetry = 200 * time.Millisecond
)

// egressHost is `runboxd egress`: the host side of a private-network
// local sandbox's egress, started by the provider beside the sandbox. It
// lives as long as the sandbox's runboxd (--pid, watched through a pidfd),
// reading the policy file in the state directory for every connection and
// appending its refusals to egress.RefusalsFile there.
func egressHost(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("egress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "the sandbox's state directory: its secret and "+egress.PolicyFile)
	socket := fs.String("socket", "", "the sandbox's runboxd socket")
	pid := fs.Int("pid", 0, "the sandbox's runboxd: the host side exits when it does")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stateDir == "" || *socket == "" || *pid <= 0 || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("egress: --state-dir, --socket and --pid are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pidfd, err := unix.PidfdOpen(*pid, 0)
	if err != nil {
		return fmt.Errorf("egress: runboxd pid %d: %w", *pid, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// Readable once the process has exited.
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		cancel()
	}()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	policyPath := filepath.Join(*stateDir, egress.PolicyFile)
	// Every refusal, coalesced and bounded, for runbox serve's audit log;
	// what is recorded when runboxd exits is written before this returns.
	refusals := egress.NewRefusalLog(filepath.Join(*stateDir, egress.RefusalsFile), log)
	logDone := make(chan struct{})
	go func() { defer close(logDone); refusals.Run(ctx) }()
	defer func() { cancel(); <-logDone }()
	h := &egress.Host{
		Refusals: refusals,
		Dial:     processrecord.Dialer(*socket, *stateDir),
		Policy:   func() (egress.Policy, error) { return egress.ReadPolicy(policyPath) },
		Log:      log,
		// Started by the local provider beside the sandbox: runboxd's
		// socket is on this kernel, so the command's sockets are passed
		// and spliced here, not carried in messages.
		PassFDs: true,
	}
	contacted := false
	first := time.Now()
	for ctx.Err() == nil {
		err := h.Serve(ctx, func() {
			if !contacted {
				log.Info("egress: carrying the sandbox's connections", "socket", *socket)
			}
			contacted = true
		})
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, runbox.ErrUnauthenticated) || (!contacted && time.Since(first) > egressFirstContact) {
			return fmt.Errorf("egress: %w", err)
		}
		log.Debug("egress: reconnecting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(egressRetry):
		}
	}
	return nil
}
