package cli_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// forwardBound bounds each wait of the port-forward tests: for the
// command's first line, a fetch, an exit. A liveness bound, not a speed
// target.
const forwardBound = time.Minute

// TestPortForward runs runbox port-forward (the binary, as a user does)
// against an HTTP server in a sandbox on a random port: with 0:PORT it
// prints a free local address, through which a page arrives, a file of
// several MiB arrives exact (sha256 of the sandbox's copy), and two
// connections open at once each get the file; with LOCAL:PORT it listens
// on LOCAL. SIGINT ends it with exit 0 and nothing on stderr, its port is
// closed after, and no port-forward process is left.
func TestPortForward(t *testing.T) {
	setHome(t)
	id := up(t)
	port, sum, token := startHTTPServer(t, id)

	cmd, addr, stderr := startForward(t, id, "0:"+strconv.Itoa(port))
	if body := fetch(t, "http://"+addr+"/index.html"); string(body) != token+"\n" {
		t.Errorf("index.html through port-forward: %q, want %q", body, token+"\n")
	}
	if got := hashOf(fetch(t, "http://"+addr+"/big.bin")); got != sum {
		t.Errorf("big.bin through port-forward: sha256 %s, want %s", got, sum)
	}
	concurrentFetches(t, addr, "/big.bin", sum)

	local := freePort(t)
	cmd2, addr2, stderr2 := startForward(t, id, fmt.Sprintf("%d:%d", local, port))
	if want := fmt.Sprintf("127.0.0.1:%d", local); addr2 != want {
		t.Errorf("port-forward %d:%d printed %q, want %q", local, port, addr2, want)
	}
	if body := fetch(t, "http://"+addr2+"/index.html"); string(body) != token+"\n" {
		t.Errorf("index.html through port-forward %d:%d: %q", local, port, body)
	}

	for _, f := range []struct {
		cmd    *cmdRun
		addr   string
		stderr *syncBuffer
	}{{cmd, addr, stderr}, {cmd2, addr2, stderr2}} {
		interrupt(t, f.cmd, f.addr)
		if s := f.stderr.String(); s != "" {
			t.Errorf("port-forward to %s wrote on stderr: %q", f.addr, s)
		}
	}
	noForwardLeft(t, id)
}

// TestPortForwardBadInput: a malformed pair and an unknown sandbox are
// runbox failures (exit 125, one line naming them); a connection to a
// port nobody listens on in the sandbox is closed at once with one line on
// stderr naming the port, and the command serves on and exits 0 at SIGINT
// as after any other connection.
func TestPortForwardBadInput(t *testing.T) {
	setHome(t)
	id := up(t)
	for _, pair := range []string{"x:80", "80:", "0:0", "1:70000", "65536:80"} {
		o := runBin(t, "port-forward", id, pair)
		if o.code != 125 || !strings.Contains(o.stderr, strconv.Quote(pair)) || strings.Count(o.stderr, "\n") != 1 || o.stdout != "" {
			t.Errorf("port-forward %s %s: %+v; want exit 125, one line naming %q, no output", id, pair, o, pair)
		}
	}
	o := runBin(t, "port-forward", "nosuch", "80")
	if o.code != 125 || !contains(o.stderr, "nosuch", "no such sandbox") || strings.Count(o.stderr, "\n") != 1 {
		t.Errorf("port-forward nosuch 80: %+v; want exit 125, one line naming nosuch", o)
	}

	dead := freePort(t) // the host sandbox shares this machine's loopback
	cmd, addr, stderr := startForward(t, id, strconv.Itoa(dead))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(forwardBound))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection to dead port %d through port-forward: read %d bytes, %v; want it closed (EOF)", dead, n, err)
	}
	c.Close()
	want := fmt.Sprintf("runbox: port-forward: forward to port %d: nothing answers on port %d in the sandbox", dead, dead)
	deadline := time.Now().Add(forwardBound)
	for !strings.Contains(stderr.String(), want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := stderr.String(); !strings.HasPrefix(s, want) || strings.Count(s, "\n") != 1 {
		t.Errorf("stderr after a connection to dead port %d: %q; want one line starting %q", dead, s, want)
	}
	interrupt(t, cmd, addr)
	noForwardLeft(t, id)
}

// cmdRun is a started runbox command.
type cmdRun struct {
	proc *os.Process
	wait func(bound time.Duration) int
}

