package main

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
)

// The test binary doubles as runboxd (os/exec's helper-process pattern):
// with RUNBOXD_TEST_MAIN set it runs main instead of the tests. This process
// never hosts a supervisor itself, so os/exec is safe here.
func TestMain(m *testing.M) {
	if os.Getenv("RUNBOXD_TEST_MAIN") == "1" {
		os.Args = append([]string{"runboxd"}, strings.Fields(os.Getenv("RUNBOXD_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testSecret is the sandbox secret of every daemon the tests start: they
// get its hash, as a provider's would.
var testSecret = func() []byte {
	s, err := daemonauth.NewSecret()
	if err != nil {
		panic(err)
	}
	return s
}()

// unixDialer dials socket, and authenticates with secret unless it is nil.
func unixDialer(socket string, secret []byte) runbox.Dialer {
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	if secret == nil {
		return dial
	}
	return daemonauth.Dialer(dial, secret)
}

// startDaemon runs `runboxd serve --socket` with the hash of testSecret in a
// child process and waits for it to answer.
func startDaemon(t *testing.T) (cmd *exec.Cmd, c *client.Client, logs *strings.Builder, socket string) {
	t.Helper()
	dir := t.TempDir()
	socket = filepath.Join(dir, "runboxd.sock")
	cmd = runboxd("serve", "--socket", socket, "--dir", dir, "--auth-sha256", daemonauth.Sum(testSecret))
	logs = new(strings.Builder)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	c = client.New(unixDialer(socket, testSecret), client.WithSandboxName("test"))
	t.Cleanup(func() { c.Close() })
	waitAnswers(t, c, "runboxd", logs)
	return cmd, c, logs, socket
}

// waitAnswers polls c's Info until the daemon answers, failing t (naming
// what did not answer, with its log) after 20 s.
func waitAnswers(t *testing.T, c *client.Client, what string, logs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Info(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer: %v\nlog:\n%s", what, err, logs)
		}
	}
}

// runboxd returns a command running this test binary as runboxd with args.
func runboxd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "RUNBOXD_TEST_MAIN=1", "RUNBOXD_TEST_ARGS="+strings.Join(args, " "))
	return cmd
}

func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("runboxd did not exit")
		return -1
	}
}

func TestServeStopsExecsOnSIGTERM(t *testing.T) {
	cmd, c, logs, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	res, err := c.Exec(ctx, "echo hi")
	if err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	p, err := c.Start(ctx, "sleep 31337", client.WithGrace(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if !res.Cancelled {
		t.Errorf("result = %+v, want cancelled by the daemon's shutdown", res)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("runboxd exited %d, want 0; log:\n%s", code, logs)
	}
	if err := syscall.Kill(res.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("sleep 31337 (pid %d) survived: %v", res.Pid, err)
	}
}

func TestServeExitsAfterShutdownRPC(t *testing.T) {
	cmd, c, logs, _ := startDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("runboxd exited %d, want 0; log:\n%s", code, logs)
	}
	if _, err := c.Info(ctx); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("info after shutdown: %v, want ErrSandboxLost", err)
	}
}

func TestProxyCarriesTheAPI(t *testing.T) {
	// A client whose byte stream is `runboxd proxy` stdio, as providers
	// that only have an exec stream (docker exec) use it.
	_, _, _, socket := startDaemon(t)
	var proxies []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range proxies {
			p.Process.Kill()
			p.Wait()
		}
	})
	c := client.New(daemonauth.Dialer(func(ctx context.Context) (net.Conn, error) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "proxy"), os.NewFile(uintptr(fds[1]), "proxy-stdio")
		defer ours.Close()
		defer theirs.Close()
		p := runboxd("proxy", "--socket", socket)
		p.Stdin, p.Stdout = theirs, theirs
		if err := p.Start(); err != nil {
			return nil, err
		}
		proxies = append(proxies, p)
		return net.FileConn(ours)
	}, testSecret))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, "echo through the proxy")
	if err != nil || string(res.Stdout) != "through the proxy\n" {
		t.Fatalf("exec via proxy: %+v, %v", res, err)
	}
}

