// Command runboxd is the supervisor daemon that runs inside every runbox
// sandbox. It only parses flags and wires packages; the behaviour lives in
// internal/supervisor and internal/daemon.
//
//	runboxd serve --socket PATH --auth-sha256 HEX [--egress] [--socket-mode 0600] [--cgroup auto|cgroup2|off] [--state-dir D] [--daemon-file F]
//	              [--retention D] [--drain D] [--ring BYTES] [--oom-score-adj N] [--spill-dir D] [--spill-bytes N] [--dir D] [--threads N]
//	              [--private DIR]
//	runboxd jail [--cgroup ...] [--retention D] [--drain D] [--ring BYTES] [--oom-score-adj N] [--spill-dir D] [--spill-bytes N]
//	              (PID 1 of a local sandbox; configuration, with the hash, on fd 3)
//	runboxd proxy --socket PATH [--mux]
//	runboxd egress --state-dir D --socket PATH --pid N   (host side of egress, on the host)
//	runboxd install DEST
//	runboxd version
//
// Every connection is authenticated (internal/daemonauth): runboxd is given
// only the SHA-256 of the sandbox's secret (--auth-sha256, or the jail's
// configuration), and refuses to serve without it unless --insecure-no-auth
// says so, which is for tests only.
//
// As a container's PID 1, serve drops the signals its commands can send it
// and stops on SIGRTMIN+3 instead of SIGTERM.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/commandview"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/fdpass"
	"github.com/runbox/runbox/internal/fdsweep"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/supervisor"
)

// inheritedFDs is how many descriptors runboxd is given on purpose, by mode:
// stdio, and for jail the local provider's configFD, listener and binary
// (3, 4, 5: provider/local/launch_linux.go). Every other descriptor it
// inherited is closed before anything else runs, so none reaches a command
// (security rule 3).
func inheritedFDs(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "jail":
			return 6 // configuration, listener, binary
		case "fuse-root":
			return jail.FuseServerLayersFD + 1 // the FUSE device and the layers tree
		}
	}
	return 3
}

func main() {
	if err := fdsweep.CloseInherited(inheritedFDs(os.Args[1:])); err != nil {
		fmt.Fprintf(os.Stderr, "runboxd: %v\n", err)
		os.Exit(1)
	}
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "runboxd: %v\n", err)
		}
		os.Exit(1)
	}
}

const usage = `usage:
  runboxd serve --socket PATH --auth-sha256 HEX [--insecure-no-auth] [--socket-mode 0600] [--daemon-file F] [--cgroup auto|cgroup2|off] [--state-dir D] [--retention D] [--drain D] [--ring BYTES] [--oom-score-adj N] [--spill-dir D] [--spill-bytes N] [--dir D] [--threads N] [--private DIR]
  runboxd jail [--cgroup ...] [--retention D] [--drain D] [--ring BYTES] [--oom-score-adj N] [--spill-dir D] [--spill-bytes N]   (config on fd 3)
  runboxd fuse-root --server PATH --upper NAME --work NAME --idmap MAP [--lowers NAME,...]   (a local sandbox's root server; descriptors 3-4)
  runboxd proxy --socket PATH [--mux]   (--mux: yamux streams on stdio, a kubernetes endpoint's one exec stream)
  runboxd egress --state-dir D --socket PATH --pid N   (host side of a private-network sandbox's egress proxy)
  runboxd install DEST    (copy this binary to DEST: a kubernetes sandbox's init container)
  runboxd version`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "jail":
		return jailServe(args[1:], stderr)
	case "fuse-root":
		return fuseRoot(args[1:], stderr)
	case "proxy":
		return proxy(args[1:], stdin, stdout, stderr)
	case "egress":
		return egressHost(args[1:], stderr)
	case "install":
		return install(args[1:], stdout)
	case "version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// supervisorFlags adds the flags serve and jail share to fs.
