// Package dockerrecord reads what the docker provider records, under the
// runbox home, of a sandbox whose runboxd listens on a socket on this
// machine (<home>/docker/<id>/container.json, 0600): its container, labels
// and socket. It is the light part of provider/docker: the runbox front
// (internal/front) dials such a sandbox's runboxd from it, with the
// secret in its labels, without linking an engine client or asking the
// engine. It does not tell whether the container still runs: a socket
// that accepts the sandbox's secret says that.
package dockerrecord

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/recordfile"
)

// Labels on runbox's containers that this package reads (provider/docker
// has the rest).
const (
	LabelSandbox = "runbox.sandbox"
	LabelName    = "runbox.name"
	LabelSocket  = "runbox.socket"
	// LabelSecret holds the sandbox's secret (hex).
	LabelSecret = "runbox.secret"
)

// ContainerFile, in a socket-stream sandbox's state directory, describes
// its container as the engine did at creation.
const ContainerFile = "container.json"

// StreamEnv names the environment variable that, set to "exec", makes
// every client reach runboxd through `docker exec runboxd proxy` rather
// than the socket (provider/docker.StreamEnv).
const StreamEnv = "RUNBOX_DOCKER_STREAM"

// Container is a container as ContainerFile records it.
type Container struct {
	ID, Name string
	Labels   map[string]string
}

// Dir returns the directory under home holding one state directory per
// docker sandbox with a socket.
func Dir(home string) string { return filepath.Join(home, "docker") }

// Read reads the record of sandbox id under home (recordfile.ReadRegular:
// never through a link, a FIFO or a device); a record that names another
// sandbox is an error.
func Read(home, id string) (Container, error) {
	var c Container
	b, err := recordfile.ReadRegular(filepath.Join(Dir(home), id, ContainerFile), recordfile.MaxRecord)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("docker sandbox record %s: %w", id, err)
	}
	if c.Labels[LabelSandbox] != id {
		return c, fmt.Errorf("docker sandbox record %s names sandbox %q", id, c.Labels[LabelSandbox])
	}
	return c, nil
}

// StateDir returns the host directory a socket-stream sandbox keeps its
// run directory in, from its labels, checked to have the
// <home>/docker/<id>/run/runboxd.sock shape (so a foreign label never
// points at another directory), or "".
func StateDir(labels map[string]string) string {
	sock := labels[LabelSocket]
	if sock == "" || !filepath.IsAbs(sock) {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(sock))
	if filepath.Base(sock) != "runboxd.sock" || filepath.Base(filepath.Dir(sock)) != "run" ||
		filepath.Base(dir) != labels[LabelSandbox] || filepath.Base(filepath.Dir(dir)) != "docker" {
		return ""
	}
	return dir
}

// Dialer returns a dialer of the sandbox's runboxd socket that
// authenticates each connection with the secret in its labels, sent only
// to a listener of this user's, root's or its home owner's
// (daemonauth.OwnListener: a runboxd of a non-root image, or under a
// remapped user namespace, is reached by runbox-full instead); ok is false
// when the record has no socket of the right shape or no valid secret.
func (c Container) Dialer() (dial runbox.Dialer, ok bool) {
	dir := StateDir(c.Labels)
	if dir == "" {
		return nil, false
	}
	secret, err := hex.DecodeString(c.Labels[LabelSecret])
	if err != nil || daemonauth.CheckSecret(secret) != nil {
		return nil, false
	}
	socket := c.Labels[LabelSocket]
	return daemonauth.Dialer(daemonauth.OwnListener(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}, filepath.Dir(filepath.Dir(dir))), secret), true
}
