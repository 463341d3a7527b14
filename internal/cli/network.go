package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
)

// egressFlags are the egress allowlist flags of up and run (--network
// private).
type egressFlags struct {
	allow, allowCIDR, deny, resolve []string
}

func (f *egressFlags) add(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.allow, "allow", nil, "with --network private: names the sandbox may reach through its proxy (example.com, *.example.com, *), comma-separated or repeated")
	fs.StringSliceVar(&f.allowCIDR, "allow-cidr", nil, "with --network private: address ranges that may be reached although not public (loopback, private, link-local, metadata), or by address")
	fs.StringSliceVar(&f.deny, "deny", nil, "with --network private: names (as --allow) or address ranges refused whatever --allow says")
	fs.StringSliceVar(&f.resolve, "resolve", nil, "with --network private: NAME=ADDRESS pins a name to an address on the host side (as curl --resolve); the rules still apply")
}

// policy returns the allowlist the flags ask for.
func (f *egressFlags) policy() (runbox.EgressPolicy, error) {
	p := runbox.EgressPolicy{Allow: f.allow, AllowCIDR: f.allowCIDR, Deny: f.deny}
	for _, r := range f.resolve {
		name, addr, ok := strings.Cut(r, "=")
		if !ok || name == "" || addr == "" {
			return p, fmt.Errorf("--resolve %q: want NAME=ADDRESS", r)
		}
		if p.Resolve == nil {
			p.Resolve = map[string]string{}
		}
		p.Resolve[name] = addr
	}
	return p, nil
}
