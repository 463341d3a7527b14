package server_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
)

// TestSetEgressThroughServe: a private local sandbox made with no rule
// cannot fetch from a server on the host's loopback through its proxy;
// after SetEgress allows the name (pinned to the loopback address, within
// the operator's --allow-egress-cidr) the next fetch works and Get shows
// the policy; a range outside the operator's is invalid_argument, and a
// sandbox not on the private network cannot take a policy.
func TestSetEgressThroughServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	marker, port := markerServer(t)

	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) {
		c.EgressCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	api := sandboxAPI(ts, ts.token(t, "a"))
	sb, err := srv.Create(ctx, runbox.SandboxSpec{Network: "private"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(ctx, sb, true)
	fetch := fmt.Sprintf(`python3 -c "import urllib.request; print(urllib.request.urlopen('http://pkg.test:%d/', timeout=20).read().decode())"`, port)
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fetch})
	if err != nil || res.ExitCode == 0 || strings.Contains(string(res.Stdout), marker) {
		t.Fatalf("before the change the fetch must be refused: %+v %v", res, err)
	}
	pol := &runboxv1.EgressPolicy{Allow: []string{"pkg.test"}, AllowCidr: []string{"127.0.0.1/32"}, Resolve: map[string]string{"pkg.test": "127.0.0.1"}}
	got, err := srv.SetEgress(ctx, sb.ID, runbox.EgressPolicy{Allow: pol.Allow, AllowCIDR: pol.AllowCidr, Resolve: pol.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Detail["egress_allow"]; a != "pkg.test" {
		t.Errorf("SetEgress answered the sandbox with egress_allow %q", a)
	}
	res, _, err = srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fetch})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != marker {
		t.Fatalf("after SetEgress the fetch must work: %+v %s %v", res, res.Stderr, err)
	}
	// The change is the tenant's audit row, with the policy in force.
	rows, err := ts.store.Audit(ctx, registry.AuditFilter{Tenant: "a", Sandbox: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var changes []registry.AuditRow
	for _, r := range rows {
		if r.Kind == registry.KindEgress {
			changes = append(changes, r)
		}
	}
	var logged runboxv1.EgressPolicy
	if len(changes) != 1 || changes[0].Outcome != "done" || protojson.Unmarshal([]byte(changes[0].Detail), &logged) != nil ||
		!slices.Equal(logged.GetAllow(), pol.Allow) || !slices.Equal(logged.GetAllowCidr(), pol.AllowCidr) || logged.GetResolve()["pkg.test"] != "127.0.0.1" {
		t.Errorf("the policy change's audit rows: %+v", changes)
	}
	g, err := api.Get(ctx, connect.NewRequest(&runboxv1.GetSandboxRequest{Id: sb.ID}))
	if err != nil || g.Msg.GetSandbox().GetSpec().GetEgress().GetResolve()["pkg.test"] != "127.0.0.1" {
		t.Errorf("Get after SetEgress: %v %v", g, err)
	}
	_, err = api.SetEgress(ctx, connect.NewRequest(&runboxv1.SetEgressRequest{SandboxId: sb.ID, Egress: &runboxv1.EgressPolicy{AllowCidr: []string{"10.0.0.0/8"}}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "--allow-egress-cidr") {
		t.Errorf("a range outside the operator's: %v, want invalid_argument naming --allow-egress-cidr", err)
	}
	if _, err := srv.SetEgress(ctx, sb.ID, runbox.EgressPolicy{AllowCIDR: []string{"10.0.0.0/8"}}); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("the Go client's SetEgress with a range outside the operator's: %v, want ErrInvalidSpec", err)
	}
	if _, err := srv.SetEgress(ctx, "sb-nosuch", runbox.EgressPolicy{}); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("the Go client's SetEgress on an unknown sandbox: %v, want ErrSandboxNotFound", err)
	}
	other, err := srv.Create(ctx, runbox.SandboxSpec{Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(ctx, other, true)
	_, err = api.SetEgress(ctx, connect.NewRequest(&runboxv1.SetEgressRequest{SandboxId: other.ID, Egress: pol}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "network private") {
		t.Errorf("a sandbox on network none: %v, want invalid_argument naming network private", err)
	}
}

// markerServer serves a fresh random marker over HTTP on the host's
// loopback until the test ends, and returns the marker and the port.
func markerServer(t *testing.T) (marker string, port int) {
	t.Helper()
	marker = rand.Text()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, marker) })}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return marker, ln.Addr().(*net.TCPAddr).Port
}
