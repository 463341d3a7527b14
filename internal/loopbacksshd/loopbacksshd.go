// Package loopbacksshd starts a real OpenSSH server on a free 127.0.0.1
// port, with its own configuration, host key, authorized_keys and log in a
// temporary directory, and writes the client side that logs in to it (a
// key, known_hosts, an SSH config with aliases, a config for the ssh
// binary). provider/ssh's tests and the bench's ssh rows (`go run ./bench`)
// use it: one server harness for both.
//
// It never touches a system sshd or its files, and it is no way to run a
// server for anyone else: the server accepts only the key it made, logs at
// DEBUG1 (tests count its log lines), and runs with StrictModes off and no
// PAM. As root it needs a non-root user to log in as besides root
// (TestUser); as another user it can log in only that user.
package loopbacksshd

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
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// SSHDEnv names the OpenSSH server to start; Debian's /usr/sbin/sshd when
// unset.
const SSHDEnv = "RUNBOX_TEST_SSHD"

// TestUser is the non-root account to log in as when running as root
// (.ci/run creates it: useradd -m runbox-ssh-test; usermod -p '*').
const TestUser = "runbox-ssh-test"

// Timing of a start and a stop, for a machine under load.
const (
	// listenTimeout bounds the wait for a started server to listen.
	listenTimeout = 30 * time.Second
	// pollInterval is how often a start or a stop looks again.
	pollInterval = 20 * time.Millisecond
	// pipeDelay bounds how long the end of a server waits for its stderr
	// pipe, which a session's process may still hold.
	pipeDelay = time.Second
	// startAttempts is how many free ports a start tries: another process
	// may take the port between the probe and sshd's bind.
	startAttempts = 6
)

// SSHDPath is the OpenSSH server Start runs: $RUNBOX_TEST_SSHD, else
// /usr/sbin/sshd.
func SSHDPath() string {
	if p := os.Getenv(SSHDEnv); p != "" {
		return p
	}
	return "/usr/sbin/sshd"
}

// Probe says why a server cannot run here (no sshd, no ssh-keygen, or, as
// root, no TestUser), or "" when it can.
func Probe() string {
	if _, err := os.Stat(SSHDPath()); err != nil {
		return fmt.Sprintf("no OpenSSH server at %s (apt-get install openssh-server)", SSHDPath())
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		return "no ssh-keygen (apt-get install openssh-client)"
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup(TestUser); err != nil {
			return fmt.Sprintf("no user %s to log in as (useradd -m -s /bin/bash %s && usermod -p '*' %s)", TestUser, TestUser, TestUser)
		}
	}
	return ""
}

// LoginUser is the non-root user to log in as: TestUser as root, else the
// user running this process (a non-root sshd can only log in its own).
func LoginUser() (string, error) {
	if os.Geteuid() == 0 {
		return TestUser, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("current user: %w", err)
	}
	return u.Username, nil
}

// Key is an ed25519 key pair on disk.
type Key struct {
	// Path is the private key's file (OpenSSH format, 0600).
	Path string
	// Public is its public half.
	Public gossh.PublicKey
}

