package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/fdpass"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a proxy (runboxd's half, on this machine's loopback) served to a
// Host over a unix socket, with backends on 127.0.0.2.
type rig struct {
	httpProxy, socks string
	policy           atomic.Pointer[Policy]
	logs             *syncBuf
	proxy            *Proxy
	host             *Host
	dial             func(context.Context) (net.Conn, error) // to the "daemon" serving EgressService and ForwardService
	served           chan struct{}                           // closed once Host.Serve returned
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// bothModes runs f with bytes carried over EgressService (fds false) and
// with sockets passed (fds true).
func bothModes(t *testing.T, f func(t *testing.T, fds bool)) {
	t.Run("rpc", func(t *testing.T) { f(t, false) })
	t.Run("fd", func(t *testing.T) { f(t, true) })
}

// newRig starts a rig; fds has its host side pass sockets (PassFDs) and its
// "daemon" divert fd-passing connections as runboxd's does.
func newRig(t testing.TB, resolver Resolver, fds bool) *rig {
	t.Helper()
	return newRigWith(t, resolver, fds, nil)
}

// newRigWith is newRig with setup called on its proxy and host side
// before they serve.
func newRigWith(t testing.TB, resolver Resolver, fds bool, setup func(*Proxy, *Host)) *rig {
	t.Helper()
	r := &rig{logs: &syncBuf{}}
	r.policy.Store(&Policy{})
	p := NewProxy(nil)
	r.proxy = p

	sock := filepath.Join(t.TempDir(), "d.sock")
	dln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	mux := http.NewServeMux()
	mux.Handle(p.Handler())
	stop := make(chan struct{})
	mux.Handle(Forwarder{Stop: stop}.Handler())
	// As runboxd's server (internal/daemon): large frames.
	srv := &http.Server{Handler: mux, Protocols: &protocols, HTTP2: &http.HTTP2Config{MaxReadFrameSize: wire.MaxFrameBytes,
		MaxReceiveBufferPerStream: wire.StreamWindowBytes, MaxReceiveBufferPerConnection: wire.ConnWindowBytes}}
	if fds {
		fdSrv := &FDServer{Proxy: p, Forward: Forwarder{Stop: stop}}
		go srv.Serve(fdpass.Divert(dln, fdSrv.Handle))
	} else {
		go srv.Serve(dln)
	}

	r.dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	h := &Host{
		Dial:     r.dial,
		Policy:   func() (Policy, error) { return *r.policy.Load(), nil },
		Resolver: resolver,
		Log:      slog.New(slog.NewTextHandler(r.logs, nil)),
		PassFDs:  fds,
	}
	if setup != nil {
		setup(p, h)
	}
	r.host = h
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	socksLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.httpProxy, r.socks = httpLn.Addr().String(), socksLn.Addr().String()
	go p.ServeHTTPProxy(httpLn)
	go p.ServeSOCKS(socksLn)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	served := make(chan struct{})
	r.served = served
	go func() {
		defer close(served)
		h.Serve(ctx, func() { close(ready) })
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("host side never listening")
	}
	t.Cleanup(func() {
		cancel()
		close(stop)
		<-served
		httpLn.Close()
		socksLn.Close()
		srv.Close()
	})
	return r
}

// backend serves "hello NAME from HOST" on 127.0.0.2.
func backend(t testing.TB, tlsToo bool) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this machine's loopback: %v", err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "hello %s from %s (%d bytes in)", r.URL.Path, r.Host, len(body))
	}))
	s.Listener.Close()
	s.Listener = ln
	if tlsToo {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func port(t *testing.T, s *httptest.Server) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

func proxiedClient(proxy string, tlsCfg *tls.Config) *http.Client {
	u, _ := url.Parse("http://" + proxy)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// testResolver maps test names to loopback addresses; the private-address
// refusal is off for those in private only.
type testResolver struct {
	StaticResolver
	private map[string]bool
}

func (r testResolver) PrivateOK(name string) bool { return r.private[name] }

var loop2 = []netip.Addr{netip.MustParseAddr("127.0.0.2")}

var testNames = testResolver{
	StaticResolver{"allowed.test": loop2, "rebind.test": loop2, "other.test": loop2, "example.com": loop2, "private.test": loop2},
	// private.test is not here: it stands for a public name that
	// resolves to a private address.
	map[string]bool{"allowed.test": true, "rebind.test": true, "other.test": true, "example.com": true},
}

func TestProxyHTTPAllowedDeniedAndRebinding(t *testing.T) {
	bothModes(t, testProxyHTTPAllowedDeniedAndRebinding)
}

func testProxyHTTPAllowedDeniedAndRebinding(t *testing.T, fds bool) {
	b := backend(t, false)
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test", "rebind.test"}, Deny: []string{"rebind.test"}})
	c := proxiedClient(r.httpProxy, nil)

	code, body := get(t, c, "http://allowed.test:"+port(t, b)+"/x")
	if code != 200 || !strings.Contains(body, "hello /x from allowed.test") {
		t.Fatalf("allowed name: %d %q", code, body)
	}
	code, body = get(t, c, "http://other.test:"+port(t, b)+"/x")
	if code != 403 || !strings.Contains(body, "other.test is not in the --allow list") {
		t.Fatalf("name not allowed: %d %q", code, body)
	}
	code, body = get(t, c, "http://rebind.test:"+port(t, b)+"/x")
	if code != 403 || !strings.Contains(body, "--deny rebind.test") {
		t.Fatalf("denied name: %d %q", code, body)
	}
	// A name resolving to loopback, without the range allowed: refused
	// although the name is.
	r.policy.Store(&Policy{Allow: []string{"allowed.test", "private.test"}})
	code, body = get(t, c, "http://private.test:"+port(t, b)+"/x")
	if code != 403 || !strings.Contains(body, "127.0.0.2, a loopback, private or link-local address") {
		t.Fatalf("loopback without --allow-cidr: %d %q", code, body)
	}
	code, body = get(t, c, "http://127.0.0.2:"+port(t, b)+"/x")
	if code != 403 || !strings.Contains(body, "no --allow-cidr covers it") {
		t.Fatalf("raw address: %d %q", code, body)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "egress refused") || !strings.Contains(logs, "other.test is not in the --allow list") {
		t.Errorf("refusals not logged: %s", logs)
	}
}

func TestProxyConnectTLSAndRuntimeChange(t *testing.T) {
	bothModes(t, testProxyConnectTLSAndRuntimeChange)
}

func testProxyConnectTLSAndRuntimeChange(t *testing.T, fds bool) {
	b := backend(t, true)
	r := newRig(t, testNames, fds)
	pool := b.Client().Transport.(*http.Transport).TLSClientConfig
	tlsCfg := &tls.Config{RootCAs: pool.RootCAs, ServerName: "example.com"} // httptest's certificate names example.com
	c := proxiedClient(r.httpProxy, tlsCfg)
	u := "https://example.com:" + port(t, b) + "/pkg"

	code, body := get(t, c, u)
	if code != 0 || !strings.Contains(body, "Forbidden") {
		t.Fatalf("before the policy allows it: %d %q", code, body)
	}
	// A runtime change applies to the next connection.
	r.policy.Store(&Policy{Allow: []string{"*.test", "example.com"}})
	code, body = get(t, c, u)
	if code != 200 || !strings.Contains(body, "hello /pkg") {
		t.Fatalf("CONNECT to an allowed name: %d %q", code, body)
	}
	// A body larger than one message, both ways.
	big := strings.Repeat("z", 300<<10)
	resp, err := c.Post(u, "text/plain", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), fmt.Sprintf("(%d bytes in)", len(big))) {
		t.Fatalf("large upload: %q", got)
	}
}

// socksDial speaks SOCKS5 to addr and asks for host:port; it returns the
// reply code and the connection.
func socksDial(t *testing.T, addr, host string, p int) (byte, net.Conn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(p))
	conn.Write(req)
	var rep [12]byte
	if _, err := io.ReadFull(conn, rep[:12]); err != nil {
		t.Fatal(err)
	}
	return rep[3], conn
}

