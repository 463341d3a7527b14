package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/fdpass"
)

// connectAnswer sends a CONNECT for target on a new connection to proxy
// and returns the answer's status and, for a refusal, its body (read to
// EOF); an allowed tunnel is returned open.
func connectAnswer(t testing.TB, proxy, target string) (int, string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(time.Minute)) // a give-up, not a threshold
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return 0, err.Error(), nil
	}
	if resp.StatusCode == http.StatusOK {
		c.SetDeadline(time.Time{})
		return resp.StatusCode, "", c
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close()
	return resp.StatusCode, string(b), nil
}

// wantTooMany fails t unless status and body are a refusal past a bound.
func wantTooMany(t testing.TB, what string, status int, body string) {
	t.Helper()
	if status != http.StatusServiceUnavailable || !strings.Contains(body, RuleTooManyConnections+":") {
		t.Fatalf("%s: %d %q, want 503 naming %s", what, status, body, RuleTooManyConnections)
	}
}

// takeRuleCount flushes log and returns the count its file has for rules
// naming RuleTooManyConnections.
func takeRuleCount(t testing.TB, log *RefusalLog, path string) int64 {
	t.Helper()
	log.Flush()
	rs, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rs {
		if strings.Contains(r.Rule, RuleTooManyConnections+":") {
			n += r.Count
		}
	}
	return n
}

// TestCarriedConnectionsBounded: with a bound of 8 carried connections,
// 64 tunnels opened and held one after the other get 8 carried and 56
// refused at once with a 503 naming the limit, counted in the refusal log
// (fd passing: the host side's bound); this process's descriptors (the
// proxy's, the host side's, the test's clients and the remote's, and the
// pipes splice(2) uses) stay within eight per carried connection. Once they end, the counts fall back
// and a new tunnel goes through.
func TestCarriedConnectionsBounded(t *testing.T) { bothModes(t, testCarriedConnectionsBounded) }

func testCarriedConnectionsBounded(t *testing.T, fds bool) {
	const bound, tries = 8, 64
	path := filepath.Join(t.TempDir(), RefusalsFile)
	refusals := NewRefusalLog(path, nil)
	r := newRigWith(t, testNames, fds, func(p *Proxy, h *Host) {
		p.maxConns, h.MaxConns = bound, bound
		h.Refusals = refusals
	})
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	remote := countingServer(t, "127.0.0.2")
	_, port, _ := net.SplitHostPort(remote)
	target := "allowed.test:" + port
	c, br := connectTo(t, r, target) // lazily started parts first
	if got := halfClose(t, c, br, "x"); got != "got 1" {
		t.Fatalf("first tunnel: %q", got)
	}
	c.Close()
	settle(func() int { return r.proxy.held.count() + r.host.carried.count() }, 0)
	before := openFDs(t)

	var held []net.Conn
	refused := 0
	for i := range tries {
		status, body, conn := connectAnswer(t, r.httpProxy, target)
		if conn != nil {
			held = append(held, conn)
			continue
		}
		wantTooMany(t, fmt.Sprintf("tunnel %d", i), status, body)
		refused++
	}
	during := openFDs(t)
	t.Logf("%d carried, %d refused; descriptors: %d before, %d holding", len(held), refused, before, during)
	if len(held) != bound || refused != tries-bound {
		t.Fatalf("%d tunnels held: %d carried, %d refused; want %d, %d", tries, len(held), refused, bound, tries-bound)
	}
	if during > before+8*bound {
		t.Errorf("%d descriptors open holding %d tunnels, %d before: more than eight each", during, bound, before)
	}
	if fds {
		if n := takeRuleCount(t, refusals, path); n != tries-bound {
			t.Errorf("the refusal log counts %d refusals past the bound, the command got %d", n, tries-bound)
		}
	}
	// A flood of them costs the log a line a second, not a line each.
	if n := strings.Count(r.logs.String(), RuleTooManyConnections+":"); n >= tries-bound {
		t.Errorf("%d log lines for %d refusals past the bound", n, tries-bound)
	}
	for _, c := range held {
		c.Close()
	}
	if n := settle(func() int { return r.proxy.held.count() + r.host.carried.count() }, 0); n != 0 {
		t.Fatalf("%d connections still counted after all ended", n)
	}
	// splice(2)'s pipes are pooled until a collection drops them.
	if n := settle(func() int { runtime.GC(); return openFDs(t) }, before); n > before {
		t.Errorf("%d descriptors open after the tunnels ended, %d before", n, before)
	}
	c, br = connectTo(t, r, target)
	defer c.Close()
	if got := halfClose(t, c, br, "again"); got != "got 5" {
		t.Fatalf("a tunnel after the others ended: %q", got)
	}
}

