package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Policy is what a private-network sandbox may reach (runbox.EgressPolicy,
// which converts to it, with the host side's rules). The zero Policy
// refuses everything.
type Policy struct {
	// Allow lists names a command may ask for: "example.com" exactly,
	// "*.example.com" any name under it (not the name itself), "*" every
	// name. A name must match one to be dialled.
	Allow []string `json:"allow,omitempty"`
	// AllowCIDR lists address ranges that may be dialled although they are
	// loopback, private, link-local or otherwise not public, and that a
	// command may name by address literal.
	AllowCIDR []string `json:"allow_cidr,omitempty"`
	// Deny lists names (patterns as in Allow) and address ranges (CIDRs)
	// that are refused whatever Allow says.
	Deny []string `json:"deny,omitempty"`
	// Resolve pins names to addresses on the host side (as curl's
	// --resolve): the name is not looked up in DNS. The address still
	// passes every rule.
	Resolve map[string]string `json:"resolve,omitempty"`
}

// Check reports the first malformed rule, so a bad flag fails at create.
func (p Policy) Check() error {
	for _, a := range p.Allow {
		if err := checkPattern(a); err != nil {
			return fmt.Errorf("--allow %q: %w", a, err)
		}
	}
	for _, c := range p.AllowCIDR {
		if _, err := ParsePrefix(c); err != nil {
			return fmt.Errorf("--allow-cidr %q: %w", c, err)
		}
	}
	for _, d := range p.Deny {
		if strings.Contains(d, "/") || isAddr(d) {
			if _, err := ParsePrefix(d); err != nil {
				return fmt.Errorf("--deny %q: %w", d, err)
			}
		} else if err := checkPattern(d); err != nil {
			return fmt.Errorf("--deny %q: %w", d, err)
		}
	}
	for name, addr := range p.Resolve {
		if err := checkPattern(name); err != nil || strings.Contains(name, "*") {
			return fmt.Errorf("--resolve %q: want NAME=ADDRESS with a plain name", name)
		}
		if _, err := netip.ParseAddr(addr); err != nil {
			return fmt.Errorf("--resolve %s=%s: %w", name, addr, err)
		}
	}
	return nil
}

func isAddr(s string) bool { _, err := netip.ParseAddr(s); return err == nil }

// ParsePrefix parses a CIDR, or a single address as its /32 or /128, in
// the form the host side enforces it (CanonicalPrefix). Whoever checks a
// range against another (serve, against its operator's
// --allow-egress-cidr) parses it here, so what is checked is what is
// dialled.
func ParsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, errors.New("want an address range such as 10.1.0.0/16 or an address, without a zone")
		}
		return CanonicalPrefix(netip.PrefixFrom(a, a.BitLen())), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want an address range such as 10.1.0.0/16 or an address")
	}
	return CanonicalPrefix(p), nil
}

// CanonicalPrefix is p masked, with an IPv4-mapped IPv6 range that lies
// within ::ffff:0:0/96 written as the IPv4 range it is (::ffff:10.0.0.0/104
// is 10.0.0.0/8): the host side compares every address it dials unmapped,
// so a mapped range is an IPv4 range, never an IPv6 one that an IPv6
// ceiling (::/0) would cover.
func CanonicalPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// checkPattern accepts a name, "*.name" or "*", where a name is a DNS
// name as a resolver takes it: dot-separated labels of 1 to 63 ASCII
// letters, digits, '-' and '_', at most 253 bytes in all (an
// internationalised name in its xn-- form). Anything else (a NUL, a
// newline, '#', '/', ':', a space, a full stop other than '.', a second
// '*') would match no connection a resolver can make, and must not reach
// the policy, its audit rows or an operator's listing.
func checkPattern(p string) error {
	if p == "*" {
		return nil
	}
	if !dnsName(strings.TrimPrefix(p, "*.")) {
		return errors.New("want a domain name (ASCII letters, digits, '-', '_' in dot-separated labels; xn-- for others), *.domain or *")
	}
	return nil
}

// dnsName reports whether s is a DNS name checkPattern accepts.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// matchName reports whether pattern matches the (lower-case) name.
func matchName(pattern, name string) bool {
	pattern = strings.ToLower(pattern)
	if pattern == "*" {
		return true
	}
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == pattern
}

// Refusal is a connection the policy refused; its message names the rule.
type Refusal struct {
	Host string
	Port int
	// Rule is what refused it, as a user would write it ("--deny
	// *.example.com", "not in --allow", ...).
	Rule string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("runbox egress: %s refused: %s", net.JoinHostPort(r.Host, fmt.Sprint(r.Port)), r.Rule)
}

// ErrRefused is what every *Refusal matches with errors.Is.
var ErrRefused = errors.New("refused by the egress policy")

// Is makes errors.Is(r, ErrRefused) true.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Resolver looks names up on the host side. A resolver may also have a
// PrivateOK(name string) bool method: the names it vouches for may resolve
// to loopback and private addresses (a test resolver's names, served on
// loopback); address literals are never exempt.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// privateOK reports whether r vouches that name may resolve to a
// loopback or private address (a PrivateOK method): tests' resolvers do,
// for the names they serve on loopback; the system's never does.
func privateOK(r Resolver, name string) bool {
	v, ok := r.(interface{ PrivateOK(name string) bool })
	return ok && name != "" && !isAddr(name) && v.PrivateOK(name)
}

