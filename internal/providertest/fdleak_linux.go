package providertest

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// LeakedFD is a descriptor the test process holds open without
// close-on-exec, on a fresh directory at a random path that holds a fresh
// secret file: what a careless caller leaves open when it starts runbox
// (`exec 197</dir; runbox up`).
type LeakedFD struct {
	FD     int    // the descriptor's number
	Dir    string // the directory it is open on
	Name   string // the secret file's name in Dir
	Secret string // the secret file's contents
}

// LeakDir plants the directory and the secret, opens it without
// close-on-exec at a high number, and closes it when t ends. Every process
// the test starts from now on inherits it unless something closes it.
func LeakDir(t testing.TB) LeakedFD {
	t.Helper()
	dir, err := os.MkdirTemp("", "rbleak")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l := LeakedFD{Dir: dir, Name: "secret-" + rand.Text(), Secret: "leaked-" + rand.Text()}
	if err := os.WriteFile(filepath.Join(dir, l.Name), []byte(l.Secret), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0) // no O_CLOEXEC: the leak
	if err != nil {
		t.Fatal(err)
	}
	l.FD, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD, 197) // F_DUPFD, not _CLOEXEC
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(l.FD) })
	return l
}

// ProbeCommand is a shell command that lists its own and PID 1's
// descriptors and tries every descriptor number up to 1024, its own and
// PID 1's, as a way to the secret file, printing whatever it reads (with
// shell builtins only: no process per try).
func (l LeakedFD) ProbeCommand() string {
	return fmt.Sprintf(`ls -l /proc/self/fd /proc/1/fd 2>&1
n=0
while [ $n -le 1024 ]; do
  for p in /proc/$$/fd/$n/%[1]s /proc/1/fd/$n/%[1]s; do
    x=; if read -r x 2>/dev/null < $p || [ -n "$x" ]; then echo "$p: $x"; fi
  done
  n=$((n+1))
done
true`, l.Name)
}
