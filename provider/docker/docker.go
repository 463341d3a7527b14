package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/dockerrecord"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/runboxdbin"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "docker"

// StreamEnv names the environment variable that, set to "exec", makes every
// Provider reach runboxd through `docker exec runboxd proxy` even when the
// engine is local (for a unix-socket DOCKER_HOST whose engine does not share
// this machine's filesystem).
const StreamEnv = dockerrecord.StreamEnv

// Labels on runbox's containers.
const (
	LabelSandbox = dockerrecord.LabelSandbox
	LabelName    = dockerrecord.LabelName
	LabelSpec    = "runbox.spec"
	LabelCreated = "runbox.created"
	LabelStream  = "runbox.stream"
	LabelSocket  = dockerrecord.LabelSocket
	// LabelSecret holds the sandbox's secret (hex), which every connection
	// to its runboxd starts with; runboxd is given only its hash. See
	// auth.go for why a label.
	LabelSecret = dockerrecord.LabelSecret
)

// Stream kinds, the values of LabelStream.
const (
	streamSocket = "socket"
	streamExec   = "exec"
)

// Paths inside the container.
const (
	ctrRunboxd   = "/.runbox/runboxd"
	ctrRunDir    = "/.runbox/run"
	ctrSocket    = ctrRunDir + "/runboxd.sock"
	ctrWorkspace = "/workspace"
	// defaultNetwork keeps a sandbox off every network unless asked.
	defaultNetwork = "none"
)

// Timing knobs. None decides a command's fate: runboxd enforces exec
// deadlines itself; these bound how long the provider waits on the engine
// and on runboxd.
const (
	// startTimeout bounds how long Create waits for a started container's
	// runboxd to answer.
	startTimeout = 30 * time.Second
	// aliveTimeout bounds the Info probe that decides Sandbox.Alive; on the
	// exec stream it includes a docker exec round trip.
	aliveTimeout = 3 * time.Second
	// shutdownTimeout bounds the Shutdown RPC when the caller's context has
	// no deadline: it takes as long as the slowest exec's grace period.
	shutdownTimeout = 2 * time.Minute
	// exitTimeout is how long Remove waits for the container to stop after
	// the Shutdown RPC before it kills it.
	exitTimeout = 10 * time.Second
	// stopGraceSeconds is the container's own stop timeout: how long
	// `docker stop` (or `podman stop`) without -t waits after the stop
	// signal, while runboxd stops every exec with the stop protocol (each
	// with its grace, DefaultGrace by default), before it kills the
	// container. Docker's default is 10 s; Podman's compatible create
	// records 0 when the request names none, so its `docker stop` killed
	// the container at once and no exec's TERM trap ran: it is set
	// explicitly, to Docker's 10, for both engines.
	stopGraceSeconds = 10
	// pollInterval is how often Create looks for runboxd.
	pollInterval = 20 * time.Millisecond
	// logTailLines is how much of the container's log an error quotes.
	logTailLines = "40"
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path is
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

// Errors specific to the docker provider. Compare with errors.Is.
var (
	// ErrImageRequired means a spec named no image.
	ErrImageRequired = errors.New("a docker sandbox needs an image")
	// ErrNotStatic means the runboxd binary is dynamically linked.
	ErrNotStatic = runboxdbin.ErrNotStatic
)

// Provider creates sandboxes that are Docker containers with runboxd as
// PID 1. The zero value is ready to use; call Close when done with it.
type Provider struct {
	// Home is the runbox home directory, where socket-stream sandboxes keep
	// their bind-mounted run directory; "" means $RUNBOX_HOME, else
	// ~/.runbox. Unix socket paths are limited to 107 bytes.
	Home string
	// Runboxd is the path of a static runboxd binary; "" means
	// $RUNBOX_RUNBOXD, else a runboxd beside the running executable, else
	// runboxd in PATH.
	Runboxd string
	// ForceExecStream reaches runboxd through `docker exec runboxd proxy`
	// even when the engine is local (as RUNBOX_DOCKER_STREAM=exec does).
	ForceExecStream bool
	// Engine is the Docker client to use; nil means one made by
	// NewEngineClient on first use (DOCKER_HOST and the rest of the client
	// environment, else Docker's socket, else Podman's), closed by Close.
	Engine *moby.Client

	mu  sync.Mutex
	own *moby.Client
	// info is what the engine said it is, asked once (infoOK).
	info   EngineInfo
	infoOK bool
	// daemons are runboxd clients Pause and Resume keep per sandbox
	// (daemon), closed by Remove and Close.
	daemons map[string]*rbclient.Client
}

var _ runbox.Provider = (*Provider)(nil)

// Name returns "docker".
func (p *Provider) Name() string { return ProviderName }

// Close closes the engine client the provider made for itself, if any.
// Sandboxes live on.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.daemons {
		c.Close()
		delete(p.daemons, k)
	}
	if p.own == nil {
		return nil
	}
	err := p.own.Close()
	p.own = nil
	return err
}