// TestProxyMuxCarriesManyConnections: `runboxd proxy --mux` on one byte
// stream (a socketpair, as a pod exec stream is) carries each yamux stream
// to a connection of its own to runboxd: concurrent clients run commands
// with their own exit codes and output, a stream with a wrong secret is
// refused while the others go on, and the proxy exits when its input ends.
func TestProxyMuxCarriesManyConnections(t *testing.T) {
	_, _, _, socket := startDaemon(t)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "mux"), os.NewFile(uintptr(fds[1]), "mux-stdio")
	p := runboxd("proxy", "--mux", "--socket", socket)
	p.Stdin, p.Stdout = theirs, theirs
	var stderr strings.Builder
	p.Stderr = &stderr
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	exited := make(chan error, 1)
	go func() { exited <- p.Wait() }()
	t.Cleanup(func() { p.Process.Kill(); <-exited })
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := yamux.Client(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context) (net.Conn, error) { return sess.Open() }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client.New(daemonauth.Dialer(open, testSecret))
			defer c.Close()
			res, err := c.Exec(ctx, fmt.Sprintf("echo stream %d; exit %d", i, 10+i))
			if err != nil || string(res.Stdout) != fmt.Sprintf("stream %d\n", i) || res.ExitCode != 10+i {
				errs <- fmt.Errorf("stream %d: %+v, %v", i, res, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wrong := append([]byte(nil), testSecret...)
		wrong[0] ^= 0xff
		bad := client.New(daemonauth.Dialer(open, wrong))
		defer bad.Close()
		if _, err := bad.Exec(ctx, "echo let me in"); err == nil {
			errs <- errors.New("a stream with a wrong secret ran a command")
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The end of its input (the exec stream closed) ends the proxy.
	sess.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("proxy --mux exited with %v after its input ended (%q); want 0", err, stderr.String())
		}
		exited <- err
	case <-ctx.Done():
		t.Fatal("proxy --mux still runs after its input ended")
	}
}

func TestUsage(t *testing.T) {
	var out, errOut strings.Builder
	if err := run([]string{"version"}, nil, &out, &errOut); err != nil || out.String() == "" {
		t.Errorf("version: %q, %v", out.String(), err)
	}
	for _, args := range [][]string{nil, {"bogus"}, {"serve"}, {"proxy"}, {"serve", "--socket", "x", "extra"}} {
		if err := run(args, nil, &out, &errOut); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestStaticBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test runs `go build`; run without -short to check the static build")
	}
	// `go test` puts the toolchain running the tests first in PATH.
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go toolchain in PATH (run the tests with go test): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "runboxd")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("runboxd is dynamically linked (%v)", p.Type)
		}
	}
}

func TestSocketMode(t *testing.T) {
	_, _, _, socket := startDaemon(t)
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("default socket mode: %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	dir := t.TempDir()
	open := filepath.Join(dir, "open.sock")
	cmd := runboxd("serve", "--socket", open, "--dir", dir, "--socket-mode", "0666", "--auth-sha256", daemonauth.Sum(testSecret))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(open); err == nil && fi.Mode().Perm() == 0o666 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket with mode 0666 from --socket-mode 0666")
		}
	}
	bad := runboxd("serve", "--socket", filepath.Join(dir, "bad.sock"), "--socket-mode", "rw-rw-rw-", "--auth-sha256", daemonauth.Sum(testSecret))
	var stderr strings.Builder
	bad.Stderr = &stderr
	if err := bad.Run(); err == nil || !strings.Contains(stderr.String(), "--socket-mode") {
		t.Errorf("serve with --socket-mode rw-rw-rw-: %v, %q; want a failure naming the flag", err, stderr.String())
	}
}