// metadata is the cloud metadata address, named in refusals.
var metadata = netip.MustParseAddr("169.254.169.254")

// Decide returns the addresses a connection to host:port may dial, or a
// *Refusal naming the rule that refused it. It decides by the name the
// command asked for and resolves that name itself (with r, after
// p.Resolve): what the sandbox believes a name resolves to plays no part.
// Addresses that are not public (loopback, private, link-local, the
// metadata address, ...) are refused unless an AllowCIDR rule covers them,
// so a name that resolves to one (DNS rebinding) is refused too.
func (p Policy) Decide(ctx context.Context, r Resolver, host string, port int) ([]netip.Addr, error) {
	refuse := func(rule string, a ...any) ([]netip.Addr, error) {
		return nil, &Refusal{Host: host, Port: port, Rule: fmt.Sprintf(rule, a...)}
	}
	if port <= 0 || port > 65535 {
		return refuse("port %d out of range", port)
	}
	name := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	allowCIDR, denyCIDR := prefixes(p.AllowCIDR), []netip.Prefix{}
	for _, d := range p.Deny {
		if pf, err := ParsePrefix(d); err == nil && isRange(d) {
			denyCIDR = append(denyCIDR, pf)
		}
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(name); err == nil {
		a = a.Unmap()
		if !covered(allowCIDR, a) {
			return refuse("%s is an address, and no --allow-cidr covers it (name the host, or allow its range)", a)
		}
		addrs = []netip.Addr{a}
	} else {
		if name == "" {
			return refuse("no host name")
		}
		if rule := p.nameRule(name); rule != "" {
			return refuse("%s", rule)
		}
		if pinned, ok := p.resolved(name); ok {
			addrs = []netip.Addr{pinned}
		} else {
			found, err := r.LookupNetIP(ctx, "ip", name)
			if err != nil || len(found) == 0 {
				return refuse("cannot resolve %s on the host: %v", name, err)
			}
			for _, a := range found {
				addrs = append(addrs, a.Unmap())
			}
		}
	}
	var ok []netip.Addr
	var why string
	for _, a := range addrs {
		switch {
		case covered(denyCIDR, a):
			why = fmt.Sprintf("%s is in --deny %s", a, coveringPrefix(denyCIDR, a))
		case covered(allowCIDR, a), privateOK(r, name):
			ok = append(ok, a)
		case a == metadata:
			why = fmt.Sprintf("%s is the cloud metadata address (allow it with --allow-cidr %s/32)", a, a)
		case !public(a):
			why = fmt.Sprintf("%s resolves to %s, a loopback, private or link-local address (allow it with --allow-cidr)", name, a)
		default:
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		return refuse("%s", why)
	}
	return ok, nil
}

// isRange reports whether a --deny rule is an address range rather than a
// name pattern.
func isRange(rule string) bool { return strings.Contains(rule, "/") || isAddr(rule) }

// nameRule returns the rule that refuses the (lower-case) name by its
// name alone (a --deny pattern, or no --allow pattern matching), or "".
func (p Policy) nameRule(name string) string {
	for _, d := range p.Deny {
		if !isRange(d) && matchName(d, name) {
			return "--deny " + d
		}
	}
	if !slices.ContainsFunc(p.Allow, func(a string) bool { return matchName(a, name) }) {
		return name + " is not in the --allow list"
	}
	return ""
}

func (p Policy) resolved(name string) (netip.Addr, bool) {
	for n, a := range p.Resolve {
		if strings.EqualFold(n, name) {
			addr, err := netip.ParseAddr(a)
			return addr.Unmap(), err == nil
		}
	}
	return netip.Addr{}, false
}

func prefixes(ss []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		if p, err := ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func covered(ps []netip.Prefix, a netip.Addr) bool { return coveringPrefix(ps, a).IsValid() }

func coveringPrefix(ps []netip.Prefix, a netip.Addr) netip.Prefix {
	for _, p := range ps {
		if p.Contains(a) {
			return p
		}
	}
	return netip.Prefix{}
}

// nonPublic are ranges no sandbox reaches without an --allow-cidr: besides
// what netip classifies (loopback, private, link-local, multicast,
// unspecified), shared address space and the IPv6 forms that embed IPv4.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT, some clouds' metadata
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: embeds any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4: embeds any IPv4 address
	netip.MustParsePrefix("fd00:ec2::/32"),  // EC2's IPv6 metadata
}

// public reports whether a is an ordinary internet address.
func public(a netip.Addr) bool {
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast() || !a.IsValid() {
		return false
	}
	return !covered(nonPublic, a)
}

// ReadPolicy reads a policy file WritePolicy wrote.
func ReadPolicy(path string) (Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, fmt.Errorf("egress policy: %w", err)
	}
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return Policy{}, fmt.Errorf("egress policy %s: %w", path, err)
	}
	return p, nil
}

// WritePolicy replaces the policy file at path atomically (a new file
// renamed over it), mode 0600, so a reader sees the old or the new policy.
func WritePolicy(path string, p Policy) error {
	if err := p.Check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("egress policy: %w", err)
	}
	return nil
}

// PolicyFile is the name of the policy file in a local sandbox's state
// directory, which the host side reads for every connection.
const PolicyFile = "egress.json"
