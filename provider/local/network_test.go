package local_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/provider/local"
)

// hostServer serves "host says NAME" on addr (a host loopback address)
// until the test ends, and returns its port.
func hostServer(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s on this machine: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host says %s%s", r.Host, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestNetworkPrivateEgress: a private sandbox reaches an allowed name
// through the proxy (curl, with nothing but the environment runbox sets),
// is told which rule refused a name that is not allowed, cannot connect to
// the host's loopback directly, and a policy change applies to the next
// connection.
func TestNetworkPrivateEgress(t *testing.T) {
	p := newProvider(t)
	port := hostServer(t, "127.0.0.2:0")
	lport := hostServer(t, "127.0.0.1:0")
	sb, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow:     []string{"pkg.test", "*.rebind.test"},
		AllowCIDR: []string{"127.0.0.2/32"},
		Resolve:   map[string]string{"pkg.test": "127.0.0.2", "a.rebind.test": "127.0.0.1", "blocked.test": "127.0.0.2"},
	}})
	if sb.Detail["network"] != "private" || sb.Detail["egress_pid"] == "" {
		t.Errorf("detail: %v", sb.Detail)
	}
	got := run(t, c, fmt.Sprintf("curl -sS --max-time 20 http://pkg.test:%d/simple", port))
	if got != "host says pkg.test:"+strconv.Itoa(port)+"/simple" {
		t.Errorf("allowed name through the proxy: %q", got)
	}
	// Through a CONNECT tunnel (curl -p) and SOCKS5: the command's socket
	// is handed to the host side (fd passing) and spliced there.
	for _, how := range []string{"-p", "--socks5-hostname 127.0.0.1:1080"} {
		got := run(t, c, fmt.Sprintf("curl -sS %s --max-time 20 http://pkg.test:%d/tunnel", how, port))
		if got != "host says pkg.test:"+strconv.Itoa(port)+"/tunnel" {
			t.Errorf("allowed name through the proxy (curl %s): %q", how, got)
		}
	}
	res := exec(t, c, fmt.Sprintf("curl -sS --max-time 20 -w '\\n%%{http_code}' http://blocked.test:%d/x", port))
	if !strings.Contains(string(res.Stdout), "blocked.test is not in the --allow list") || !strings.HasSuffix(string(res.Stdout), "403") {
		t.Errorf("name not allowed: %q %q", res.Stdout, res.Stderr)
	}
	// An allowed name that resolves to the host's loopback, whose range is
	// not allowed: refused (DNS rebinding).
	res = exec(t, c, fmt.Sprintf("curl -sS --max-time 20 -w '\\n%%{http_code}' http://a.rebind.test:%d/x", lport))
	if !strings.Contains(string(res.Stdout), "a loopback, private or link-local address") || !strings.HasSuffix(string(res.Stdout), "403") {
		t.Errorf("allowed name resolving to loopback: %q %q", res.Stdout, res.Stderr)
	}
	// HTTPS-style CONNECT through the proxy reaches the allowed name too
	// (the tunnel is opened; the plain server then answers in clear).
	got = run(t, c, fmt.Sprintf(`python3 - <<'EOF'
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"CONNECT pkg.test:%d HTTP/1.1\r\nHost: pkg.test:%d\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
s.sendall(b"GET /tunnel HTTP/1.0\r\nHost: pkg.test\r\n\r\n")
body = b""
while True:
    b = s.recv(65536)
    if not b: break
    body += b
print(head.split(b"\r\n")[0].decode(), body.split(b"\r\n\r\n", 1)[1].decode())
EOF`, port, port))
	if strings.TrimSpace(got) != "HTTP/1.1 200 Connection established host says pkg.test/tunnel" {
		t.Errorf("CONNECT: %q", got)
	}
	// A program that ignores the proxy variables: no route to the host's
	// loopback servers, to the allowed one neither.
	for _, a := range []string{fmt.Sprintf("127.0.0.2:%d", port), fmt.Sprintf("127.0.0.1:%d", lport)} {
		host, prt, _ := net.SplitHostPort(a)
		got = run(t, c, fmt.Sprintf(`python3 -c 'import socket
try:
    socket.create_connection(("%s", %s), timeout=5); print("reached")
except OSError as e:
    print("refused", e.errno)'`, host, prt))
		if !strings.HasPrefix(got, "refused") {
			t.Errorf("raw connect to the host's %s from inside: %q", a, got)
		}
	}
	// At runtime: allow blocked.test; the next connection goes through.
	dir := filepath.Dir(sb.Detail["socket"])
	pol, err := egress.ReadPolicy(filepath.Join(dir, egress.PolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	pol.Allow = append(pol.Allow, "blocked.test")
	if err := egress.WritePolicy(filepath.Join(dir, egress.PolicyFile), pol); err != nil {
		t.Fatal(err)
	}
	got = run(t, c, fmt.Sprintf("curl -sS --max-time 20 http://blocked.test:%d/now", port))
	if got != "host says blocked.test:"+strconv.Itoa(port)+"/now" {
		t.Errorf("after allowing it at runtime: %q", got)
	}
	// The refusals are in the sandbox's log.
	log, _ := os.ReadFile(filepath.Join(dir, "runboxd.log"))
	if !strings.Contains(string(log), "egress refused") {
		t.Errorf("no refusal in the sandbox log:\n%s", log)
	}
}

// TestNetworkPrivateIsolation: a server listening on the sandbox's
// loopback is not reachable from the host, and the host-side process ends
// with the sandbox.
func TestNetworkPrivateIsolation(t *testing.T) {
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate})
	// A free port on the host's loopback is one the sandbox listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	res := exec(t, c, fmt.Sprintf(`python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", %d)); s.listen(); print("up", flush=True); time.sleep(60)' & sleep 1; echo started`, port))
	if !strings.Contains(string(res.Stdout), "up") {
		t.Fatalf("server inside: %q %q", res.Stdout, res.Stderr)
	}
	if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second); err == nil {
		conn.Close()
		t.Errorf("a server on the sandbox's loopback was reached from the host")
	}
	pid, _ := strconv.Atoi(sb.Detail["egress_pid"])
	if pid <= 0 {
		t.Fatalf("no egress_pid in %v", sb.Detail)
	}
	if err := p.Remove(t.Context(), sb, true); err != nil {
		t.Fatal(err)
	}
	gone := false
	for range 100 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil {
			gone = true
			break
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if strings.Contains(string(b), ") Z ") {
			gone = true // exited; its reaper is this test process's goroutine
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !gone {
		t.Errorf("the egress host side (pid %d) outlived its sandbox", pid)
	}
}

// TestCLINetworkPrivate: runbox up --network private --allow ... through
// the CLI; runbox network adds a rule the next connection gets (--deny
// wins over --allow); an
// allowlist without --network private, and a malformed rule, are refused
// with exit 125 before anything is made.
func TestCLINetworkPrivate(t *testing.T) {
	rb := localCLI(t)
	port := hostServer(t, "127.0.0.2:0")
	id := upLocal(t, rb, "--network", "private", "--allow", "pkg.test,late.test", "--resolve", "pkg.test=127.0.0.2,late.test=127.0.0.2")
	curl := func(name string) (int, string) {
		code, out, errs := rb("exec", id, "--", fmt.Sprintf("curl -sS --max-time 20 -w ' %%{http_code}' http://%s:%d/p", name, port))
		if code != 0 {
			t.Fatalf("curl %s: exit %d, %q %q", name, code, out, errs)
		}
		return code, out
	}
	// Allowed by name, but its address is loopback and no range allows it.
	if _, out := curl("pkg.test"); !strings.Contains(out, "127.0.0.2, a loopback") || !strings.HasSuffix(out, " 403") {
		t.Errorf("before --allow-cidr: %q", out)
	}
	if code, out, errs := rb("network", id, "--allow-cidr", "127.0.0.2/32"); code != 0 || !strings.Contains(out, `"127.0.0.2/32"`) {
		t.Fatalf("runbox network: exit %d, %q %q", code, out, errs)
	}
	if _, out := curl("pkg.test"); out != fmt.Sprintf("host says pkg.test:%d/p 200", port) {
		t.Errorf("after runbox network --allow-cidr: %q", out)
	}
	if code, _, errs := rb("network", id, "--replace", "--allow", "late.test", "--allow-cidr", "127.0.0.2"); code != 0 {
		t.Fatalf("runbox network --replace: exit %d, %q", code, errs)
	}
	if _, out := curl("pkg.test"); !strings.Contains(out, "pkg.test is not in the --allow list") {
		t.Errorf("after --replace (pkg.test dropped, its --resolve too): %q", out)
	}
	// --deny wins over --allow: the name is refused by the deny rule.
	if code, out, errs := rb("network", id, "--allow", "*.test", "--deny", "late.test"); code != 0 || !strings.Contains(out, `"late.test"`) {
		t.Fatalf("runbox network --deny: exit %d, %q %q", code, out, errs)
	}
	if _, out := curl("late.test"); !strings.Contains(out, "late.test") || !strings.Contains(out, "deny") || !strings.HasSuffix(out, " 403") {
		t.Errorf("after runbox network --deny late.test: %q", out)
	}
	for _, args := range [][]string{
		{"up", "--workdir", t.TempDir(), "--allow", "pkg.test"},
		{"up", "--workdir", t.TempDir(), "--network", "private", "--allow", "a.*.test"},
		{"up", "--workdir", t.TempDir(), "--network", "private", "--allow-cidr", "10.0.0.0/40"},
	} {
		if code, _, errs := rb(args...); code != 125 || errs == "" {
			t.Errorf("%q: exit %d, %q; want 125 with a reason", args, code, errs)
		}
	}
	host := upLocal(t, rb)
	if code, _, errs := rb("network", host, "--allow", "x.test"); code != 125 || !strings.Contains(errs, "not on the private network") {
		t.Errorf("runbox network on a host-network sandbox: exit %d, %q", code, errs)
	}
}

// TestPortForwardPrivate: a server on a private sandbox's loopback, not
// reachable from the host directly, is reached through port forwarding
// over the sandbox's own channel (what runbox port-forward does); a port
// nothing listens on is refused, not hung.
func TestPortForwardPrivate(t *testing.T) {
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate})
	token := fmt.Sprintf("tok-%d", time.Now().UnixNano())
	ln0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln0.Addr().(*net.TCPAddr).Port
	ln0.Close()
	run(t, c, fmt.Sprintf(`echo %s > /workspace/index.txt; cd /workspace; python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1`, token, port, port))
	if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second); err == nil {
		conn.Close()
		t.Fatal("the sandbox's loopback server was reached from the host without forwarding")
	}
	fc, closeIdle := egress.NewForwardClient(p.Dialer(sb))
	defer closeIdle()
	forward := func(remote int, fds bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if fds {
				egress.ForwardConnFD(t.Context(), p.Dialer(sb), remote, conn)
			} else {
				egress.ForwardConn(t.Context(), fc, remote, conn)
			}
		}()
		defer func() { ln.Close(); <-done }()
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + ln.Addr().String() + "/index.txt")
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	for _, fds := range []bool{false, true} { // ForwardService, and runboxd passing the socket
		if got := forward(port, fds); got != token {
			t.Errorf("through port forwarding (fds %v): %q, want %q", fds, got, token)
		}
		if got := forward(port+1, fds); !strings.HasPrefix(got, "error:") {
			t.Errorf("a port nothing listens on (fds %v): %q, want an error", fds, got)
		}
	}
}
