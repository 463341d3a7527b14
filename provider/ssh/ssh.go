package ssh

import (
	"errors"
	"sync"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/procbox"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "ssh"

// TargetEnv names the environment variable that gives Provider.Target its
// default ([user@]host[:port] or a ~/.ssh/config alias), so that
// RUNBOX_PROVIDER=ssh RUNBOX_SSH=buildbox runbox run -- make works.
const TargetEnv = "RUNBOX_SSH"

// Timing knobs. None decides a command's fate: runboxd enforces exec
// deadlines itself on the remote host; these bound how long the provider
// waits on the network and on runboxd.
const (
	// connectTimeout bounds one SSH connection's TCP dial and handshake.
	connectTimeout = 20 * time.Second
	// startTimeout bounds how long Create waits for runboxd to answer.
	startTimeout = 30 * time.Second
	// aliveTimeout bounds the Info probe that decides Sandbox.Alive.
	aliveTimeout = 5 * time.Second
	// shutdownTimeout bounds the Shutdown RPC when the caller's context has
	// no deadline: it takes as long as the slowest exec's grace period.
	shutdownTimeout = 2 * time.Minute
	// exitTimeout is how long Remove waits for runboxd to exit after the
	// Shutdown RPC before it kills it.
	exitTimeout = 10 * time.Second
	// pollInterval is how often Create and Remove look at runboxd.
	pollInterval = 20 * time.Millisecond
	// reconnectPatience is how long a dial keeps trying to reach a host
	// that does not answer before it fails (and the client, after its own
	// window, reports the sandbox lost).
	reconnectPatience = 30 * time.Second
	// keepaliveEvery and keepaliveTimeout detect a connection whose peer
	// vanished without closing it: it is closed, so the next call dials a
	// fresh one.
	keepaliveEvery   = 10 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path is
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

// Errors specific to the ssh provider. Compare with errors.Is.
var (
	// ErrNoTarget means Create was not told which host to use.
	ErrNoTarget = errors.New("no ssh target: give [user@]host[:port] or a ~/.ssh/config alias (runbox up --ssh HOST, or RUNBOX_SSH)")
	// ErrHostKeyUnknown means the host's key is in no known_hosts file.
	// Nothing was sent to the host beyond the SSH handshake.
	ErrHostKeyUnknown = errors.New("ssh host key unknown")
	// ErrHostKeyChanged means known_hosts holds another key for the host:
	// it was reinstalled, or someone is in the middle.
	ErrHostKeyChanged = errors.New("ssh host key changed")
	// ErrArchMismatch means the runboxd binary is built for another
	// architecture than the remote host's (`uname -m`).
	ErrArchMismatch = errors.New("runboxd built for another architecture")
	// ErrAuth means the host accepted none of the credentials offered.
	ErrAuth = errors.New("ssh authentication failed")
)

// Provider creates sandboxes on any Linux host reachable over SSH: runboxd
// is uploaded to the remote user's cache directory (once per version) and
// started detached under a state directory of its own; every call travels
// over one SSH connection, through a direct-streamlocal channel to
// runboxd's unix socket. The zero value is ready to use once Target is
// set for Create; call Close when done with it.
type Provider struct {
	// Home is the runbox home holding this machine's sandbox records and
	// secrets; "" means $RUNBOX_HOME, else ~/.runbox.
	Home string
	// Runboxd is the path of a static runboxd binary for the remote host's
	// architecture; "" means $RUNBOX_RUNBOXD, else a runboxd beside the
	// running executable, else runboxd in PATH.
	Runboxd string
	// Target is where Create makes sandboxes: [user@]host[:port], or an
	// alias of the SSH config; "" means $RUNBOX_SSH.
	Target string
	// AcceptNew records the key of a host that no known_hosts file knows
	// (like StrictHostKeyChecking=accept-new) instead of refusing it. A
	// changed key is refused whatever it says.
	AcceptNew bool
	// ConfigFile is the SSH client configuration read for aliases; ""
	// means ~/.ssh/config and then /etc/ssh/ssh_config; "none" reads none.
	ConfigFile string
	// KnownHostsFiles are the known_hosts files checked (and the first one
	// written by AcceptNew); nil means the config's UserKnownHostsFile and
	// GlobalKnownHostsFile, else ~/.ssh/known_hosts and
	// /etc/ssh/ssh_known_hosts.
	KnownHostsFiles []string
	// AgentSocket is the ssh-agent socket; "" means $SSH_AUTH_SOCK, "none"
	// uses no agent.
	AgentSocket string

	mu    sync.Mutex
	links map[string]*link // open connections, by resolved endpoint
}

var _ runbox.Provider = (*Provider)(nil)

// Name returns "ssh".
func (p *Provider) Name() string { return ProviderName }

// Close closes the provider's SSH connections. Sandboxes live on: their
// runboxd runs detached on the remote host.
func (p *Provider) Close() error {
	p.mu.Lock()
	links := p.links
	p.links = nil
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return nil
}

// home returns the runbox home, absolute and checked (procbox.OpenHome).
func (p *Provider) home() (string, error) { return procbox.OpenHome(p.Home) }
