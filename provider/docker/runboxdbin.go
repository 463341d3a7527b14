package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// staleRunboxd is how old another build's copy of runboxd in the home must
// be before a new copy removes it: a running container keeps the file it
// was given (a bind mount holds the inode), and a day is far longer than a
// Create that chose an older build could still be starting.
const staleRunboxd = 24 * time.Hour

// runboxdCopy returns the home's copy of the runboxd binary bin, made on
// first use: $RUNBOX_HOME/docker/bin/runboxd-<sha256>, mode 0555. A local
// engine bind-mounts it read-only at /.runbox/runboxd, so the binary is
// never in a container's writable layer (nor in a snapshot committed from
// it), and Create copies nothing into the container. The copy is the
// home's, not the file runbox found: the host itself runs that one
// (startEgressHost), and no container ever has it mounted.
func (p *Provider) runboxdCopy(bin []byte) (string, error) {
	home, err := p.home()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	dir := filepath.Join(home, "docker", "bin")
	dst := filepath.Join(dir, "runboxd-"+hex.EncodeToString(sum[:16]))
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(bin)) {
		// Touched, so another build's Create does not prune it as stale.
		now := time.Now()
		os.Chtimes(dst, now, now)
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("runboxd copy: %w", err)
	}
	// Written aside and renamed: a concurrent Create never binds half a file.
	f, err := os.CreateTemp(dir, ".runboxd-*")
	if err != nil {
		return "", fmt.Errorf("runboxd copy: %w", err)
	}
	_, werr := f.Write(bin)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o555)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), dst)
	}
	if werr != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("runboxd copy: %w", werr)
	}
	pruneRunboxd(dir, dst)
	return dst, nil
}

// pruneRunboxd removes other builds' copies in dir not touched for
// staleRunboxd.
func pruneRunboxd(dir, keep string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		if path == keep || !strings.HasPrefix(e.Name(), "runboxd-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleRunboxd {
			os.Remove(path)
		}
	}
}
