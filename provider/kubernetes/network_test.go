package kubernetes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/kubernetes"
)

// markerServer serves "MARKER host says HOST/PATH" on addr (an address of
// this machine, the harness's node) until the test ends, with a random
// marker: an answer carrying it came from this server, nothing else.
func markerServer(t *testing.T, addr string) (port int, marker string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	marker = rand.Text()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host says %s%s", marker, r.Host, r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, marker
}

// hostSides counts this machine's live host-side processes of sandbox id
// (runbox-full egress-host kubernetes ID).
func hostSides(t testing.TB, id string) int {
	t.Helper()
	want := "egress-host\x00" + kubernetes.ProviderName + "\x00" + id
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte(want)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i > 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X' {
			n++
		}
	}
	return n
}

// outsideAddr is an IPv4 address of this machine that is not loopback, or
// "" when it has none.
func outsideAddr(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Log("no outside address on this machine: the raw connect is tried on loopback only")
	return ""
}

// waitHostSides waits (bounded) until sandbox id has want host sides here.
func waitHostSides(t testing.TB, id string, want int, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		n := hostSides(t, id)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d host-side processes of %s; want %d", what, n, id, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fetchPy is a command fetching a URL with Python's urllib, which takes
// the proxy from the environment runbox sets: the body, "CODE body" for an
// HTTP error, "error ..." when no connection was made.
func fetchPy(url string) string {
	return fmt.Sprintf(`python3 -c '
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("%s", timeout=30).read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(), end="")
except OSError as e:
    print("error", e, end="")'`, url)
}

// privateProvider is a provider whose private sandboxes' host side is the
// runbox-full built from this tree, with a runbox home of the test's.
func privateProvider(t testing.TB) *kubernetes.Provider {
	t.Helper()
	p := newProvider(t)
	p.Home = shortHome(t)
	p.EgressHost = filepath.Join(buildCLI(t), "runbox-full")
	return p
}

// TestNetworkPrivate: a kubernetes sandbox on --network private reaches an
// allowed name through runboxd's proxy in the pod and its host side on
// this machine (Python's urllib with nothing but the environment runbox
// sets, and a CONNECT tunnel, every byte carried in EgressService
// messages), and gets the marker of a server on this machine's
// 127.0.0.2; a name not allowed and a raw address are refused with the
// rule, and the refusal is in the refusals file; a program that ignores
// the proxy gets no connection (the harness's pods have loopback only);
// a policy change applies to the next connection, both ways; `rm` ends
// the host side and removes its files.
func TestNetworkPrivate(t *testing.T) {
	needCluster(t)
	if toolsMissing != "" {
		t.Skip(toolsMissing)
	}
	p := privateProvider(t)
	port, marker := markerServer(t, "127.0.0.2:0")
	sb := create(t, p, runbox.SandboxSpec{Image: toolsImage, Network: kubernetes.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow:     []string{"pkg.test"},
		AllowCIDR: []string{"127.0.0.2/32"},
		Resolve:   map[string]string{"pkg.test": "127.0.0.2", "blocked.test": "127.0.0.2"},
	}})
	if sb.Detail["network"] != kubernetes.NetworkPrivate {
		t.Errorf("Detail network = %q", sb.Detail["network"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pod, err := testClient(t).CoreV1().Pods(sb.Detail["namespace"]).Get(ctx, sb.Detail["pod"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[kubernetes.LabelNetwork] != kubernetes.NetworkPrivate || pod.Spec.HostNetwork {
		t.Errorf("pod labels %v, hostNetwork %v", pod.Labels, pod.Spec.HostNetwork)
	}
	waitHostSides(t, sb.ID, 1, "after create")
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	sh := func(command string) string {
		t.Helper()
		res, err := c.Exec(ctx, command)
		if err != nil {
			t.Fatalf("exec %q: %v", command, err)
		}
		return string(res.Stdout) + string(res.Stderr)
	}
	fetch := func(url string) string { t.Helper(); return sh(fetchPy(url)) }

	if got, want := fetch(fmt.Sprintf("http://pkg.test:%d/simple", port)), fmt.Sprintf("%s host says pkg.test:%d/simple", marker, port); got != want {
		t.Errorf("allowed name through the proxy: %q, want %q", got, want)
	}
	if got := fetch(fmt.Sprintf("http://blocked.test:%d/x", port)); !strings.HasPrefix(got, "403") || !strings.Contains(got, "blocked.test is not in the --allow list") || strings.Contains(got, marker) {
		t.Errorf("name not allowed: %q", got)
	}
	if got := fetch(fmt.Sprintf("http://127.0.0.3:%d/x", port)); !strings.HasPrefix(got, "403") || !strings.Contains(got, "no --allow-cidr covers it") {
		t.Errorf("raw address: %q", got)
	}
	// A CONNECT tunnel (what HTTPS and git use): carried in messages.
	tunnel := sh(fmt.Sprintf(`python3 - <<'EOF'
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
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
	if want := "HTTP/1.1 200 Connection established " + marker + " host says pkg.test/tunnel"; tunnel != want {
		t.Errorf("CONNECT tunnel: %q, want %q", tunnel, want)
	}
	// A program ignoring the proxy variables: no route, to the allowed
	// server neither (this machine's 127.0.0.2 is the pod's own loopback
	// there), nor to a server on this machine's own outside address.
	type target struct {
		host string
		port int
	}
	targets := []target{{"127.0.0.2", port}, {"1.1.1.1", 80}}
	if ip := outsideAddr(t); ip != "" {
		op, _ := markerServer(t, net.JoinHostPort(ip, "0"))
		targets = append(targets, target{ip, op})
	}
	for _, tg := range targets {
		got := sh(fmt.Sprintf(`python3 -c '
import socket
try:
    socket.create_connection(("%s", %d), timeout=5); print("reached")
except OSError as e:
    print("refused", e)'`, tg.host, tg.port))
		if !strings.HasPrefix(got, "refused") {
			t.Errorf("raw connect to %s:%d from inside: %q", tg.host, tg.port, got)
		}
	}
	if got := sh(`python3 -c '
import urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    print(o.open("http://127.0.0.2:` + fmt.Sprint(port) + `/", timeout=5).read().decode())
except OSError as e:
    print("error", e)'`); !strings.HasPrefix(got, "error") || strings.Contains(got, marker) {
		t.Errorf("urllib without the proxy: %q", got)
	}

	// The refusal is in the refusals file (serve audits it).
	for deadline := time.Now().Add(time.Minute); ; {
		rs, err := p.TakeEgressRefusals(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range rs {
			found = found || r.Host == "blocked.test" && r.Port == port && strings.Contains(r.Rule, "--allow")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal of blocked.test:%d in the refusals file (last read %+v)", port, rs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// At runtime: allow blocked.test, then take pkg.test away.
	pol, err := p.Egress(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	pol.Allow = append(pol.Allow, "blocked.test")
	if err := p.SetEgress(ctx, sb, pol); err != nil {
		t.Fatal(err)
	}
	if got, want := fetch(fmt.Sprintf("http://blocked.test:%d/now", port)), fmt.Sprintf("%s host says blocked.test:%d/now", marker, port); got != want {
		t.Errorf("after allowing it at runtime: %q, want %q", got, want)
	}
	pol.Allow = []string{"blocked.test"}
	if err := p.SetEgress(ctx, sb, pol); err != nil {
		t.Fatal(err)
	}
	if got := fetch(fmt.Sprintf("http://pkg.test:%d/gone", port)); !strings.HasPrefix(got, "403") || !strings.Contains(got, "pkg.test is not in the --allow list") {
		t.Errorf("after taking pkg.test away at runtime: %q", got)
	}

	// rm ends the host side and its files go with the local record.
	if err := p.Remove(ctx, sb, false); err != nil {
		t.Fatal(err)
	}
	waitHostSides(t, sb.ID, 0, "after rm")
	if _, err := os.Stat(filepath.Join(p.Home, "kubernetes", sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("local record after rm: %v", err)
	}
}

// TestNetworkPrivatePodDeleted: a private sandbox's pod deleted behind
// runbox's back ends its host side (the pod watch of its exec stream says
// the pod is lost), and the local record goes with it.
func TestNetworkPrivatePodDeleted(t *testing.T) {
	needCluster(t)
	p := privateProvider(t)
	sb := create(t, p, runbox.SandboxSpec{Network: kubernetes.NetworkPrivate, Egress: runbox.EgressPolicy{Allow: []string{"pkg.test"}}})
	waitHostSides(t, sb.ID, 1, "after create")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testClient(t).CoreV1().Pods(sb.Detail["namespace"]).Delete(ctx, sb.Detail["pod"], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHostSides(t, sb.ID, 0, "after the pod was deleted")
	if _, err := os.Stat(filepath.Join(p.Home, "kubernetes", sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("local record after the pod was deleted: %v", err)
	}
}

// TestNetworkPrivateRefusals: an allowlist without --network private, a
// policy that does not parse, and a private sandbox without a runbox home
// (no local record for a host side) are refused before a pod is made;
// the policy of a sandbox that is not private cannot be read or set.
func TestNetworkPrivateRefusals(t *testing.T) {
	needCluster(t)
	ctx := context.Background()
	_, err := privateProvider(t).Create(ctx, runbox.SandboxSpec{Image: testImage, Egress: runbox.EgressPolicy{Allow: []string{"a.test"}}})
	if !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("allowlist without private: %v, want ErrInvalidSpec", err)
	}
	_, err = privateProvider(t).Create(ctx, runbox.SandboxSpec{Image: testImage, Network: kubernetes.NetworkPrivate, Egress: runbox.EgressPolicy{AllowCIDR: []string{"not a cidr"}}})
	if !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("bad policy: %v, want ErrInvalidSpec", err)
	}
	_, err = newProvider(t).Create(ctx, runbox.SandboxSpec{Image: testImage, Network: kubernetes.NetworkPrivate})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("private without a home: %v, want ErrUnsupported", err)
	}
	p := privateProvider(t)
	none := runbox.Sandbox{ID: hex.EncodeToString([]byte("abcdef")), Detail: map[string]string{"network": "none"}}
	if _, err := p.Egress(ctx, none); !errors.Is(err, kubernetes.ErrNotPrivate) {
		t.Errorf("Egress of a sandbox not private: %v, want ErrNotPrivate", err)
	}
	if err := p.SetEgress(ctx, none, runbox.EgressPolicy{Allow: []string{"a.test"}}); !errors.Is(err, kubernetes.ErrNotPrivate) {
		t.Errorf("SetEgress of a sandbox not private: %v, want ErrNotPrivate", err)
	}
	elsewhere := runbox.Sandbox{ID: none.ID, Detail: map[string]string{"network": kubernetes.NetworkPrivate}}
	if _, err := p.Egress(ctx, elsewhere); !errors.Is(err, kubernetes.ErrNoEgressHost) {
		t.Errorf("Egress of a private sandbox made elsewhere: %v, want ErrNoEgressHost", err)
	}
}

// TestNetworkPrivateCLI: through the real binaries, `runbox up --network
// private --allow ... --resolve ...` starts the host side (runbox-full
// found beside the runbox that handed over), an exec through the
// sandbox's endpoint reaches the allowed name, `runbox network` allows
// another at runtime, and `runbox rm` ends the host side.
func TestNetworkPrivateCLI(t *testing.T) {
	needCluster(t)
	if toolsMissing != "" {
		t.Skip(toolsMissing)
	}
	c := &cliRun{t: t, bin: buildCLI(t), home: shortHome(t)}
	port, marker := markerServer(t, "127.0.0.2:0")
	code, stdout, stderr := c.run("up", "--provider", "kubernetes", "--image", toolsImage, "--network", "private",
		"--allow", "pkg.test", "--allow-cidr", "127.0.0.2/32", "--resolve", "pkg.test=127.0.0.2,blocked.test=127.0.0.2")
	if code != 0 {
		t.Fatalf("up: %d %s", code, stderr)
	}
	id := strings.TrimSpace(stdout)
	t.Cleanup(func() {
		if sock, err := endpoint.Socket(c.home, "kubernetes", id); err == nil {
			if pid := providertest.EndpointPid(t, sock); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		c.run("rm", "--force", id)
	})
	waitHostSides(t, id, 1, "after up")
	if code, stdout, stderr := c.run("exec", id, "--", fetchPy(fmt.Sprintf("http://pkg.test:%d/cli", port))); code != 0 || stdout != fmt.Sprintf("%s host says pkg.test:%d/cli", marker, port) {
		t.Errorf("exec, allowed name: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := c.run("exec", id, "--", fetchPy(fmt.Sprintf("http://blocked.test:%d/cli", port))); code != 0 || !strings.Contains(stdout, "blocked.test is not in the --allow list") {
		t.Errorf("exec, name not allowed: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := c.run("network", id, "--allow", "blocked.test"); code != 0 || !strings.Contains(stdout, "blocked.test") {
		t.Fatalf("network --allow: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := c.run("exec", id, "--", fetchPy(fmt.Sprintf("http://blocked.test:%d/cli", port))); code != 0 || stdout != fmt.Sprintf("%s host says blocked.test:%d/cli", marker, port) {
		t.Errorf("exec after runbox network --allow: %d %q %q", code, stdout, stderr)
	}
	if code, _, stderr := c.run("rm", id); code != 0 {
		t.Fatalf("rm: %d %s", code, stderr)
	}
	waitHostSides(t, id, 0, "after rm")
}
