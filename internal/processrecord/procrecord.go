// Package processrecord reads the record of a sandbox whose runboxd is a
// process on this machine (the host and local providers), tells whether
// that runboxd is still the process recorded, and dials it with the
// sandbox's secret. It is the light part of package procbox, which creates
// and removes such sandboxes: the runbox front (internal/front) uses it to
// reach a sandbox by id without linking procbox's client and providers.
package processrecord

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/recordfile"
)

// Provider names of the records this package reads: the host and local
// providers share the records directory and record their name in each.
const (
	HostProvider  = "host"
	LocalProvider = "local"
)

// AliveTimeout bounds the probe that decides whether a sandbox's runboxd
// answers, so one wedged daemon cannot make a lookup hang.
const AliveTimeout = time.Second

// SecretFile is the name of the file, in a sandbox's directory, holding its
// secret: only its owner may read it (0600), and runboxd is given only its
// SHA-256.
const SecretFile = "secret"

// Record is a sandbox as stored in sandbox.json.
type Record struct {
	ID       string    `json:"id"`
	Name     string    `json:"name,omitempty"`
	Provider string    `json:"provider"`
	Created  time.Time `json:"created"`
	// Pid is runboxd's pid; 0 while Create has not started it yet.
	Pid int `json:"pid"`
	// StartTime is field 22 of /proc/<pid>/stat (clock ticks since boot) and
	// BootID the kernel's boot id: together with Pid they name one process
	// for good, so a recycled pid is never taken for runboxd.
	StartTime uint64 `json:"start_time"`
	BootID    string `json:"boot_id,omitempty"`
	Socket    string `json:"socket"`
	Workdir   string `json:"workdir"`
	Runboxd   string `json:"runboxd"`
	// DaemonMark is the RUNBOX_DAEMON marker in every exec's environment
	// and Cgroup the cgroup v2 directory holding every exec's cgroup (""
	// without cgroups), as runboxd reported them before it served: where
	// its commands are found and killed if it dies without stopping them.
	DaemonMark string `json:"daemon_mark,omitempty"`
	Cgroup     string `json:"cgroup,omitempty"`
	// Extra holds what the provider's Kind records (cgroup paths, ...).
	Extra map[string]string `json:"extra,omitempty"`
}

// RecordID is the id the record claims (recordfile.Record).
func (r Record) RecordID() string { return r.ID }

// RecordCreated is when the sandbox was made (recordfile.Record).
func (r Record) RecordCreated() time.Time { return r.Created }

// Home returns the runbox home: $RUNBOX_HOME, or ~/.runbox when it is
// unset.
func Home() (string, error) {
	if h := os.Getenv("RUNBOX_HOME"); h != "" {
		return h, nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("runbox home: set RUNBOX_HOME: %w", err)
	}
	return filepath.Join(u, ".runbox"), nil
}

// SandboxesDir returns the directory under home that holds one directory
// per sandbox, absolute.
func SandboxesDir(home string) (string, error) {
	abs, err := filepath.Abs(home)
	if err != nil {
		return "", fmt.Errorf("runbox home %s: %w", home, err)
	}
	return filepath.Join(abs, "sandboxes"), nil
}

// Read reads the record in sbDir.
func Read(sbDir string) (Record, error) { return recordfile.Read[Record](sbDir) }

// Alive reports whether the recorded runboxd process is still running:
// same pid, same boot, same start time, and not a zombie.
func Alive(rec Record) bool {
	if rec.Pid <= 0 {
		return false
	}
	if rec.BootID != "" && rec.BootID != BootID() {
		return false
	}
	return SameProcess(rec.Pid, rec.StartTime)
}

// ReadSecret reads the secret of the sandbox in sbDir. A sandbox without
// one (made by a runbox older than authentication) cannot be reached: the
// error wraps runbox.ErrUnauthenticated and says what to do.
func ReadSecret(sbDir string) ([]byte, error) {
	path := filepath.Join(sbDir, SecretFile)
	b, err := daemonauth.ReadSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no secret at %s (a sandbox made before runbox authenticated its connections, or one being removed): remove it with force and create it again", runbox.ErrUnauthenticated, path)
	}
	return b, err
}

// Dialer dials socket and authenticates each connection with the secret in
// sbDir, read at each dial, sent only to a listener of this user's,
// root's or its home owner's (daemonauth.OwnListener; sbDir is
// <home>/sandboxes/<id>).
func Dialer(socket, sbDir string) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		secret, err := ReadSecret(sbDir)
		if err != nil {
			return nil, err
		}
		var d net.Dialer
		return daemonauth.Dialer(daemonauth.OwnListener(func(ctx context.Context) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}, filepath.Dir(filepath.Dir(sbDir))), secret)(ctx)
	}
}

// AliveConn proves the record's runboxd alive and answering: it is the
// process recorded, and it accepts a connection with the sandbox's secret
// within AliveTimeout. That is the handshake alone, without HTTP and a call
// on top; the caller's own call proves the rest. It returns that
// authenticated connection (the caller owns it), or nil.
func AliveConn(ctx context.Context, rec Record, sbDir string) net.Conn {
	if !Alive(rec) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, AliveTimeout)
	defer cancel()
	conn, err := Dialer(rec.Socket, sbDir)(ctx)
	if err != nil {
		return nil
	}
	return conn
}
