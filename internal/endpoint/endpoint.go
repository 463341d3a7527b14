// Package endpoint is a remote sandbox's persistent endpoint on this
// machine: a small detached process (`runbox-full endpoint PROVIDER ID`)
// that holds one connection to the sandbox's host (an SSH connection for
// provider/ssh; for provider/kubernetes, one pod exec stream running
// `runboxd proxy --mux`, each connection a yamux stream on it) and serves a
// unix socket under the runbox home, so a fresh CLI process reaches the
// sandbox's runboxd with a local dial instead of a handshake of its own
// (the pattern of OpenSSH's ControlMaster).
//
// The endpoint only carries bytes: every connection through it is opened
// to runboxd afresh and is authenticated end to end by the sandbox's secret
// (internal/daemonauth), which the caller presents. Nobody else may use it:
// its directory is 0700, its socket 0600, and it refuses any peer whose
// uid (SO_PEERCRED) is not its own.
//
// Lifecycle. Dial starts the endpoint on first use and waits until it
// listens. The endpoint holds a lock beside its socket for its whole life,
// so a socket whose process is gone (killed, crashed) is stale: the next
// Dial finds nothing accepting on it, starts a new endpoint, which takes
// the lock and replaces the file. It exits, removing its socket, when it
// has carried no connection for its idle time (IdleEnv, default
// DefaultIdle), or when the sandbox is gone: its record removed from this
// machine, or (kubernetes) its pod lost, which the provider's Gone reports. Each connection reaches runboxd anew, so a runboxd replaced on
// the host is reached on the next connection; one that is gone makes the
// endpoint close the connection, and the caller (the front hands over to
// runbox-full) says what became of the sandbox.
//
// This package links no provider: the front (internal/front) dials through
// it; the serving side is given how to reach the sandbox.
package endpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// IdleEnv names the environment variable that sets how long an endpoint
// lives without a connection (a Go duration); "0" or "off" means no
// endpoint: every command reaches the sandbox itself.
const IdleEnv = "RUNBOX_ENDPOINT_IDLE"

// DefaultIdle is how long an endpoint lives without a connection: long
// enough for an agent's pauses between commands, short enough not to hold
// an SSH connection for a sandbox nobody uses.
const DefaultIdle = 10 * time.Minute

// Timing knobs.
const (
	// startTimeout bounds how long Dial waits for a new endpoint to listen
	// (it listens before it connects anywhere: this is process start-up).
	startTimeout = 10 * time.Second
	// goneCheckEvery is how often a serving endpoint looks whether its
	// sandbox's record is still on this machine.
	goneCheckEvery = 2 * time.Second
)

// maxSocketPath is the longest unix socket path Linux accepts.
const maxSocketPath = 107

// ErrDisabled means IdleEnv turns endpoints off.
var ErrDisabled = errors.New("endpoints are off ($" + IdleEnv + ")")

// ErrNotOwn means an endpoint's directory, log or listening process is
// not this user's: Dial neither sends anything to it nor writes there.
var ErrNotOwn = errors.New("not this user's")

// Idle returns the idle time IdleEnv sets, DefaultIdle when unset, or
// ErrDisabled / a parse error.
func Idle() (time.Duration, error) {
	v := os.Getenv(IdleEnv)
	switch v {
	case "":
		return DefaultIdle, nil
	case "0", "off":
		return 0, ErrDisabled
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("$%s=%q: want a positive duration such as 10m, or off", IdleEnv, v)
	}
	return d, nil
}

// Dir returns the directory (0700) holding the endpoints' sockets under a
// runbox home.
func Dir(home string) string { return filepath.Join(home, "endpoints") }

// Socket returns the socket path of sandbox id's endpoint, or an error
// when the home is too deep for a unix socket path.
func Socket(home, provider, id string) (string, error) {
	p := filepath.Join(Dir(home), provider+"-"+id+".sock")
	if len(p) > maxSocketPath {
		return "", fmt.Errorf("endpoint socket %s: longer than a unix socket path may be (%d bytes); use a shorter $RUNBOX_HOME", p, maxSocketPath)
	}
	return p, nil
}