// engine returns the Docker client.
func (p *Provider) engine() (*moby.Client, error) {
	if p.Engine != nil {
		return p.Engine, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil {
		c, err := NewEngineClient()
		if err != nil {
			return nil, err
		}
		p.own = c
	}
	return p.own, nil
}

// EngineInfo returns what the engine is (Docker or Podman, rootless, which
// limits it enforces), asked once.
func (p *Provider) EngineInfo(ctx context.Context) (EngineInfo, error) {
	cli, err := p.engine()
	if err != nil {
		return EngineInfo{}, err
	}
	return p.engineInfo(ctx, cli)
}

func (p *Provider) engineInfo(ctx context.Context, cli *moby.Client) (EngineInfo, error) {
	p.mu.Lock()
	if p.infoOK {
		defer p.mu.Unlock()
		return p.info, nil
	}
	p.mu.Unlock()
	e, err := probeEngine(ctx, cli)
	if err != nil {
		return EngineInfo{}, err
	}
	p.mu.Lock()
	p.info, p.infoOK = e, true
	p.mu.Unlock()
	return e, nil
}

// execForced reports whether every stream must be a docker exec.
func (p *Provider) execForced() bool {
	return p.ForceExecStream || os.Getenv(StreamEnv) == streamExec
}

// home returns the runbox home, absolute and checked (procbox.OpenHome).
func (p *Provider) home() (string, error) { return procbox.OpenHome(p.Home) }

// engineError marks a failure to reach the engine at all as
// runbox.ErrProviderUnavailable, saying where it was looked for.
func engineError(cli *moby.Client, err error) error {
	if !moby.IsErrConnectionFailed(err) {
		return err
	}
	// The engine client's own message repeats the address and adds advice;
	// the system call's error ("connect: no such file or directory",
	// "permission denied") is the part worth keeping.
	cause := err
	if op := (*net.OpError)(nil); errors.As(err, &op) {
		cause = op.Err
	}
	return &engineUnavailable{
		msg:   fmt.Sprintf("no docker engine answers at %s (%v; start dockerd, or point DOCKER_HOST at one)", cli.DaemonHost(), cause),
		cause: err,
	}
}

// engineUnavailable is a failure to reach the engine: its message is one
// short line, and it is runbox.ErrProviderUnavailable and the engine
// client's error to errors.Is and errors.As.
type engineUnavailable struct {
	msg   string
	cause error
}

func (e *engineUnavailable) Error() string {
	return runbox.ErrProviderUnavailable.Error() + ": " + e.msg
}

func (e *engineUnavailable) Unwrap() []error { return []error{runbox.ErrProviderUnavailable, e.cause} }

// isLocal reports whether the engine listens on a unix socket, which is
// taken to mean it shares this machine's filesystem.
func isLocal(cli *moby.Client) bool {
	return strings.HasPrefix(cli.DaemonHost(), "unix://")
}
