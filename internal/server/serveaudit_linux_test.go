package server_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/server"
)

// startMarkerServer starts, in tenant srv's sandbox sb, a web server on a
// random loopback port serving a fresh random marker at /m.txt, and
// returns the marker and the port once the route reaches it with tok.
func startMarkerServer(t *testing.T, ts *testServer, srv *client.Server, tok string, sb runbox.Sandbox) (string, int) {
	t.Helper()
	ctx := ctxT(t)
	marker := rand.Text()
	port := 20000 + mrand.IntN(20000)
	dir := "site-" + rand.Text()[:8]
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fmt.Sprintf(
		`mkdir -p %s && echo %s > %s/m.txt && (cd %s && nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &)`,
		dir, marker, dir, dir, port)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the web server: %+v %v", res, err)
	}
	t.Cleanup(func() {
		srv.Run(context.Background(), sb.ID, runbox.ExecSpec{Command: fmt.Sprintf("pkill -f 'http.server %d' || true", port)})
	})
	exp, err := srv.ExposePort(ctx, sb.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		code, body, _ := get(t, exp.URL+"m.txt", "Authorization", "Bearer "+tok)
		if code == 200 && strings.TrimSpace(body) == marker {
			break
		}
		if i == 150 {
			t.Fatalf("the web server in %s never answered through the route: %d %q", sb.ID, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return marker, port
}

// TestSignedURLRevokedByUnexpose: UnexposePort revokes every signed URL
// handed out for the port, for good: exposing the port again hands out a
// new URL and brings none of the old ones back (a URL leaked, then
// revoked by unexposing, must stay dead). Moved to another tenant's
// sandbox with the same port, to a removed sandbox's id, or with its
// expiry changed (past, far future), a signed URL is refused; the URL
// handed out last (the control) reaches the marker.
func TestSignedURLRevokedByUnexpose(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	tokA, tokB := ts.token(t, "a"), ts.token(t, "b")
	a, err := client.NewServer(ts.url, tokA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.NewServer(ts.url, tokB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sbA, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove(context.Background(), sbA, true)
	marker, port := startMarkerServer(t, ts, a, tokA, sbA)

	first, err := a.ExposePort(ctx, sbA.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, withPath(t, first.SignedURL, "m.txt")); code != 200 || strings.TrimSpace(body) != marker {
		t.Fatalf("the first signed URL (control): %d %q", code, body)
	}
	if err := a.UnexposePort(ctx, sbA.ID, uint16(port)); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, withPath(t, first.SignedURL, "m.txt")); code != 403 {
		t.Fatalf("the first signed URL after unexpose: %d %q, want 403", code, body)
	}
	second, err := a.ExposePort(ctx, sbA.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, withPath(t, second.SignedURL, "m.txt")); code != 200 || strings.TrimSpace(body) != marker {
		t.Fatalf("the signed URL of the second exposure (control): %d %q", code, body)
	}
	code, body, hdr := get(t, withPath(t, first.SignedURL, "m.txt"))
	if code != 403 || strings.Contains(body, marker) {
		t.Errorf("a signed URL revoked by unexpose, after the port was exposed again: %d %q, want 403", code, body)
	}
	if c := hdr.Get("Set-Cookie"); c != "" {
		t.Errorf("a revoked signed URL set a cookie: %q", c)
	}
	// Exposing an exposed port again keeps the URLs already handed out.
	third, err := a.ExposePort(ctx, sbA.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{second.SignedURL, third.SignedURL} {
		if code, body, _ := get(t, withPath(t, u, "m.txt")); code != 200 || strings.TrimSpace(body) != marker {
			t.Errorf("a signed URL of the exposure in force: %d %q", code, body)
		}
	}
	// The cookie a revoked URL set is revoked with it.
	_, _, hdr = get(t, withPath(t, second.SignedURL, "m.txt"))
	name, val, _ := strings.Cut(strings.Split(hdr.Get("Set-Cookie"), ";")[0], "=")
	if err := a.UnexposePort(ctx, sbA.ID, uint16(port)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ExposePort(ctx, sbA.ID, uint16(port), 0); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, second.URL+"m.txt", "Cookie", name+"="+val); code != 403 || strings.Contains(body, marker) {
		t.Errorf("the cookie of a revoked signed URL, after the port was exposed again: %d %q, want 403", code, body)
	}

	// Tenant b exposes the same port number of its own sandbox: neither
	// tenant's signature opens the other's sandbox.
	sbB, err := b.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), sbB, true)
	expB, err := b.ExposePort(ctx, sbB.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := a.ExposePort(ctx, sbA.ID, uint16(port), 0)
	if err != nil {
		t.Fatal(err)
	}
	movedToA := strings.Replace(expB.SignedURL, "/sandboxes/"+sbB.ID+"/", "/sandboxes/"+sbA.ID+"/", 1)
	if code, body, _ := get(t, withPath(t, movedToA, "m.txt")); code != 403 || strings.Contains(body, marker) {
		t.Errorf("b's signed URL moved to a's sandbox: %d %q, want 403", code, body)
	}
	if code, body, _ := get(t, fresh.URL+"m.txt", "Authorization", "Bearer "+tokB); code != 404 || strings.Contains(body, marker) {
		t.Errorf("b's token on a's route: %d %q, want 404", code, body)
	}
	// b's own server, exposed: a's signed URL carried onto b's route, by
	// its query or by a path that climbs out of a's route, opens nothing
	// of b's; nor does a Host header naming something else.
	markerB, portB := startMarkerServer(t, ts, b, tokB, sbB)
	expB2, err := b.ExposePort(ctx, sbB.ID, uint16(portB), 0)
	if err != nil {
		t.Fatal(err)
	}
	fu, _ := url.Parse(fresh.SignedURL)
	climb := fmt.Sprintf("%s/sandboxes/%s/ports/%d/../../../%s/ports/%d/m.txt?%s", ts.url, sbA.ID, port, sbB.ID, portB, fu.RawQuery)
	onB := strings.TrimSuffix(expB2.URL, "/") + "/m.txt?" + fu.RawQuery
	encoded := fmt.Sprintf("%s/sandboxes/%s%%2Fports%%2F%d%%2F..%%2F..%%2F..%%2F%s/ports/%d/m.txt?%s", ts.url, sbA.ID, port, sbB.ID, portB, fu.RawQuery)
	for what, u := range map[string]string{"climbing out of its route": climb, "on b's route": onB, "with encoded slashes": encoded} {
		if code, body, _ := get(t, u); code < 400 || strings.Contains(body, markerB) || strings.Contains(body, marker) {
			t.Errorf("a's signed URL %s: %d %q, want it refused", what, code, body)
		}
		if code, body, _ := get(t, u, "Host", "localhost:"+fmt.Sprint(portB)); code < 400 || strings.Contains(body, markerB) {
			t.Errorf("a's signed URL %s with a Host header: %d %q, want it refused", what, code, body)
		}
	}
	if code, body, _ := get(t, withPath(t, fresh.SignedURL, "m.txt"), "Host", "evil.example"); code != 200 || strings.TrimSpace(body) != marker {
		t.Errorf("a's signed URL with another Host header (the control: the route ignores it): %d %q", code, body)
	}
	for what, exp := range map[string]int64{"past": time.Now().Add(-time.Hour).Unix(), "far future": time.Now().Add(100 * 365 * 24 * time.Hour).Unix(), "negative": -1} {
		u, _ := url.Parse(withPath(t, fresh.SignedURL, "m.txt"))
		q := u.Query()
		q.Set("runbox_expires", fmt.Sprint(exp))
		u.RawQuery = q.Encode()
		if code, body, _ := get(t, u.String()); code != 403 || strings.Contains(body, marker) {
			t.Errorf("a signed URL with its expiry moved to the %s: %d %q, want 403", what, code, body)
		}
	}
	// The sandbox removed: its URL opens nothing, whatever sandbox
	// listens on that port next.
	if err := a.Remove(ctx, sbA, true); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := get(t, withPath(t, fresh.SignedURL, "m.txt")); code != 403 || strings.Contains(body, marker) {
		t.Errorf("a removed sandbox's signed URL: %d %q, want 403", code, body)
	}
}

// TestEgressCIDRCheckedAsEnforced: a tenant's allow_cidr is checked
// against the operator's --allow-egress-cidr in the form the host side
// enforces it. The operator opens every IPv6 range (::/0) and no IPv4 one;
// the tenant asks for its host's IPv4 loopback written as an IPv4-mapped
// IPv6 address (::ffff:127.0.0.1, which the host side dials as
// 127.0.0.1): refused, and a server on the host's loopback serving a
// fresh random marker stays out of reach. An IPv6 range within the
// operator's (the control) is taken, and an IPv4-mapped range the operator
// allows as IPv4 is the same range.
func TestEgressCIDRCheckedAsEnforced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	marker, port := markerServer(t)
	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) {
		c.EgressCIDRs = []netip.Prefix{netip.MustParsePrefix("::/0"), netip.MustParsePrefix("192.0.2.0/24")}
	})
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{Network: "private"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(context.Background(), sb, true)
	fetch := fmt.Sprintf(`python3 -c "import urllib.request; print(urllib.request.urlopen('http://pkg.test:%d/', timeout=20).read().decode())"`, port)
	for _, cidr := range []string{"::ffff:127.0.0.1", "::ffff:127.0.0.0/104", "::ffff:7f00:1/128", "::ffff:0:0/96"} {
		_, err := srv.SetEgress(ctx, sb.ID, runbox.EgressPolicy{Allow: []string{"pkg.test"}, AllowCIDR: []string{cidr}, Resolve: map[string]string{"pkg.test": "127.0.0.1"}})
		if !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("allow_cidr %s under --allow-egress-cidr ::/0: %v, want ErrInvalidSpec", cidr, err)
		}
		res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fetch})
		if err != nil || res.ExitCode == 0 || strings.Contains(string(res.Stdout), marker) {
			t.Errorf("allow_cidr %s reached the host's loopback: %+v %v", cidr, res, err)
		}
	}
	for _, cidr := range []string{"fd00::/8", "2001:db8::1", "192.0.2.7", "::ffff:192.0.2.0/120"} {
		if _, err := srv.SetEgress(ctx, sb.ID, runbox.EgressPolicy{Allow: []string{"pkg.test"}, AllowCIDR: []string{cidr}}); err != nil {
			t.Errorf("allow_cidr %s within the operator's ranges: %v", cidr, err)
		}
	}
}