func TestProxySOCKS5(t *testing.T) { bothModes(t, testProxySOCKS5) }

func testProxySOCKS5(t *testing.T, fds bool) {
	b := backend(t, false)
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	var p int
	fmt.Sscan(port(t, b), &p)

	code, conn := socksDial(t, r.socks, "allowed.test", p)
	defer conn.Close()
	if code != socksSucceeded {
		t.Fatalf("socks to an allowed name: reply %d", code)
	}
	fmt.Fprintf(conn, "GET /s HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "hello /s") {
		t.Fatalf("socks body %q", body)
	}
	code, conn2 := socksDial(t, r.socks, "other.test", p)
	defer conn2.Close()
	if code != socksNotAllowed {
		t.Fatalf("socks to a name not allowed: reply %d", code)
	}
}

// TestProxyWithoutHostSide: with no host side taking connections, a
// command is told so (503) once the wait for one ends.
func TestProxyWithoutHostSide(t *testing.T) {
	p := NewProxy(nil)
	p.hostWait = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go p.ServeHTTPProxy(ln)
	code, body := get(t, proxiedClient(ln.Addr().String(), nil), "http://allowed.test/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no host side") {
		t.Fatalf("without a host side: %d %q", code, body)
	}
}

// TestProxyCloseEndsStreams: Close ends Listen and every Carry in
// progress, so a stopping daemon is not held by an idle connection.
func TestProxyCloseEndsStreams(t *testing.T) { bothModes(t, testProxyCloseEndsStreams) }

func testProxyCloseEndsStreams(t *testing.T, fds bool) {
	b := backend(t, false)
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	var p int
	fmt.Sscan(port(t, b), &p)
	code, conn := socksDial(t, r.socks, "allowed.test", p)
	defer conn.Close()
	if code != socksSucceeded {
		t.Fatalf("reply %d", code)
	}
	r.proxy.Close()
	if !fds {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("an idle carried connection after Close: %v, want EOF", err)
		}
	} // passed sockets are the host side's: they end with its context
	select {
	case <-r.served:
	case <-time.After(30 * time.Second):
		t.Fatal("the host side's Listen did not end after Close")
	}
}
