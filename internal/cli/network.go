package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
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

// egressProvider is a provider whose sandboxes' egress policy can change
// at runtime (local, docker, kubernetes).
type egressProvider interface {
	Egress(ctx context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error)
	SetEgress(ctx context.Context, sb runbox.Sandbox, p runbox.EgressPolicy) error
}

func (a *app) networkCmd() *cobra.Command {
	var f egressFlags
	var replace bool
	c := &cobra.Command{
		Use:   "network SANDBOX [--allow D,...] [--allow-cidr C,...] [--deny D|C,...] [--resolve NAME=ADDR,...] [--replace]",
		Short: "Show or change what a private-network sandbox may reach",
		Long: `Print the egress policy of a sandbox made with --network private, as JSON,
after adding the rules given (or, with --replace, after replacing the policy
with them). A change applies to every connection opened from then on;
connections already open go on.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			p, sb, err := a.find(c.Context(), key)
			if err != nil {
				return fail("network", key, "", err)
			}
			ep, ok := p.(egressProvider)
			if !ok {
				return fail("network", key, "", fmt.Errorf("%w: the %s provider cannot change a sandbox's egress policy", errors.ErrUnsupported, p.Name()))
			}
			add, err := f.policy()
			if err != nil {
				return fail("network", key, "", err)
			}
			pol := add
			if !replace {
				if pol, err = ep.Egress(c.Context(), sb); err != nil {
					return fail("network", key, "", err)
				}
				pol.Allow = append(pol.Allow, add.Allow...)
				pol.AllowCIDR = append(pol.AllowCIDR, add.AllowCIDR...)
				pol.Deny = append(pol.Deny, add.Deny...)
				for k, v := range add.Resolve {
					if pol.Resolve == nil {
						pol.Resolve = map[string]string{}
					}
					pol.Resolve[k] = v
				}
			}
			if replace || !add.Empty() {
				if err := ep.SetEgress(c.Context(), sb, pol); err != nil {
					return fail("network", key, "", err)
				}
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(pol)
		},
	}
	f.add(c.Flags())
	c.Flags().BoolVar(&replace, "replace", false, "replace the policy with the rules given instead of adding them (no rule: refuse everything)")
	return c
}
