package docker

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/runbox/runbox/internal/runboxdbin"
)

// staleRunboxd is how old another build's copy of runboxd in the home must
// be before a new copy removes it: a running container keeps the file it
// was given (a bind mount holds the inode), and a day is far longer than a
// Create that chose an older build could still be starting.
const staleRunboxd = 24 * time.Hour

// runboxdCopy returns the home's copy of the runboxd binary at binPath,
// made on first use: $RUNBOX_HOME/docker/bin/runboxd-<key>, mode 0555,
// checked static when made. A local engine bind-mounts it read-only at
// /.runbox/runboxd, so the binary is never in a container's writable layer
// (nor in a snapshot committed from it), and Create copies nothing into
// the container. The copy is the home's, not the file runbox found: the
// host itself runs that one (startEgressHost), and no container ever has
// it mounted.
//
// The key is the source's path, size and modification time, not its
// content: a Create that finds its copy reads nothing (hashing 16 MiB per
// Create cost about 50 ms of CPU, times N for a fork of N); a rebuilt
// binary has a new time, so a new copy.
func (p *Provider) runboxdCopy(binPath string) (string, error) {
	home, err := p.home()
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(binPath)
	if err != nil {
		return "", fmt.Errorf("runboxd: %w", err)
	}
	abs, _ := filepath.Abs(binPath)
	key := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", abs, fi.Size(), fi.ModTime().UnixNano()))
	dir := filepath.Join(home, "docker", "bin")
	dst := filepath.Join(dir, "runboxd-"+hex.EncodeToString(key[:16]))
	if st, err := os.Stat(dst); err == nil && st.Mode().IsRegular() && st.Size() == fi.Size() {
		// Touched, so another build's Create does not prune it as stale.
		now := time.Now()
		os.Chtimes(dst, now, now)
		return dst, nil
	}
	bin, err := readRunboxd(binPath)
	if err != nil {
		return "", err
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

// readRunboxd reads the runboxd binary at binPath and checks it is static
// (it runs in images without a C library).
func readRunboxd(binPath string) ([]byte, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("read runboxd: %w", err)
	}
	if err := runboxdbin.CheckStatic(bin, binPath); err != nil {
		return nil, err
	}
	return bin, nil
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

// runboxdTar is the archive copied to / before start: /.runbox/runboxd
// (when bin is not nil: a local engine bind-mounts it instead) and the run
// directory (world-writable with the sticky bit, for images whose user is
// not root; on the socket stream a bind mount covers it).
func runboxdTar(bin []byte) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	hdrs := []*tar.Header{
		{Name: ".runbox/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: ".runbox/run/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: now},
	}
	if bin != nil {
		hdrs = append(hdrs, &tar.Header{Name: ".runbox/runboxd", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: now})
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("runboxd archive: %w", err)
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	return &buf, nil
}