func supervisorFlags(fs *flag.FlagSet, cfg *supervisor.Config) {
	fs.StringVar(&cfg.CgroupMode, "cgroup", "auto", "containment: auto, cgroup2 or off")
	fs.DurationVar(&cfg.Retention, "retention", supervisor.DefaultRetention, "how long exited execs are kept for attach")
	fs.DurationVar(&cfg.Drain, "drain", supervisor.DefaultDrain, "how long output is read after an exec's leader exits")
	fs.IntVar(&cfg.RingBytes, "ring", supervisor.DefaultRingBytes, "replay ring size per output stream, in bytes")
	fs.IntVar(&cfg.CommandOOMScoreAdj, "oom-score-adj", supervisor.DefaultCommandOOMScoreAdj, "oom_score_adj each command starts with, 1-1000 (1000: the OOM killer takes commands before the daemon); negative: the daemon's own")
	fs.StringVar(&cfg.SpillDir, "spill-dir", "", "directory of spill files (full output of large streams); keep it on disk, not a RAM tmpfs (default: a spill directory in the daemon's state directory under $TMPDIR)")
	fs.Int64Var(&cfg.SpillBytes, "spill-bytes", supervisor.DefaultSpillBytes, "total size of spill files; a stream past it keeps its first bytes and the result says spill_truncated")
}

func serve(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "unix socket to listen on (required)")
	socketMode := fs.String("socket-mode", "0600", "the socket's permissions, in octal (keep others out with its directory's)")
	var cfg supervisor.Config
	supervisorFlags(fs, &cfg)
	fs.StringVar(&cfg.Dir, "dir", "", "default working directory for execs (default: the daemon's)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "the daemon's state directory (session functions, default spill directory), kept at shutdown (default: a fresh directory under $TMPDIR, removed at shutdown)")
	auth := authFlags(fs)
	private := privateFlag(fs)
	daemonFile := fs.String("daemon-file", "", "file to write, before serving, where this daemon's commands live (pid, RUNBOX_DAEMON marker, cgroup directory) as JSON, so the side that started it can kill what they leave if the daemon dies")
	threads := fs.Int("threads", 0, "OS threads to make at start and keep, so that commands filling a pids limit the daemon shares cannot stop it making one")
	egressProxy := fs.Bool("egress", false, "offer the egress proxy on the sandbox's loopback ("+egress.HTTPAddr+" HTTP, "+egress.SOCKSAddr+" SOCKS5) and its EgressService, for a host side (runboxd egress) to carry its connections: a private-network container's way out")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("serve: --socket is required and takes no arguments")
	}
	stopSignals := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if os.Getpid() == 1 {
		// A container's PID 1: its commands can signal it.
		dropSignalsFromInside()
		stopSignals = []os.Signal{stopSignalAsPID1}
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	mode, err := strconv.ParseUint(*socketMode, 8, 32)
	if err != nil || mode > 0o777 {
		return fmt.Errorf("serve: --socket-mode %q: want octal permissions such as 0600", *socketMode)
	}
	if *threads < 0 || *threads > 1000 {
		return fmt.Errorf("serve: --threads %d: want 0 to 1000", *threads)
	}
	if *private != "" {
		if err := usePrivate(&cfg, *private); err != nil {
			return err
		}
	}
	var also []func(*daemon.Server, *slog.Logger) *egress.Proxy
	if *egressProxy {
		offer, err := listenEgress()
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		also = append(also, offer)
	}
	keepThreads(*threads)
	return serveOn(ctx, cfg, *auth, stderr, func(sup *supervisor.Supervisor) (net.Listener, error) {
		if *daemonFile != "" {
			if err := writeDaemonFile(*daemonFile, sup); err != nil {
				return nil, err
			}
		}
		return daemon.ListenMode(*socket, os.FileMode(mode))
	}, also...)
}

