package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/mcpserver"
)

var _ mcpserver.EgressSetter = (*mcpPlace)(nil)

// Egress implements mcpserver.EgressSetter: the policy the registry keeps
// for the tenant's sandbox (the one SetEgress last set, or its spec's).
func (p *mcpPlace) Egress(ctx context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error) {
	ctx = context.WithValue(ctx, tenantKey{}, p.tenantNow())
	rec, err := p.s.tenantSandbox(ctx, sb.ID)
	if err != nil {
		return runbox.EgressPolicy{}, plainError(err)
	}
	var spec runboxv1.SandboxSpec
	if err := protojson.Unmarshal([]byte(rec.Spec), &spec); err != nil {
		return runbox.EgressPolicy{}, fmt.Errorf("sandbox %s spec: %w", rec.ID, err)
	}
	return egressPolicy(spec.GetEgress()), nil
}

// SetEgress implements mcpserver.EgressSetter as SandboxService.SetEgress
// does for the tenant (the operator's --allow-egress-cidr, the audit row).
func (p *mcpPlace) SetEgress(ctx context.Context, sb runbox.Sandbox, pol runbox.EgressPolicy) error {
	_, err := p.s.setEgress(ctx, p.tenantNow(), sb.ID, &runboxv1.EgressPolicy{Allow: pol.Allow, AllowCidr: pol.AllowCIDR, Deny: pol.Deny, Resolve: pol.Resolve})
	return plainError(err)
}
