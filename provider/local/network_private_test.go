package local_test

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/provider/local"
)

// freshTag is a random lower-case tag for names no other test uses.
func freshTag() string { return strings.ToLower(rand.Text()[:12]) }

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestNetworkPrivateSpoofedHostsFile: a command that writes its own
// /etc/hosts (the allowed name mapped to a decoy on another host loopback
// address, a denied name mapped to the allowed name's address) gains
// nothing: the host side decides by the name asked for and resolves it
// itself (the policy's --resolve, the test's resolver), so the allowed
// name reaches its real server through every way of the proxy, the
// denied name is refused with a message naming the rule, a client that
// resolves through the spoofed file and hands the proxy an address is
// refused by the address rules or by the Host it carries, and the decoy
// never sees a connection.
func TestNetworkPrivateSpoofedHostsFile(t *testing.T) {
	p := newProvider(t)
	tag := freshTag()
	allowed, denied := "ok-"+tag+".test", "no-"+tag+".test"
	port := hostServer(t, "127.0.0.2:0")
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(port)))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.3:%d on this machine: %v", port, err)
	}
	decoy := &countingListener{Listener: ln}
	ds := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "decoy") })}
	go ds.Serve(decoy)
	t.Cleanup(func() { ds.Close() })

	sb, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow:     []string{allowed},
		AllowCIDR: []string{"127.0.0.2/32"},
		Resolve:   map[string]string{allowed: "127.0.0.2"},
	}})
	got := run(t, c, fmt.Sprintf(`printf '127.0.0.3 %s\n127.0.0.2 %s\n' >> /etc/hosts && getent hosts %s %s`, allowed, denied, allowed, denied))
	if !strings.Contains(got, "127.0.0.3") || !strings.Contains(got, "127.0.0.2") || !strings.Contains(got, allowed) || !strings.Contains(got, denied) {
		t.Fatalf("the sandbox's resolver does not believe its spoofed /etc/hosts: %q", got)
	}
	want := fmt.Sprintf("host says %s:%d/x", allowed, port)
	for _, how := range []string{"", "-p", "--socks5-hostname 127.0.0.1:1080"} { // plain proxy request, CONNECT, SOCKS5 by name
		if got := run(t, c, fmt.Sprintf("curl -sS %s --max-time 20 http://%s:%d/x", how, allowed, port)); got != want {
			t.Errorf("the allowed name (curl %s), spoofed to the decoy inside: %q, want %q", how, got, want)
		}
	}
	res := exec(t, c, fmt.Sprintf("curl -sS --max-time 20 -w '\\n%%{http_code}' http://%s:%d/x", denied, port))
	if !strings.Contains(string(res.Stdout), denied+" is not in the --allow list") || !strings.HasSuffix(string(res.Stdout), "403") {
		t.Errorf("the denied name, spoofed to the allowed address inside: %q %q", res.Stdout, res.Stderr)
	}
	// curl --socks5 resolves in the sandbox (the spoofed file) and hands
	// the proxy an address: the decoy's is covered by no --allow-cidr;
	// the allowed one's is, but the tunnel's Host names the denied name.
	res = exec(t, c, fmt.Sprintf("curl -sS --socks5 127.0.0.1:1080 --max-time 20 http://%s:%d/x", allowed, port))
	if res.ExitCode == 0 || strings.Contains(string(res.Stdout), "decoy") {
		t.Errorf("the allowed name resolved inside to the decoy, through SOCKS5: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = exec(t, c, fmt.Sprintf("curl -sS --socks5 127.0.0.1:1080 --max-time 20 -w '\\n%%{http_code}' http://%s:%d/x", denied, port))
	if !strings.Contains(string(res.Stdout), "the HTTP Host "+denied+": "+denied+" is not in the --allow list") || strings.Contains(string(res.Stdout), "host says") {
		t.Errorf("the denied name resolved inside to the allowed address, through SOCKS5: %q %q", res.Stdout, res.Stderr)
	}
	// Ignoring the proxy, the spoofed address is the sandbox's own loopback.
	if res := exec(t, c, fmt.Sprintf("curl -sS --noproxy '*' --max-time 5 http://%s:%d/x", allowed, port)); res.ExitCode == 0 {
		t.Errorf("the allowed name without the proxy: exit 0, %q", res.Stdout)
	}
	if n := decoy.n.Load(); n != 0 {
		t.Errorf("the decoy the spoofed /etc/hosts names got %d connections", n)
	}
	// The refusal of the decoy's address is logged with its rule.
	path := filepath.Join(filepath.Dir(sb.Detail["socket"]), egress.RefusalsFile)
	rule := "127.0.0.3 is an address, and no --allow-cidr covers it"
	var seen []egress.Refused
	for i := 0; ; i++ {
		rs, err := egress.TakeRefusals(path)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, rs...)
		if found := func() bool {
			for _, r := range seen {
				if r.Host == "127.0.0.3" && r.Port == port && strings.HasPrefix(r.Rule, rule) && r.Via == "socks5" {
					return true
				}
			}
			return false
		}(); found {
			break
		}
		if i == 600 { // a minute: the host side writes within a second
			t.Fatalf("no refusal of the decoy's address with rule %q in %s: %+v", rule, path, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNetworkPrivateProxyEnv: a command in a private sandbox gets
// HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY in both cases, with the
// values of runboxd's proxy on the sandbox's loopback; each proxy
// variable, given to curl as its proxy, reaches an allowed name (nothing
// but runboxd's proxy leads out of the sandbox), and NO_PROXY keeps the
// sandbox's own loopback direct.
func TestNetworkPrivateProxyEnv(t *testing.T) {
	p := newProvider(t)
	name := "env-" + freshTag() + ".test"
	port := hostServer(t, "127.0.0.2:0")
	_, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkPrivate, Egress: runbox.EgressPolicy{
		Allow: []string{name}, AllowCIDR: []string{"127.0.0.2/32"}, Resolve: map[string]string{name: "127.0.0.2"},
	}})
	env := map[string]string{}
	for _, line := range strings.Split(run(t, c, "env"), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	want := map[string]string{
		"HTTP_PROXY": "http://127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:3128",
		"ALL_PROXY": "socks5h://127.0.0.1:1080", "NO_PROXY": "localhost,127.0.0.1,::1",
	}
	for k, v := range want {
		for _, key := range []string{k, strings.ToLower(k)} {
			if got, ok := env[key]; !ok || got != v {
				t.Errorf("%s=%q (set: %v), want %q", key, got, ok, v)
			}
		}
	}
	for _, v := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"} {
		got := run(t, c, fmt.Sprintf(`curl -sS --max-time 20 --proxy "$%s" http://%s:%d/%s`, v, name, port, v))
		if w := fmt.Sprintf("host says %s:%d/%s", name, port, v); got != w {
			t.Errorf("through $%s: %q, want %q", v, got, w)
		}
	}
	// A server on the sandbox's loopback is reached directly (the proxy
	// would refuse a loopback address): NO_PROXY is honoured.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	tok := freshTag()
	got := run(t, c, fmt.Sprintf(`mkdir -p /tmp/www && echo %s > /tmp/www/t.txt && cd /tmp/www && (python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &)
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d))' 2>/dev/null && break; sleep 0.1; done
curl -sS --max-time 20 http://127.0.0.1:%d/t.txt; curl -sS --max-time 20 http://localhost:%d/t.txt`, tok, inner, inner, inner, inner))
	if got != tok+"\n"+tok+"\n" {
		t.Errorf("the sandbox's own loopback with the proxy variables set: %q, want %q twice", got, tok)
	}
}
