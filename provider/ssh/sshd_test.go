package ssh_test

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// The tests' sshd: a real OpenSSH server on a free 127.0.0.1 port, with
// its own configuration, host key, authorized_keys and log in a temporary
// directory. It never touches a system sshd or its files.

// sshdPath is the OpenSSH server the tests start: $RUNBOX_TEST_SSHD, else
// Debian's.
var sshdPath = func() string {
	if p := os.Getenv("RUNBOX_TEST_SSHD"); p != "" {
		return p
	}
	return "/usr/sbin/sshd"
}()

// testUser is the non-root account the tests log in as when they run as
// root (.ci/run creates it: useradd -m runbox-ssh-test; usermod -p '*').
const testUser = "runbox-ssh-test"

// requireEnv makes a missing sshd (or test user) a failure, not a skip.
const requireEnv = "RUNBOX_REQUIRE_SSH"

// probeSSHD says why the tests cannot run here, or "".
func probeSSHD() string {
	if _, err := os.Stat(sshdPath); err != nil {
		return fmt.Sprintf("no OpenSSH server at %s (apt-get install openssh-server)", sshdPath)
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		return "no ssh-keygen (apt-get install openssh-client)"
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup(testUser); err != nil {
			return fmt.Sprintf("no user %s to log in as (useradd -m -s /bin/bash %s && usermod -p '*' %s)", testUser, testUser, testUser)
		}
	}
	return ""
}

// sshd is a running test server.
type sshd struct {
	dir     string
	port    int
	hostKey gossh.PublicKey
	log     string
	cmd     *exec.Cmd
}

// account is how the tests log in: a user and the private key authorized
// for it.
type account struct {
	user string
	key  string // path of the private key (OpenSSH format)
	pub  gossh.PublicKey
}

// nonRootUser is the non-root user to log in as: testUser as root, else
// the user running the tests (a non-root sshd can only log in its own).
func nonRootUser(t testing.TB) string {
	if os.Geteuid() == 0 {
		return testUser
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// startSSHD starts a server that lets the given users in with one fresh
// key, and stops it when t ends.
func startSSHD(t testing.TB) (*sshd, account) {
	t.Helper()
	req.Need(t)
	dir, err := os.MkdirTemp("", "rbx-sshd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The login user reads authorized_keys with its own rights.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "runbox-test-host", "-f", filepath.Join(dir, "host_ed25519")).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pubBytes, err := os.ReadFile(filepath.Join(dir, "host_ed25519.pub"))
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _, _, _, err := gossh.ParseAuthorizedKey(pubBytes)
	if err != nil {
		t.Fatal(err)
	}
	acct := newKey(t, dir, "id_ed25519")
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(acct.pub), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// OpenSSH's privilege separation directory; Debian's package
		// makes it only when its service starts.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &sshd{dir: dir, hostKey: hostKey, log: filepath.Join(dir, "sshd.log")}
	for attempt := 0; ; attempt++ {
		s.port = freePort(t)
		if err := s.start(); err == nil {
			break
		} else if attempt == 5 {
			t.Fatalf("start sshd: %v", err)
		}
	}
	t.Cleanup(s.stop)
	return s, acct
}

// newKey makes a fresh ed25519 key pair in dir.
func newKey(t testing.TB, dir, name string) account {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "runbox-test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return account{key: path, pub: sshPub}
}

// freePort returns a 127.0.0.1 port nothing listens on just now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *sshd) start() error {
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_ed25519
PidFile %s/sshd.pid
AuthorizedKeysFile %s/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
LogLevel DEBUG1
`, s.port, s.dir, s.dir, s.dir)
	if err := os.WriteFile(filepath.Join(s.dir, "sshd_config"), []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(sshdPath, "-D", "-f", filepath.Join(s.dir, "sshd_config"), "-E", s.log)
	// A test binary that dies (a timeout's panic skips the cleanups) takes
	// its server along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", s.addr()); err == nil {
			c.Close()
			s.cmd = cmd
			go func() { <-exited }()
			return nil
		}
		select {
		case err := <-exited:
			logb, _ := os.ReadFile(s.log)
			return fmt.Errorf("sshd exited: %v: %s %s", err, stderr.String(), logb)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("sshd does not listen on %s", s.addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server and every connection it serves.
func (s *sshd) stop() {
	if s.cmd == nil {
		return
	}
	s.killSessions()
	s.cmd.Process.Kill()
}

// restart stops the server and every connection it serves, waits for
// down, and starts it again on the same port with the same host key.
func (s *sshd) restart(down time.Duration) error {
	s.killSessions()
	s.cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", s.addr())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			return errors.New("the stopped sshd still accepts connections")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(down) // the outage itself, not a synchronisation
	if err := s.start(); err != nil {
		return fmt.Errorf("restart sshd: %w", err)
	}
	return nil
}

func (s *sshd) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// knownHostsLine is the known_hosts line for the server's host key.
func (s *sshd) knownHostsLine() string {
	return fmt.Sprintf("[127.0.0.1]:%d %s", s.port, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(s.hostKey))))
}

// killSessions SIGKILLs every sshd process serving a connection (the
// server's descendants named sshd), which drops every connection at once,
// and returns how many it killed.
func (s *sshd) killSessions() int {
	n := 0
	for _, pid := range descendants(s.cmd.Process.Pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "sshd" {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// countLog counts the lines of the server's log that contain s.
func (s *sshd) countLog(t testing.TB, substr string) int {
	t.Helper()
	f, err := os.Open(s.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}

// descendants returns every process below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
