package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
)

// NetworkPrivate is the network mode of a sandbox that reaches only what
// its egress policy allows: the container is on docker's "none" network
// (loopback only), its runboxd offers the egress proxy there (runboxd
// serve --egress), and a host side (runboxd egress, on this machine)
// carries each connection the policy allows over the sandbox's socket.
const NetworkPrivate = "private"

// Files of a private-network sandbox in its state directory (0700, never
// mounted into the container): the host side's secret for runboxd and the
// policy it reads for every connection.
const (
	egressSecretFile = "secret"
	egressLogFile    = "egress.log"
)

// writeEgressState stores what the host side of a private sandbox reads:
// its secret and its policy.
func writeEgressState(stateDir string, secret []byte, pol runbox.EgressPolicy) error {
	if err := os.WriteFile(filepath.Join(stateDir, egressSecretFile), secret, 0o600); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return egress.WritePolicy(filepath.Join(stateDir, egress.PolicyFile), egress.Policy(pol))
}

// ErrNotPrivate means an egress policy was asked of a sandbox that is not
// on the private network. It wraps runbox.ErrInvalidSpec.
var ErrNotPrivate = fmt.Errorf("%w: the sandbox is not on the private network (runbox up --network private)", runbox.ErrInvalidSpec)

// policyPath is where the host side of sb's egress reads its policy.
func policyPath(sb runbox.Sandbox) (string, error) {
	if sb.Detail["network"] != NetworkPrivate || sb.Detail["socket"] == "" {
		return "", ErrNotPrivate
	}
	return filepath.Join(filepath.Dir(filepath.Dir(sb.Detail["socket"])), egress.PolicyFile), nil
}

// Egress returns the egress policy in force in sb, a private-network
// sandbox.
func (p *Provider) Egress(_ context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error) {
	path, err := policyPath(sb)
	if err != nil {
		return runbox.EgressPolicy{}, err
	}
	pol, err := egress.ReadPolicy(path)
	return runbox.EgressPolicy(pol), err
}

// SetEgress replaces the egress policy of sb, a private-network sandbox;
// the host side applies it to the next connection.
func (p *Provider) SetEgress(_ context.Context, sb runbox.Sandbox, pol runbox.EgressPolicy) error {
	path, err := policyPath(sb)
	if err != nil {
		return err
	}
	return egress.WritePolicy(path, egress.Policy(pol))
}

// TakeEgressRefusals returns the refusals the host side of sb's egress
// made since the last call and forgets them (egress.TakeRefusals), for
// runbox serve's audit log. A sandbox not on the private network has none.
func (p *Provider) TakeEgressRefusals(_ context.Context, sb runbox.Sandbox) ([]egress.Refused, error) {
	path, err := policyPath(sb)
	if err != nil {
		return nil, nil
	}
	return egress.TakeRefusals(filepath.Join(filepath.Dir(path), egress.RefusalsFile))
}
