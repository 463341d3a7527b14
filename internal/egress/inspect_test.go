package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestProxySNIMustMatch: a CONNECT (or SOCKS5) tunnel to an allowed name
// whose TLS ClientHello names another (domain fronting) is refused with a
// TLS alert, before the remote gets a byte; the same tunnel with a
// matching name works.
func TestProxySNIMustMatch(t *testing.T) { bothModes(t, testProxySNIMustMatch) }

func testProxySNIMustMatch(t *testing.T, fds bool) {
	b := backend(t, true)
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"example.com", "allowed.test"}, Deny: []string{"other.test"}})
	roots := b.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	// The httptest certificate names example.com: a matching SNI works.
	code, body := get(t, proxiedClient(r.httpProxy, &tls.Config{RootCAs: roots}), "https://example.com:"+port(t, b)+"/ok")
	if code != 200 || !strings.Contains(body, "hello /ok") {
		t.Fatalf("CONNECT example.com with its own SNI: %d %q", code, body)
	}
	for _, sni := range []string{"other.test", "example.com"} {
		// CONNECT allowed.test, SNI another name: a denied one, and an
		// allowed one that is still not the name asked for.
		c := proxiedClient(r.httpProxy, &tls.Config{RootCAs: roots, ServerName: sni})
		code, body = get(t, c, "https://allowed.test:"+port(t, b)+"/x")
		if code != 0 || !strings.Contains(body, "access denied") {
			t.Fatalf("CONNECT allowed.test with SNI %s: %d %q, want a TLS access-denied alert", sni, code, body)
		}
		if logs := r.logs.String(); !strings.Contains(logs, "TLS server name "+sni+" does not match the name asked for (allowed.test)") {
			t.Fatalf("refusal not logged with its rule: %s", logs)
		}
	}
	// SOCKS5 the same.
	var p int
	fmt.Sscan(port(t, b), &p)
	rep, conn := socksDial(t, r.socks, "allowed.test", p)
	defer conn.Close()
	if rep != socksSucceeded {
		t.Fatalf("socks reply %d", rep)
	}
	err := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: "other.test"}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("SOCKS5 to allowed.test with SNI other.test: %v, want access denied", err)
	}
}

// rawProxy sends req as is to the HTTP proxy and returns everything it
// answers until it closes.
func rawProxy(t *testing.T, proxy, req string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, req)
	got, _ := io.ReadAll(c)
	return string(got)
}

// TestProxyHostMustMatch: a plain proxy request whose Host line names
// another host than its URL is refused; a request pipelined after an
// allowed one never reaches the server; a CONNECT tunnel carrying plain
// HTTP must name the tunnel's host.
func TestProxyHostMustMatch(t *testing.T) { bothModes(t, testProxyHostMustMatch) }

func testProxyHostMustMatch(t *testing.T, fds bool) {
	b := backend(t, false)
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}, Deny: []string{"other.test"}})
	target := "allowed.test:" + port(t, b)

	got := rawProxy(t, r.httpProxy, "GET http://"+target+"/a HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, "the HTTP Host other.test does not match the URL's host") {
		t.Fatalf("absolute URL with another Host: %q", got)
	}
	got = rawProxy(t, r.httpProxy, "GET http://"+target+"/a HTTP/1.1\r\nHost: "+target+"\r\n\r\n"+
		"GET http://"+target+"/b HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if !strings.Contains(got, "hello /a from "+target) || strings.Contains(got, "other.test") || strings.Contains(got, "/b") {
		t.Fatalf("pipelined request: %q, want only /a's answer", got)
	}

	// Plain HTTP inside a CONNECT tunnel.
	tunnel := func(host string) string {
		c, err := net.DialTimeout("tcp", r.httpProxy, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		fmt.Fprintf(c, "GET /t HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
		rest, _ := io.ReadAll(br)
		return string(rest)
	}
	if got := tunnel(target); !strings.Contains(got, "hello /t from "+target) {
		t.Fatalf("tunnelled request with the tunnel's Host: %q", got)
	}
	if got := tunnel("other.test"); !strings.HasPrefix(got, "HTTP/1.1 403") || !strings.Contains(got, "the HTTP Host other.test does not match the name asked for (allowed.test)") {
		t.Fatalf("tunnelled request with another Host: %q", got)
	}
}