// startHTTPServer starts python3's http.server in sandbox id on a random
// port, serving index.html (a random token) and big.bin (8 MiB of random
// bytes), and returns the port, big.bin's sha256 and the token. It skips
// where the sandbox has no python3.
func startHTTPServer(t *testing.T, id string) (port int, sum, token string) {
	t.Helper()
	if o := runBin(t, "exec", id, "--", "command -v python3"); o.code != 0 {
		t.Skipf("no python3 in the sandbox (the host): %+v", o)
	}
	token = fmt.Sprintf("runbox-pf-%d", rand.Int64())
	dir := "/tmp/" + token
	t.Cleanup(func() { runBin(t, "exec", id, "--", "rm -rf "+dir) })
	o := runBin(t, "exec", id, "--", fmt.Sprintf(`mkdir -p %[1]s && echo %[2]s > %[1]s/index.html &&
head -c 8388608 /dev/urandom > %[1]s/big.bin && sha256sum %[1]s/big.bin | cut -d' ' -f1`, dir, token))
	if o.code != 0 {
		t.Fatalf("make the served files: %+v", o)
	}
	sum = strings.TrimSpace(o.stdout)
	for range 5 { // a random port may be taken
		port = 20000 + rand.IntN(10000)
		o = runBin(t, "exec", id, "--", fmt.Sprintf(`python3 -m http.server %[1]d --bind 127.0.0.1 --directory %[2]s >/dev/null 2>&1 &
i=0; while [ $i -lt 300 ]; do
	python3 -c 'import socket; socket.create_connection(("127.0.0.1", %[1]d))' 2>/dev/null && echo up && exit 0
	kill -0 $! 2>/dev/null || exit 1
	sleep 0.1; i=$((i+1))
done; exit 1`, port, dir))
		if o.code == 0 {
			return port, sum, token
		}
		t.Logf("http.server on port %d did not start: %+v", port, o)
	}
	t.Fatal("http.server started on none of 5 random ports")
	return
}

// startForward starts runbox port-forward SANDBOX PAIR, waits for the
// address it prints, and returns the command, the address and its stderr.
func startForward(t *testing.T, id, pair string) (*cmdRun, string, *syncBuffer) {
	t.Helper()
	cmd := binCmd(t, "port-forward", id, pair)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var code int
	run := &cmdRun{proc: cmd.Process, wait: func(bound time.Duration) int {
		once.Do(func() { code, _ = waitExit(t, cmd, bound) })
		return code
	}}
	t.Cleanup(func() {
		cmd.Process.Kill()
		run.wait(forwardBound)
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		addr := strings.TrimSuffix(s, "\n")
		if _, _, err := net.SplitHostPort(addr); err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("port-forward %s %s printed %q (stderr %q); want one line, 127.0.0.1:PORT", id, pair, s, stderr.String())
		}
		return run, addr, stderr
	case <-time.After(forwardBound):
		t.Fatalf("port-forward %s %s printed no address within %v (stderr %q)", id, pair, forwardBound, stderr.String())
		return nil, "", nil
	}
}

// interrupt sends SIGINT to a running port-forward and checks that it
// exits 0 and that its address refuses connections after.
func interrupt(t *testing.T, r *cmdRun, addr string) {
	t.Helper()
	if err := r.proc.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("signal port-forward: %v", err)
	}
	if code := r.wait(forwardBound); code != 0 {
		t.Errorf("port-forward to %s after SIGINT: exit %d, want 0", addr, code)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after port-forward exited", addr)
	}
}

// noForwardLeft checks that no port-forward process of sandbox id is
// left on this machine.
func noForwardLeft(t *testing.T, id string) {
	t.Helper()
	if n := pollCount(t, "port-forward "+id, forwardBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Errorf("%d port-forward processes of %s left after SIGINT", n, id)
	}
}

// fetch GETs url on a connection of its own and returns the body.
func fetch(t *testing.T, url string) []byte {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: forwardBound}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %d bytes, %v", url, resp.Status, len(body), err)
	}
	return body
}

// concurrentFetches opens two connections to addr, sends a GET of path
// on both while both are open, and checks that each body's sha256 is sum.
func concurrentFetches(t *testing.T, addr, path, sum string) {
	t.Helper()
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(forwardBound))
		conns = append(conns, c)
	}
	for _, c := range conns {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("connection %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Errorf("connection %d: read body: %v", i, err)
			}
			if got := hashOf(body); got != sum {
				t.Errorf("connection %d: %s %d bytes, sha256 %s; want %s", i, resp.Status, len(body), got, sum)
			}
		})
	}
	wg.Wait()
}

// hashOf is the hex sha256 of b.
func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