// TestSnapshotsAcrossTenants: tenant a plants a fresh random secret at a
// random path of its workspace and snapshots the sandbox under a random
// name. Tenant b naming that snapshot (create from it, delete it) gets
// exactly the answer for a name that never existed, lists none of a's,
// and touches a's sandbox by id, name or id prefix with none of pause,
// resume, snapshot, fork, expose, unexpose or set egress (not found).
// b's own snapshot under the same name (its own namespace) holds b's
// files, not a's secret; a's sandbox made from a's snapshot (the
// control) reads the secret, and keeps reading it after a deletes the
// snapshot. Names with "..", "/", NUL, look-alike unicode, a leading
// punctuation mark or over 63 bytes are invalid_argument.
func TestSnapshotsAcrossTenants(t *testing.T) {
	ts := startServer(t, onLocalProvider(t))
	ctx := ctxT(t)
	a, b := ts.tenant(t, "a"), ts.tenant(t, "b")
	t.Cleanup(func() {
		for _, c := range []*client.Server{a, b} {
			sbs, _ := c.List(context.Background())
			for _, sb := range sbs {
				c.Remove(context.Background(), sb, true)
			}
		}
	})
	name := "sa-" + strings.ToLower(rand.Text()[:10])
	sbA, err := a.Create(ctx, runbox.SandboxSpec{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	secret, path := rand.Text(), "d"+rand.Text()[:6]+"/"+rand.Text()[:8]
	res, _, err := a.Run(ctx, sbA.ID, runbox.ExecSpec{Command: fmt.Sprintf("mkdir -p $(dirname %s) && echo %s > %s", path, secret, path)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("plant the secret: %+v %v", res, err)
	}
	snap := "s-" + strings.ToLower(rand.Text()[:10])
	if _, err := a.Snapshot(ctx, sbA, snap, runbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	never := "s-" + strings.ToLower(rand.Text()[:10])
	same := func(what string, err1 error, err2 error) {
		t.Helper()
		m1, m2 := fmt.Sprint(err1), fmt.Sprint(err2)
		if err1 == nil || !errors.Is(err1, runbox.ErrInvalidSpec) || strings.ReplaceAll(m1, snap, "N") != strings.ReplaceAll(m2, never, "N") {
			t.Errorf("%s: b naming a's snapshot: %v; naming one that never existed: %v; want the same invalid_argument", what, err1, err2)
		}
	}
	_, e1 := b.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: snap}, client.SandboxOptions{})
	_, e2 := b.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: never}, client.SandboxOptions{})
	same("create from", e1, e2)
	same("delete", b.RemoveSnapshot(ctx, snap), b.RemoveSnapshot(ctx, never))
	if ss, err := b.Snapshots(ctx); err != nil || len(ss) != 0 {
		t.Errorf("b lists snapshots %v %v", ss, err)
	}
	for _, key := range []string{sbA.ID, name, sbA.ID[:7]} {
		ref := runbox.Sandbox{ID: key}
		for what, err := range map[string]error{
			"pause":    b.Pause(ctx, ref),
			"resume":   b.Resume(ctx, ref),
			"unexpose": b.UnexposePort(ctx, key, 8000),
		} {
			if !errors.Is(err, runbox.ErrSandboxNotFound) {
				t.Errorf("b: %s of a's sandbox by %s: %v, want not found", what, key, err)
			}
		}
		if _, err := b.Snapshot(ctx, ref, "", runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("b: snapshot of a's sandbox by %s: %v, want not found", key, err)
		}
		if _, _, err := b.Fork(ctx, key, 1, runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("b: fork of a's sandbox by %s: %v, want not found", key, err)
		}
		if _, err := b.ExposePort(ctx, key, 8000, 0); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("b: expose a port of a's sandbox by %s: %v, want not found", key, err)
		}
		if _, err := b.SetEgress(ctx, key, runbox.EgressPolicy{Allow: []string{"*"}}); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("b: set the egress of a's sandbox by %s: %v, want not found", key, err)
		}
	}
	if got, err := a.Get(ctx, sbA.ID); err != nil || got.Detail["paused"] != "" || got.Detail["exposed_ports"] != "" {
		t.Errorf("a's sandbox after b's attempts: %v %v", got.Detail, err)
	}
	// b's own snapshot of the same name is b's.
	sbB, err := b.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Snapshot(ctx, sbB, snap, runbox.SnapshotOptions{}); err != nil {
		t.Fatalf("b's own snapshot named as a's: %v", err)
	}
	fromB, err := b.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: snap}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err = b.Run(ctx, fromB.ID, runbox.ExecSpec{Command: "cat " + path + "; grep -rsl " + secret + " . /root /tmp /var/tmp | head -1"})
	if err != nil || strings.Contains(string(res.Stdout), secret) || strings.TrimSpace(string(res.Stdout)) != "" {
		t.Errorf("b's sandbox from its own snapshot %s reads a's secret: %+v %v", snap, res, err)
	}
	// The control: a's sandbox from a's snapshot reads it, also once the
	// snapshot is deleted.
	fromA, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: snap}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, when := range []string{"before", "after"} {
		res, _, err = a.Run(ctx, fromA.ID, runbox.ExecSpec{Command: "cat " + path})
		if err != nil || strings.TrimSpace(string(res.Stdout)) != secret {
			t.Fatalf("a's sandbox from a's snapshot, %s deleting it: %+v %v", when, res, err)
		}
		if when == "before" {
			if err := a.RemoveSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ss, err := b.Snapshots(ctx); err != nil || len(ss) != 1 || ss[0].Name != snap || ss[0].Sandbox != sbB.ID {
		t.Errorf("b's snapshots after a deleted its own of the same name: %v %v", ss, err)
	}
	for _, bad := range []string{"..", "../" + snap, "a/b", "a\x00b", "ｓｎａｐ", "snap\u0430", "-x", ".x", strings.Repeat("x", 64), "x\n"} {
		if _, err := a.Snapshot(ctx, sbA, bad, runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("snapshot name %q: %v, want invalid_argument", bad, err)
		}
	}
}

// TestExposePortBounds: a port a tenant or a model names is 1 to 65535:
// 0, 65536, 2^32-1 and -1 (JSON) are invalid_argument from ExposePort and
// UnexposePort, the route answers 404 for them and for a port spelled
// otherwise than in decimal digits, and nothing is exposed; port_expose
// refuses them too. Port 1 (the control) is exposed.
func TestExposePortBounds(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	ctx := ctxT(t)
	tok := ts.token(t, "a")
	a := ts.tenant(t, "a")
	sb, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove(context.Background(), sb, true)
	for _, body := range []string{`{"sandboxId":"%s","port":0}`, `{"sandboxId":"%s","port":65536}`, `{"sandboxId":"%s","port":4294967295}`, `{"sandboxId":"%s","port":-1}`, `{"sandboxId":"%s","port":"80x"}`} {
		for _, proc := range []string{"ExposePort", "UnexposePort"} {
			code, out := post(t, ts.url, tok, "/runbox.v1.SandboxService/"+proc, "", []byte(fmt.Sprintf(body, sb.ID)))
			if code != 400 || out["code"] != "invalid_argument" {
				t.Errorf("%s %s: %d %v, want invalid_argument", proc, fmt.Sprintf(body, sb.ID), code, out)
			}
		}
	}
	for _, p := range []string{"0", "65536", "-1", "4294967297", "0x50", "%2B80", "080", "1e3"} {
		if code, body, _ := get(t, ts.url+"/sandboxes/"+sb.ID+"/ports/"+p+"/", "Authorization", "Bearer "+tok); code != 404 {
			t.Errorf("the route to port %s: %d %q, want 404", p, code, body)
		}
	}
	cs := ts.mustMCP(t, tok)
	for _, p := range []int{0, 65536, -1} {
		if msg := toolFails(t, cs, "port_expose", map[string]any{"port": p}); !strings.Contains(msg, "65535") {
			t.Errorf("port_expose %d: %q", p, msg)
		}
	}
	got, err := a.Get(ctx, sb.ID)
	if err != nil || got.Detail["exposed_ports"] != "" {
		t.Errorf("after the refused calls: %v %v", got.Detail, err)
	}
	if _, err := a.ExposePort(ctx, sb.ID, 1, 0); err != nil {
		t.Errorf("port 1: %v", err)
	}
}
