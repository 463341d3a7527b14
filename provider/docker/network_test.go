package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/provider/docker"
)

// hostServer serves "host says HOST/PATH" on addr (a host loopback
// address) until the test ends, and returns its port.
func hostServer(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host says %s%s", r.Host, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestNetworkPrivate: a docker sandbox on --network private reaches an
// allowed name through runboxd's proxy and the host side (Python's urllib,
// with nothing but the environment runbox sets); a name not allowed and a
// raw address are refused with the rule; a program that ignores the proxy
// cannot connect, to the allowed server neither; a policy change applies
// to the next connection.
func TestNetworkPrivate(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	port := hostServer(t, "127.0.0.2:0")
	sb := create(t, p, runbox.SandboxSpec{Image: toolsImage, Network: docker.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow:     []string{"pkg.test"},
		AllowCIDR: []string{"127.0.0.2/32"},
		Resolve:   map[string]string{"pkg.test": "127.0.0.2", "blocked.test": "127.0.0.2"},
	}})
	c := dial(t, p, sb)
	fetch := func(url string) string {
		t.Helper()
		res := run(t, c, fmt.Sprintf(`python3 -c '
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("%s", timeout=20).read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(), end="")
except OSError as e:
    print("error", e, end="")'`, url))
		return string(res.Stdout) + string(res.Stderr)
	}
	if got := fetch(fmt.Sprintf("http://pkg.test:%d/simple", port)); got != fmt.Sprintf("host says pkg.test:%d/simple", port) {
		t.Errorf("allowed name through the proxy: %q", got)
	}
	if got := fetch(fmt.Sprintf("http://blocked.test:%d/x", port)); !strings.HasPrefix(got, "403") || !strings.Contains(got, "blocked.test is not in the --allow list") {
		t.Errorf("name not allowed: %q", got)
	}
	if got := fetch(fmt.Sprintf("http://127.0.0.3:%d/x", port)); !strings.HasPrefix(got, "403") || !strings.Contains(got, "no --allow-cidr covers it") {
		t.Errorf("raw address: %q", got)
	}
	// A CONNECT tunnel: the command's socket is handed to the host side
	// (fd passing over the bind-mounted socket) and spliced there.
	res := run(t, c, fmt.Sprintf(`python3 - <<'EOF'
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
print(head.split(b"\r\n")[0].decode(), body.split(b"\r\n\r\n", 1)[1].decode(), end="")
EOF`, port, port))
	if got, want := string(res.Stdout), "HTTP/1.1 200 Connection established host says pkg.test/tunnel"; got != want {
		t.Errorf("CONNECT tunnel: %q %q, want %q", got, res.Stderr, want)
	}
	// A program ignoring the proxy variables: the container has no route.
	for _, host := range []string{"127.0.0.2", "172.17.0.1"} {
		res := run(t, c, fmt.Sprintf(`python3 -c '
import socket
try:
    socket.create_connection(("%s", %d), timeout=5); print("reached")
except OSError as e:
    print("refused", e)'`, host, port))
		if !strings.HasPrefix(string(res.Stdout), "refused") {
			t.Errorf("raw connect to %s:%d from inside: %q %q", host, port, res.Stdout, res.Stderr)
		}
	}
	// At runtime: allow blocked.test.
	ctx := context.Background()
	pol, err := p.Egress(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	pol.Allow = append(pol.Allow, "blocked.test")
	if err := p.SetEgress(ctx, sb, pol); err != nil {
		t.Fatal(err)
	}
	if got := fetch(fmt.Sprintf("http://blocked.test:%d/now", port)); got != fmt.Sprintf("host says blocked.test:%d/now", port) {
		t.Errorf("after allowing it at runtime: %q", got)
	}
}

// TestNetworkPrivateRefusals: an allowlist without --network private, and
// private over an exec stream (no socket on this machine for the host
// side), are refused before a container is made.
func TestNetworkPrivateRefusals(t *testing.T) {
	needEngine(t)
	ctx := context.Background()
	_, err := newProvider(t, false).Create(ctx, runbox.SandboxSpec{Image: testImage, Egress: runbox.EgressPolicy{Allow: []string{"a.test"}}})
	if !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("allowlist without private: %v, want ErrInvalidSpec", err)
	}
	_, err = newProvider(t, true).Create(ctx, runbox.SandboxSpec{Image: testImage, Network: docker.NetworkPrivate})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("private over an exec stream: %v, want ErrUnsupported", err)
	}
}

// TestPortForwardPassesTheSocket: with the sandbox's socket on this
// machine, port-forward has runboxd connect to the port inside the
// container and pass that socket (internal/fdpass); the caller splices it.
// Over an exec stream the provider says sockets cannot travel.
func TestPortForwardPassesTheSocket(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	sb := create(t, p, runbox.SandboxSpec{Image: toolsImage})
	if !p.PassesFDs(sb) {
		t.Fatalf("PassesFDs = false with the socket at %q", sb.Detail["socket"])
	}
	c := dial(t, p, sb)
	const port = 18081
	res := run(t, c, fmt.Sprintf(`cd /tmp && echo fd-forwarded > idx.txt && (python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &)
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1`, port, port))
	if res.ExitCode != 0 {
		t.Fatalf("server in the container: %+v", res)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		done <- egress.ForwardConnFD(t.Context(), p.Dialer(sb), port, conn)
	}()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + ln.Addr().String() + "/idx.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(b)) != "fd-forwarded" {
		t.Errorf("through the passed socket: %q", b)
	}
	if err := <-done; err != nil {
		t.Errorf("ForwardConnFD: %v", err)
	}
	forced := newProvider(t, true)
	if forced.PassesFDs(sb) {
		t.Error("PassesFDs = true over a forced exec stream")
	}
}