// authConfig is how runboxd authenticates its connections.
type authConfig struct {
	// sum is the SHA-256 of the sandbox's secret, in hex.
	sum string
	// insecure serves every connection unauthenticated (tests only).
	insecure bool
}

// authFlags adds the authentication flags of serve to fs.
func authFlags(fs *flag.FlagSet) *authConfig {
	var a authConfig
	fs.StringVar(&a.sum, "auth-sha256", "", "SHA-256 (hex) of the sandbox's secret: every connection must start with the secret (required)")
	fs.BoolVar(&a.insecure, "insecure-no-auth", false, "serve connections without authentication: any process that reaches the socket controls the sandbox (tests only)")
	return &a
}

// serveOn starts the supervisor, opens the listener and serves until ctx ends
// or a Shutdown RPC arrives. Every connection is authenticated with auth,
// whatever opened the listener, so serve, jail and container modes all are.
func serveOn(ctx context.Context, cfg supervisor.Config, auth authConfig, stderr io.Writer, listen func(*supervisor.Supervisor) (net.Listener, error), also ...func(*daemon.Server, *slog.Logger) *egress.Proxy) error {
	cfg.Version = versionString()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var sum [sha256.Size]byte
	switch {
	case auth.insecure && auth.sum != "":
		return errors.New("--insecure-no-auth and --auth-sha256 exclude each other")
	case auth.insecure:
		log.Warn("serving WITHOUT authentication (--insecure-no-auth, for tests only): any process that reaches the socket controls the sandbox")
	case auth.sum == "":
		return errors.New("no hash of the sandbox's secret (--auth-sha256, or auth_sha256 in a jail's configuration): runboxd does not serve unauthenticated connections; --insecure-no-auth is for tests only")
	default:
		var err error
		if sum, err = daemonauth.ParseSum(auth.sum); err != nil {
			return fmt.Errorf("--auth-sha256: %w", err)
		}
	}
	sup, err := supervisor.New(cfg)
	if err != nil {
		return err
	}
	ln, err := listen(sup)
	if err != nil {
		sup.Shutdown(context.Background(), 0)
		return err
	}
	if !auth.insecure {
		ln = daemonauth.Listen(ln, sum, log)
	}
	log.Info("serving", "socket", ln.Addr().String(), "authenticated", !auth.insecure, "cgroup", sup.Mode(), "version", cfg.Version, "pid", os.Getpid())
	srv := daemon.NewServer(sup, log)
	// Port forwarding reaches the sandbox's loopback for a caller that
	// holds the secret (and so could run any command there anyway).
	fds := &egress.FDServer{Forward: egress.Forwarder{Stop: srv.Stopping()}, Log: log}
	srv.Also(fds.Forward.Handler())
	for _, f := range also {
		if p := f(srv, log); p != nil {
			fds.Proxy = p
		}
	}
	// A host side on this kernel asks for carried connections' sockets
	// instead of their bytes (internal/fdpass); every other connection
	// goes on to the API. Diverted after authentication: the preface is
	// read through the authenticated connection.
	ln = fdpass.Divert(ln, fds.Handle)
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

func proxy(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "runboxd's unix socket (required)")
	mux := fs.Bool("mux", false, "carry many connections as yamux streams (a persistent endpoint's one exec stream)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *socket == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("proxy: --socket is required and takes no arguments")
	}
	// The proxy runs beside the commands (docker exec), in runboxd's view
	// of the filesystem, and carries the client's secret: no command may
	// read its memory or its /proc entries.
	if err := commandview.Undumpable(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The far side going away mid-write is the proxy's normal end: a write
	// to stdout then fails with EPIPE instead of the runtime killing the
	// process with SIGPIPE (Go's rule for descriptors 1 and 2).
	signal.Ignore(syscall.SIGPIPE)
	if *mux {
		return daemon.ProxyMux(ctx, *socket, stdin, stdout)
	}
	return daemon.Proxy(ctx, *socket, stdin, stdout)
}

func versionString() string { return buildinfo.Current() }