// NewKey makes a fresh ed25519 key pair, written as the file name in dir.
func NewKey(dir, name string) (Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("generate key %s: %w", name, err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "runbox-test")
	if err != nil {
		return Key{}, fmt.Errorf("marshal key %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return Key{}, fmt.Errorf("write key: %w", err)
	}
	sshPub, err := gossh.NewPublicKey(pub)
	if err != nil {
		return Key{}, fmt.Errorf("public key %s: %w", name, err)
	}
	return Key{Path: path, Public: sshPub}, nil
}

// Server is a running loopback sshd.
type Server struct {
	// Dir holds the server's files: sshd_config, host key, authorized_keys,
	// log, and the client key. Close removes it.
	Dir string
	// Port is the 127.0.0.1 port it listens on.
	Port int
	// HostKey is the server's host key.
	HostKey gossh.PublicKey
	// Log is the server's log file (LogLevel DEBUG1).
	Log string
	// Key is the one key authorized_keys lets in, for any user.
	Key Key

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start makes a fresh directory with a host key and an authorized key and
// starts sshd on a free 127.0.0.1 port. The caller must Close the server.
// As root it first makes /run/sshd, OpenSSH's privilege separation
// directory, which Debian's package makes only when its service starts.
func Start() (*Server, error) {
	if why := Probe(); why != "" {
		return nil, errors.New(why)
	}
	dir, err := os.MkdirTemp("", "rbx-sshd-")
	if err != nil {
		return nil, fmt.Errorf("sshd directory: %w", err)
	}
	s, err := start(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func start(dir string) (*Server, error) {
	// The login user reads authorized_keys with its own rights.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sshd directory: %w", err)
	}
	hostKeyFile := filepath.Join(dir, "host_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "runbox-test-host", "-f", hostKeyFile).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ssh-keygen: %w: %s", err, out)
	}
	pubBytes, err := os.ReadFile(hostKeyFile + ".pub")
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	hostKey, _, _, _, err := gossh.ParseAuthorizedKey(pubBytes)
	if err != nil {
		return nil, fmt.Errorf("host key %s.pub: %w", hostKeyFile, err)
	}
	key, err := NewKey(dir, "id_ed25519")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(key.Public), 0o644); err != nil {
		return nil, fmt.Errorf("authorized_keys: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("privilege separation directory: %w", err)
		}
	}
	s := &Server{Dir: dir, HostKey: hostKey, Log: filepath.Join(dir, "sshd.log"), Key: key}
	for attempt := 1; ; attempt++ {
		if s.Port, err = freePort(); err != nil {
			return nil, err
		}
		err := s.start()
		if err == nil {
			return s, nil
		}
		if attempt == startAttempts {
			return nil, fmt.Errorf("start sshd: %w", err)
		}
	}
}

// freePort returns a 127.0.0.1 port nothing listens on just now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start writes the configuration for s.Port, starts sshd and waits until
// it accepts connections.
func (s *Server) start() error {
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
`, s.Port, s.Dir, s.Dir, s.Dir)
	if err := os.WriteFile(filepath.Join(s.Dir, "sshd_config"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("sshd_config: %w", err)
	}
	cmd := exec.Command(SSHDPath(), "-D", "-f", filepath.Join(s.Dir, "sshd_config"), "-E", s.Log)
	// A process that dies (a test timeout's panic skips the cleanups)
	// takes its server along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = pipeDelay
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", SSHDPath(), err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(listenTimeout)
	for {
		if c, err := net.Dial("tcp", s.Addr()); err == nil {
			c.Close()
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			logb, _ := os.ReadFile(s.Log)
			return fmt.Errorf("sshd exited: %v: %s %s", waitErr, stderr.String(), logb)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("sshd does not listen on %s", s.Addr())
		}
		time.Sleep(pollInterval)
	}
}

// Stop kills the server and every connection it serves, and waits for
// the server's process to end. A stopped server stays stopped; Restart
// starts it again.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.KillSessions()
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

// Restart stops the server and every connection it serves, waits until
// nothing accepts on its port, stays down for down, and starts it again on
// the same port with the same host key.
func (s *Server) Restart(down time.Duration) error {
	s.Stop()
	for deadline := time.Now().Add(listenTimeout); ; {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			return errors.New("the stopped sshd still accepts connections")
		}
		time.Sleep(pollInterval)
	}
	time.Sleep(down) // the outage itself, not a synchronisation
	if err := s.start(); err != nil {
		return fmt.Errorf("restart sshd: %w", err)
	}
	return nil
}

// Addr is the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// KnownHostsLine is the known_hosts line for the server's host key.
func (s *Server) KnownHostsLine() string {
	return fmt.Sprintf("[127.0.0.1]:%d %s", s.Port, strings.TrimSpace(string(gossh.MarshalAuthorizedKey(s.HostKey))))
}

// KillSessions SIGKILLs every sshd process serving a connection (the
// server's descendants named sshd or sshd-session), which drops every
// connection at once, and returns how many it killed.
func (s *Server) KillSessions() int {
	if s.cmd == nil {
		return 0
	}
	n := 0
	for _, pid := range descendants(s.cmd.Process.Pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if c := strings.TrimSpace(string(comm)); c == "sshd" || c == "sshd-session" {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

// CountLog counts the lines of the server's log that contain substr.
func (s *Server) CountLog(substr string) (int, error) {
	f, err := os.Open(s.Log)
	if err != nil {
		return 0, fmt.Errorf("sshd log: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("read sshd log: %w", err)
	}
	return n, nil
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