// TestSlowRequestsBounded: connections that never finish their proxy
// request (half a CONNECT line, a SOCKS5 greeting cut short) hold at most
// MaxPending slots in runboxd (4 here); the ones past it are answered at
// once (a 503 naming the limit, SOCKS5's "not allowed") and closed, and
// so is a well-formed request while the slots are held. Once the slow ones
// go, a new tunnel goes through.
func TestSlowRequestsBounded(t *testing.T) { bothModes(t, testSlowRequestsBounded) }

func testSlowRequestsBounded(t *testing.T, fds bool) {
	const bound, tries = 4, 40
	path := filepath.Join(t.TempDir(), RefusalsFile)
	refusals := NewRefusalLog(path, nil)
	r := newRigWith(t, testNames, fds, func(p *Proxy, h *Host) {
		p.maxPending = bound
		h.Refusals = refusals
	})
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	remote := countingServer(t, "127.0.0.2")
	_, port, _ := net.SplitHostPort(remote)
	target := "allowed.test:" + port
	before := openFDs(t)
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := range tries {
		addr, half := r.httpProxy, "CONNECT "+target
		if i >= bound && i%2 == 1 {
			addr, half = r.socks, "\x05\x01" // a greeting without its methods
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, half)
		slow = append(slow, c)
		if i == bound-1 { // the first ones hold the slots
			if n := settleUp(r.proxy.pending.count, bound); n != bound {
				t.Fatalf("%d slow requests held, want %d", n, bound)
			}
		}
	}
	// Every later one is answered and closed.
	for i, c := range slow[bound:] {
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a give-up, not a threshold
		b, err := io.ReadAll(c)
		if (bound+i)%2 == 1 { // SOCKS5: "no authentication", then "not allowed"
			if string(b) != string([]byte{socksVersion, socksNoAuth, socksVersion, socksNotAllowed, 0, socksIPv4, 0, 0, 0, 0, 0, 0}) {
				t.Fatalf("slow SOCKS5 greeting %d past the bound: %q %v", bound+i, b, err)
			}
			continue
		}
		status, body := 0, string(b)
		if resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(body)), nil); err == nil {
			rb, _ := io.ReadAll(resp.Body)
			status, body = resp.StatusCode, string(rb)
		}
		wantTooMany(t, fmt.Sprintf("slow request %d past the bound (%v)", bound+i, err), status, body)
	}
	status, body, conn := connectAnswer(t, r.httpProxy, target)
	if conn != nil {
		conn.Close()
	}
	wantTooMany(t, "a whole request while the slots are held", status, body)
	during := openFDs(t)
	if during > before+tries+2*bound {
		t.Errorf("%d descriptors open with %d slow requests held (and the test's %d clients), %d before", during, bound, tries, before)
	}
	if fds {
		want := int64(tries - bound + 1)
		var n int64
		for i := 0; i < 3000 && n < want; i++ { // runboxd reports them as they come
			n += takeRuleCount(t, refusals, path)
			if n < want {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if n != want {
			t.Errorf("the refusal log counts %d refusals by runboxd past the bound, the commands got %d", n, want)
		}
	}
	for _, c := range slow[:bound] {
		c.Close()
	}
	if n := settle(func() int { return r.proxy.pending.count() }, 0); n != 0 {
		t.Fatalf("%d slots still held after the slow requests went", n)
	}
	c, br := connectTo(t, r, target)
	defer c.Close()
	if got := halfClose(t, c, br, "ok"); got != "got 2" {
		t.Fatalf("a tunnel after the slow ones went: %q", got)
	}
}

// blockingResolver answers names it lacks only once release is closed,
// counting the lookups waiting: a DNS server that answers slowly.
type blockingResolver struct {
	testResolver
	release chan struct{}
	mu      sync.Mutex
	waiting int
}

func (b *blockingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host != "slow.test" {
		return b.testResolver.LookupNetIP(ctx, network, host)
	}
	b.mu.Lock()
	b.waiting++
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.waiting--; b.mu.Unlock() }()
	select {
	case <-b.release:
		return loop2, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *blockingResolver) PrivateOK(name string) bool {
	return name == "slow.test" || b.testResolver.PrivateOK(name)
}

func (b *blockingResolver) lookups() int { b.mu.Lock(); defer b.mu.Unlock(); return b.waiting }

// TestHostDecisionsBounded: with a bound of 4 connections being decided
// on the host side, 16 tunnels to a name whose DNS answer does not come
// start 4 lookups; the other 12 are refused at once (503 naming the
// limit, in the refusal log). Once the answer comes, the 4 go through.
func TestHostDecisionsBounded(t *testing.T) { bothModes(t, testHostDecisionsBounded) }

func testHostDecisionsBounded(t *testing.T, fds bool) {
	const bound, tries = 4, 16
	res := &blockingResolver{testResolver: testNames, release: make(chan struct{})}
	path := filepath.Join(t.TempDir(), RefusalsFile)
	refusals := NewRefusalLog(path, nil)
	r := newRigWith(t, res, fds, func(p *Proxy, h *Host) {
		h.MaxPending = bound
		h.Refusals = refusals
	})
	r.policy.Store(&Policy{Allow: []string{"slow.test"}})
	remote := countingServer(t, "127.0.0.2")
	_, port, _ := net.SplitHostPort(remote)
	target := "slow.test:" + port
	type answer struct {
		status int
		body   string
		conn   net.Conn
	}
	answers := make(chan answer, tries)
	released := false
	defer func() {
		if !released {
			close(res.release)
		}
	}()
	for range bound {
		go func() {
			s, b, c := connectAnswer(t, r.httpProxy, target)
			answers <- answer{s, b, c}
		}()
	}
	if n := settleUp(res.lookups, bound); n != bound {
		t.Fatalf("%d lookups waiting, want %d", n, bound)
	}
	for i := range tries - bound {
		status, body, conn := connectAnswer(t, r.httpProxy, target)
		if conn != nil {
			conn.Close()
		}
		wantTooMany(t, fmt.Sprintf("tunnel %d while %d are being decided", bound+i, bound), status, body)
	}
	if n := res.lookups(); n != bound {
		t.Errorf("%d lookups waiting after the refusals, want %d", n, bound)
	}
	if n := takeRuleCount(t, refusals, path); n != tries-bound {
		t.Errorf("the refusal log counts %d refusals past the bound, the command got %d", n, tries-bound)
	}
	close(res.release)
	released = true
	for range bound {
		a := <-answers
		if a.conn == nil {
			t.Fatalf("a tunnel decided once the answer came: %d %q", a.status, a.body)
		}
		if got := halfClose(t, a.conn, a.conn, "abc"); !strings.HasSuffix(got, "got 3") {
			t.Errorf("through a tunnel decided late: %q", got)
		}
		a.conn.Close()
	}
}

// TestLookupBounded: a name whose DNS answer never comes is refused once
// the host side's lookup deadline passes, and its slot is free again.
func TestLookupBounded(t *testing.T) { bothModes(t, testLookupBounded) }

func testLookupBounded(t *testing.T, fds bool) {
	res := &blockingResolver{testResolver: testNames, release: make(chan struct{})}
	defer close(res.release)
	r := newRigWith(t, res, fds, func(p *Proxy, h *Host) { h.lookupWait = time.Millisecond })
	r.policy.Store(&Policy{Allow: []string{"slow.test"}})
	status, body, conn := connectAnswer(t, r.httpProxy, "slow.test:443")
	if conn != nil {
		conn.Close()
	}
	if status != http.StatusForbidden || !strings.Contains(body, "cannot resolve slow.test on the host") {
		t.Fatalf("a lookup that never answers: %d %q, want 403 saying it cannot be resolved", status, body)
	}
	if n := settle(func() int { return r.host.deciding.count() + r.host.carried.count() }, 0); n != 0 {
		t.Fatalf("%d slots held after the refusal", n)
	}
}

// settleUp waits for f to come up to want and returns its last value.
func settleUp(f func() int, want int) int {
	n := f()
	for i := 0; i < 3000 && n < want; i++ {
		time.Sleep(10 * time.Millisecond)
		n = f()
	}
	return n
}

// TestHostBoundsHostileRunboxd: a runboxd (a fake one) that ignores every
// bound and hands the host side 64 command sockets at once gets 8
// carried and the rest answered with a 503 naming the limit and closed:
// the host side counts for itself, and its descriptors stay within two
// per carried connection.
func TestHostBoundsHostileRunboxd(t *testing.T) {
	const bound, tries = 8, 64
	remote := countingServer(t, "127.0.0.2")
	_, ps, _ := net.SplitHostPort(remote)
	var port int
	fmt.Sscan(ps, &port)
	cmdLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cmdLn.Close()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	offered := make(chan struct{})
	d := fdpass.Divert(ln, func(service string, c net.Conn) {
		defer c.Close()
		uc, _ := fdpass.UnixConn(c)
		fc := fdpass.New(uc)
		sendMsg(fc, fdMsg{Kind: "hello"}, nil)
		for i := range tries {
			cl, err := net.Dial("tcp", cmdLn.Addr().String())
			if err != nil {
				t.Error(err)
				break
			}
			clients = append(clients, cl)
			srv, err := cmdLn.Accept()
			if err != nil {
				t.Error(err)
				break
			}
			sendMsg(fc, fdMsg{Kind: "offer", ID: uint64(i + 1), Host: "allowed.test", Port: port, Via: "connect"}, srv.(*net.TCPConn))
			srv.Close()
		}
		close(offered)
		io.Copy(io.Discard, c) // until the host side goes
	})
	defer d.Close()
	h := &Host{
		Dial: func(ctx context.Context) (net.Conn, error) {
			var dd net.Dialer
			return dd.DialContext(ctx, "unix", sock)
		},
		Policy:   func() (Policy, error) { return Policy{Allow: []string{"allowed.test"}}, nil },
		Resolver: testNames,
		Log:      slog.New(slog.DiscardHandler),
		PassFDs:  true,
		MaxConns: bound,
	}
	before := openFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, nil) }()
	defer func() { cancel(); <-served }()
	<-offered
	carried, refused := 0, 0
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(time.Minute)) // a give-up, not a threshold
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("command socket %d: %v", i, err)
		}
		if resp.StatusCode == http.StatusOK {
			carried++
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		wantTooMany(t, fmt.Sprintf("command socket %d", i), resp.StatusCode, string(b))
		refused++
	}
	// The test's clients and the host side's connection to the fake
	// runboxd (2) are this process's too; per carried connection the
	// host side holds the command's socket, the remote and up to two
	// pipes for splice(2), and the remote's server its end.
	during := openFDs(t)
	t.Logf("%d carried, %d refused; descriptors %d before, %d holding", carried, refused, before, during)
	if carried != bound || refused != tries-bound {
		t.Fatalf("%d sockets handed over: %d carried, %d refused; want %d, %d", tries, carried, refused, bound, tries-bound)
	}
	if during > before+tries+2+8*bound {
		t.Errorf("%d descriptors open, %d before: more than the clients, the connection to runboxd and eight per carried one", during, before)
	}
}
