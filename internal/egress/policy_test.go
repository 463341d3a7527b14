package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestPolicyDecide(t *testing.T) {
	r := StaticResolver{
		"pypi.org":               addrs("151.101.0.223"),
		"files.pythonhosted.org": addrs("151.101.64.223"),
		"rebind.example":         addrs("127.0.0.1"),
		"inside.example":         addrs("10.1.2.3"),
		"meta.example":           addrs("169.254.169.254"),
		"mixed.example":          addrs("127.0.0.1", "93.184.216.34"),
		"v6loop.example":         addrs("::1"),
		"mapped.example":         addrs("::ffff:127.0.0.1"),
		"nat64.example":          addrs("64:ff9b::7f00:1"),
		"test.local":             addrs("127.0.0.2"),
		"evil.pypi.org":          addrs("151.101.0.1"),
	}
	p := Policy{
		Allow:     []string{"pypi.org", "*.pythonhosted.org", "rebind.example", "inside.example", "meta.example", "mixed.example", "v6loop.example", "mapped.example", "nat64.example", "test.local", "*.pypi.org", "pinned.example"},
		AllowCIDR: []string{"127.0.0.2/32"},
		Deny:      []string{"evil.pypi.org", "151.101.64.0/24"},
		Resolve:   map[string]string{"pinned.example": "127.0.0.2"},
	}
	for _, c := range []struct {
		host string
		want string // "" allowed, else a substring of the refusal
		addr string
	}{
		{"pypi.org", "", "151.101.0.223"},
		{"PyPI.org.", "", "151.101.0.223"},
		{"files.pythonhosted.org", "151.101.64.0/24", ""},   // allowed name, denied range
		{"pythonhosted.org", "not in the --allow list", ""}, // *. does not match the name itself
		{"github.com", "not in the --allow list", ""},
		{"evil.pypi.org", "--deny evil.pypi.org", ""},
		{"rebind.example", "loopback, private or link-local", ""},
		{"inside.example", "loopback, private or link-local", ""},
		{"meta.example", "metadata", ""},
		{"mixed.example", "", "93.184.216.34"},
		{"v6loop.example", "loopback", ""},
		{"mapped.example", "loopback", ""},
		{"nat64.example", "loopback", ""},
		{"test.local", "", "127.0.0.2"},
		{"pinned.example", "", "127.0.0.2"},
		{"127.0.0.2", "", "127.0.0.2"},
		{"127.0.0.1", "no --allow-cidr covers it", ""},
		{"93.184.216.34", "no --allow-cidr covers it", ""},
		{"169.254.169.254", "no --allow-cidr covers it", ""},
		{"nowhere.example", "not in the --allow list", ""},
	} {
		got, err := p.Decide(context.Background(), r, c.host, 443)
		if c.want == "" {
			if err != nil || len(got) != 1 || got[0].String() != c.addr {
				t.Errorf("%s: got %v, %v; want %s", c.host, got, err, c.addr)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, %v; want a refusal naming %q", c.host, got, err, c.want)
		}
	}
}

func TestPolicyZeroRefusesEverything(t *testing.T) {
	r := StaticResolver{"pypi.org": addrs("151.101.0.223")}
	for _, h := range []string{"pypi.org", "151.101.0.223", "localhost"} {
		if _, err := (Policy{}).Decide(context.Background(), r, h, 443); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v, want refused", h, err)
		}
	}
}

func TestPolicyStar(t *testing.T) {
	r := StaticResolver{"a.example": addrs("93.184.216.34"), "lo.example": addrs("127.0.0.1")}
	p := Policy{Allow: []string{"*"}}
	if _, err := p.Decide(context.Background(), r, "a.example", 80); err != nil {
		t.Errorf("* must allow a public name: %v", err)
	}
	if _, err := p.Decide(context.Background(), r, "lo.example", 80); !errors.Is(err, ErrRefused) {
		t.Errorf("* must still refuse loopback: %v", err)
	}
}

func TestPolicyCheck(t *testing.T) {
	for _, bad := range []Policy{
		{Allow: []string{"a.*.com"}},
		{Allow: []string{""}},
		{Allow: []string{"http://x"}},
		{AllowCIDR: []string{"10.0.0.0/33"}},
		{AllowCIDR: []string{"example.com"}},
		{Deny: []string{"1.2.3.0/99"}},
		{Resolve: map[string]string{"x.example": "not-an-ip"}},
		{Resolve: map[string]string{"*.example": "1.2.3.4"}},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	good := Policy{Allow: []string{"*", "*.a.b", "c"}, AllowCIDR: []string{"127.0.0.1", "::1/128"}, Deny: []string{"x.y", "10.0.0.0/8"}, Resolve: map[string]string{"n": "::1"}}
	if err := good.Check(); err != nil {
		t.Error(err)
	}
}
