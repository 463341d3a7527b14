// Package strangertest gives tests another local user: a process of
// uid UID (nobody) that listens on a unix socket at a path runbox dials,
// captures the first line each connection sends (where runbox's
// handshake puts a sandbox's secret), and answers it as runboxd does. A
// test binary that uses it calls Main from its TestMain: the stranger is
// that binary run again as UID (os/exec's helper-process pattern).
//
// It needs root, to start a process of another uid; it does not pretend
// to be a runboxd beyond the handshake's answer.
package strangertest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// UID is the stranger's uid and gid: an unprivileged host user with no
// group memberships.
const UID = 65534

// env, set to "SOCKET CAPTURE", makes the test binary the stranger.
const env = "RUNBOX_TEST_STRANGER_SQUAT"

// Main runs the tests of m, or, in the stranger's process, squats.
func Main(m *testing.M) {
	if v := os.Getenv(env); v != "" {
		sock, capture, _ := strings.Cut(v, " ")
		os.Exit(squat(sock, capture))
	}
	os.Exit(m.Run())
}

// squat is the stranger's process: it makes the socket's directory if it
// is missing (mode 0777, its own), listens, says so on stdout, and for
// each connection appends its first line to capture and answers
// "RUNBOXD-AUTH OK".
func squat(sock, capture string) int {
	syscall.Umask(0)
	if err := os.MkdirAll(filepath.Dir(sock), 0o777); err != nil {
		fmt.Println(err)
		return 1
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		if f, err := os.OpenFile(capture, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
			f.WriteString(line)
			f.Close()
		}
		io.WriteString(c, "RUNBOXD-AUTH OK\n")
		c.Close()
	}
}

// Command returns the test binary, copied where the stranger may run it,
// as a command of the stranger's that runs no test (`-test.run=^$`): the
// test package's TestMain, seeing an environment variable the caller
// adds to Env, does the stranger's part. own is a fresh directory of the
// stranger's beside it. It skips the test when not run as root.
func Command(t testing.TB) (cmd *exec.Cmd, own string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run a process of another user")
	}
	base := TraversableDir(t)
	own = filepath.Join(base, "own")
	for _, err := range []error{os.Mkdir(own, 0o700), os.Chown(own, UID, UID)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "-test.run=^$")
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: UID, Gid: UID}}
	return cmd, own
}

// Squatter is a stranger's process listening on a socket.
type Squatter struct {
	// Pid is its process id.
	Pid     int
	capture string
}

// Captured returns every first line its connections sent.
func (s *Squatter) Captured() []byte {
	b, _ := os.ReadFile(s.capture)
	return b
}

// Squat starts a stranger listening at sock, whose directory must be
// reachable by UID (or missing in a directory UID may write), and returns
// once it listens; the test's cleanup kills it. It skips the test when not
// run as root.
func Squat(t testing.TB, sock string) *Squatter {
	t.Helper()
	cmd, own := Command(t)
	s := &Squatter{capture: filepath.Join(own, "captured")}
	cmd.Env = append(cmd.Env, env+"="+sock+" "+s.capture)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "listening\n" {
		t.Fatalf("stranger at %s: %q", sock, line)
	}
	s.Pid = cmd.Process.Pid
	return s
}

// RandomHex returns n random hex digits: the names of fresh targets.
func RandomHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// TraversableDir returns a fresh directory at a random, short path that
// only root may write in and every user may pass through (0711): where a
// home of the stranger's that root uses may lie.
func TraversableDir(t testing.TB) string {
	t.Helper()
	base, err := os.MkdirTemp("", "rbh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	return base
}

// SharedHome returns a fresh runbox home at a random, short path (a
// socket path holds at most 107 bytes) in which every user, the stranger
// included, may write: mode 0777 (not sticky), a home runbox refuses
// (homes.Open) whose planted entries the layers below must hold against
// anyway.
func SharedHome(t testing.TB) string {
	t.Helper()
	home := filepath.Join(TraversableDir(t), RandomHex(8))
	for _, err := range []error{os.Mkdir(home, 0o700), os.Chmod(home, 0o777)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return home
}
