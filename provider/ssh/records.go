package ssh

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/recordfile"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// record is an ssh sandbox as this machine keeps it, in
// $RUNBOX_HOME/ssh/<id>/sandbox.json beside its secret. The remote host
// holds no record: only runboxd, its socket, log and state.
type record struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Created time.Time `json:"created"`
	// Target is the host as given ([user@]host[:port] or an alias),
	// resolved through the SSH configuration at every connection.
	Target string `json:"target"`
	// Endpoint is what Target resolved to at creation (user@host:port).
	Endpoint string `json:"endpoint"`
	// RemoteDir is the sandbox's state directory on the remote host
	// (socket, log, state, spill files).
	RemoteDir string `json:"remote_dir"`
	// Runboxd is the binary's path on the remote host.
	Runboxd string `json:"runboxd"`
	// Workdir is the remote working directory of execs.
	Workdir string `json:"workdir"`
	// Pid, StartTime (field 22 of its stat) and BootID name the remote
	// runboxd process for good.
	Pid       int    `json:"pid"`
	StartTime string `json:"start_time"`
	BootID    string `json:"boot_id"`
	// Containment is runboxd's mode: "cgroup2" or "proc".
	Containment string `json:"containment"`
}

// socket is runboxd's socket on the remote host.
func (r record) socket() string { return r.RemoteDir + "/runboxd.sock" }

// validName is what a sandbox name may look like (docker's rule).
var validName = sandboxkey.ValidName

// validID is what a sandbox id looks like.
var validID = sandboxkey.ValidID

// secretFile is the name of the file holding a sandbox's secret (0600).
const secretFile = "secret"

// recordsDir returns $home/ssh.
func (p *Provider) recordsDir() (string, error) {
	h, err := p.home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, "ssh"), nil
}

// readRecords reads every record, oldest first; directories without a
// readable record (a Create in progress) are skipped.
func readRecords(dir string) ([]record, error) {
	return recordfile.List[record](dir, validID)
}

func readRecord(sbDir string) (record, error) { return recordfile.Read[record](sbDir) }

// writeRecord replaces sandbox.json atomically.
func writeRecord(sbDir string, r record) error { return recordfile.Write(sbDir, r) }

// RecordID is the id the record claims (recordfile.Record).
func (r record) RecordID() string { return r.ID }

// RecordCreated is when the sandbox was made (recordfile.Record).
func (r record) RecordCreated() time.Time { return r.Created }

// find returns the record key names (exact id, exact name, unique id
// prefix) and its directory.
func (p *Provider) find(key string) (record, string, error) {
	dir, err := p.recordsDir()
	if err != nil {
		return record{}, "", err
	}
	recs, err := readRecords(dir)
	if err != nil {
		return record{}, "", err
	}
	r, err := sandboxkey.Match(recs, key, func(r record) string { return r.ID }, func(r record) string { return r.Name })
	if err != nil {
		return record{}, "", err
	}
	return r, filepath.Join(dir, r.ID), nil
}

// reserve picks a fresh id, makes the sandbox's directory with a fresh
// secret, and writes a preliminary record, under the records' lock, so two
// Creates never take the same name or id.
func reserve(dir string, r record) (record, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, "", fmt.Errorf("runbox home: %w", err)
	}
	unlock, err := recordfile.LockDir(dir)
	if err != nil {
		return r, "", fmt.Errorf("ssh records: %w", err)
	}
	defer unlock()
	if r.Name != "" {
		recs, err := readRecords(dir)
		if err != nil {
			return r, "", err
		}
		for _, o := range recs {
			if o.Name == r.Name {
				return r, "", fmt.Errorf("name %q is used by ssh sandbox %s: %w", r.Name, o.ID, procbox.ErrNameInUse)
			}
		}
	}
	for range 10 {
		id, err := sandboxkey.NewID()
		if err != nil {
			return r, "", err
		}
		r.ID = id
		sbDir := filepath.Join(dir, r.ID)
		if err := os.Mkdir(sbDir, 0o700); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return r, "", fmt.Errorf("sandbox dir: %w", err)
		}
		if err := writeSecret(sbDir); err != nil {
			os.RemoveAll(sbDir)
			return r, "", err
		}
		if err := writeRecord(sbDir, r); err != nil {
			os.RemoveAll(sbDir)
			return r, "", err
		}
		return r, sbDir, nil
	}
	return r, "", errors.New("cannot pick a fresh sandbox id")
}

// writeSecret makes a fresh secret for the sandbox in sbDir.
func writeSecret(sbDir string) error {
	return daemonauth.WriteSecretFile(filepath.Join(sbDir, secretFile))
}

// readSecret reads the sandbox's secret; without it the sandbox cannot be
// reached (runbox.ErrUnauthenticated).
func readSecret(sbDir string) ([]byte, error) {
	return daemonauth.ReadSecretFile(filepath.Join(sbDir, secretFile))
}
