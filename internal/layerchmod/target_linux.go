package layerchmod

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// What the server reads of a caller goes through its /proc/TID entries,
// opened relative to the server's own /proc descriptor (never through a
// path of the server's root, which it changes to the caller's).

// callerCreds reads the file-system credentials of thread tid, and fails
// unless the thread is in the server's own user namespace (where its ids
// and capabilities mean what the server's do).
func callerCreds(proc, tid int) (creds, error) {
	var c creds
	b, err := readAt(proc, strconv.Itoa(tid)+"/status", 16<<10)
	if err != nil {
		return c, err
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		switch key {
		case "Uid", "Gid":
			if len(f) != 4 {
				return c, fmt.Errorf("status: %s: %q", key, val)
			}
			id, err := strconv.Atoi(f[3]) // real, effective, saved, fs
			if err != nil {
				return c, fmt.Errorf("status: %s: %w", key, err)
			}
			if key == "Uid" {
				c.fsuid = id
			} else {
				c.fsgid = id
			}
			seen++
		case "Groups":
			for _, g := range f {
				id, err := strconv.Atoi(g)
				if err != nil {
					return c, fmt.Errorf("status: Groups: %w", err)
				}
				c.groups = append(c.groups, id)
			}
			seen++
		case "CapEff":
			if len(f) != 1 {
				return c, fmt.Errorf("status: CapEff: %q", val)
			}
			c.eff, err = strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				return c, fmt.Errorf("status: CapEff: %w", err)
			}
			seen++
		}
	}
	if seen != 4 {
		return c, fmt.Errorf("status of %d: %d of Uid, Gid, Groups, CapEff", tid, seen)
	}
	var theirs, ours unix.Stat_t
	if err := unix.Fstatat(proc, strconv.Itoa(tid)+"/ns/user", &theirs, 0); err != nil {
		return c, fmt.Errorf("user namespace of %d: %w", tid, err)
	}
	if err := unix.Fstatat(proc, "thread-self/ns/user", &ours, 0); err != nil {
		return c, fmt.Errorf("own user namespace: %w", err)
	}
	if theirs.Dev != ours.Dev || theirs.Ino != ours.Ino {
		return c, errOtherNamespace
	}
	return c, nil
}

var errOtherNamespace = errors.New("layerchmod: the caller is in another user namespace")

// readAt reads at most max bytes of the file name under dir.
func readAt(dir int, name string, max int) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	b := make([]byte, max)
	n := 0
	for n < max {
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return b[:n], nil
}

// pathMax is the kernel's PATH_MAX: a path, with its NUL, fits in it.
const pathMax = 4096

// callerPath reads the NUL-terminated path at addr in tid's memory. It
// answers as the kernel's getname would: EFAULT where the memory cannot
// be read, ENAMETOOLONG past PATH_MAX. It reads page by page, as a string
// may end just before an unmapped page.
func callerPath(proc, tid int, addr uint64) (string, unix.Errno, error) {
	fd, err := unix.Openat(proc, strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, fmt.Errorf("open the memory of %d: %w", tid, err)
	}
	defer unix.Close(fd)
	page := uint64(unix.Getpagesize())
	var buf []byte
	for len(buf) < pathMax {
		at := addr + uint64(len(buf))
		n := min(page-at%page, uint64(pathMax-len(buf)))
		chunk := make([]byte, n)
		got, err := unix.Pread(fd, chunk, int64(at))
		if err == unix.EINTR {
			continue
		}
		if err != nil || got <= 0 {
			return "", unix.EFAULT, nil
		}
		if i := bytes.IndexByte(chunk[:got], 0); i >= 0 {
			return string(append(buf, chunk[:i]...)), 0, nil
		}
		buf = append(buf, chunk[:got]...)
	}
	return "", unix.ENAMETOOLONG, nil
}

// openPinned opens, as an O_PATH descriptor, what the magic link
// /proc/TID/name leads to: the caller's root, working directory, or open
// file (fd/N). missing is the errno to answer when the entry does not
// exist (EBADF for a descriptor the caller does not have).
func openPinned(proc, tid int, name string, missing unix.Errno) (int, unix.Errno, error) {
	fd, err := unix.Openat(proc, strconv.Itoa(tid)+"/"+name, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && missing != 0 {
		return -1, missing, nil
	}
	if err != nil {
		return -1, 0, fmt.Errorf("open %s of %d: %w", name, tid, err)
	}
	return fd, 0, nil
}

// isOPath reports whether the caller's descriptor n was opened with
// O_PATH (fchmod on it fails with EBADF in the kernel).
func isOPath(proc, tid, n int) (bool, error) {
	b, err := readAt(proc, strconv.Itoa(tid)+"/fdinfo/"+strconv.Itoa(n), 4<<10)
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return false, fmt.Errorf("fdinfo flags: %w", err)
			}
			return flags&unix.O_PATH != 0, nil
		}
	}
	return false, errors.New("fdinfo: no flags")
}
