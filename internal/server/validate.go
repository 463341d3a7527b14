package server

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"

	"google.golang.org/protobuf/proto"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/owndir"
	"github.com/runbox/runbox/internal/safepath"
)

// Label limits.
const (
	maxLabels          = 64
	maxLabelKeyBytes   = 128
	maxLabelValueBytes = 1024
	maxNameBytes       = 63
)

func cloneSpec(spec *runboxv1.SandboxSpec) *runboxv1.SandboxSpec {
	return proto.Clone(spec).(*runboxv1.SandboxSpec)
}

// checkSandboxSpec refuses a create request the server will not carry
// out, naming the field.
func (s *Server) checkSandboxSpec(spec *runboxv1.SandboxSpec) error {
	if _, ok := s.cfg.Providers[spec.Provider]; !ok {
		names := make([]string, 0, len(s.cfg.Providers))
		for n := range s.cfg.Providers {
			names = append(names, n)
		}
		sort.Strings(names)
		return invalid("spec.provider", "%q is not offered by this server (it offers: %s)", spec.Provider, strings.Join(names, ", "))
	}
	switch {
	case spec.MemoryBytes < 0:
		return invalid("spec.memory_bytes", "must not be negative (got %d)", spec.MemoryBytes)
	case spec.Pids < 0:
		return invalid("spec.pids", "must not be negative (got %d)", spec.Pids)
	case spec.DiskBytes < 0:
		return invalid("spec.disk_bytes", "must not be negative (got %d); 0 is the server's default", spec.DiskBytes)
	case spec.Cpus < 0:
		return invalid("spec.cpus", "must not be negative (got %g)", spec.Cpus)
	case spec.IdleTtlMs < 0:
		return invalid("spec.idle_ttl_ms", "must not be negative (got %d); 0 means no idle limit", spec.IdleTtlMs)
	case spec.MaxLifetimeMs < 0:
		return invalid("spec.max_lifetime_ms", "must not be negative (got %d); 0 means no lifetime limit", spec.MaxLifetimeMs)
	case len(spec.Name) > maxNameBytes:
		return invalid("spec.name", "is %d bytes, more than %d", len(spec.Name), maxNameBytes)
	case strings.HasPrefix(spec.Name, "sb-"):
		return invalid("spec.name", "%q: names starting with \"sb-\" could be taken for ids", spec.Name)
	case len(spec.Labels) > maxLabels:
		return invalid("spec.labels", "%d labels, more than %d", len(spec.Labels), maxLabels)
	}
	for k, v := range spec.Labels {
		if k == "" || len(k) > maxLabelKeyBytes {
			return invalid("spec.labels", "key %q: want 1 to %d bytes", k, maxLabelKeyBytes)
		}
		if len(v) > maxLabelValueBytes {
			return invalid("spec.labels", "value of %q is %d bytes, more than %d", k, len(v), maxLabelValueBytes)
		}
	}
	if err := s.applySandboxLimits(spec); err != nil {
		return err
	}
	switch {
	case spec.Provider == "docker":
		// host shares the machine's network (loopback services, other
		// tenants' traffic); container:X another container's.
		if (spec.Network == "host" || strings.HasPrefix(spec.Network, "container:")) && !s.cfg.AllowSharedNetworks {
			return invalid("spec.network", "%q: docker's host and container: networks are not allowed by this server (--allow-shared-networks)", spec.Network)
		}
	case spec.Network == "", spec.Network == "none", spec.Network == "host", spec.Network == "private":
	default:
		return invalid("spec.network", "%q: want none, private or host", spec.Network)
	}
	if err := s.checkEgress(spec); err != nil {
		return err
	}
	if spec.Workdir != "" {
		if !filepath.IsAbs(spec.Workdir) {
			return invalid("spec.workdir", "%q is not an absolute path", spec.Workdir)
		}
		clean := filepath.Clean(spec.Workdir)
		if !slices.ContainsFunc(s.cfg.WorkdirRoots, func(root string) bool { return within(clean, root) }) {
			if len(s.cfg.WorkdirRoots) == 0 {
				return invalid("spec.workdir", "not allowed: this server takes no workdir (start it with --workdir-root DIR); leave it empty for a fresh workspace")
			}
			return invalid("spec.workdir", "%q is not under a directory this server allows (%s)", spec.Workdir, strings.Join(s.cfg.WorkdirRoots, ", "))
		}
		spec.Workdir = clean
	}
	return nil
}

// openWorkdir opens a tenant's workdir (already checked to be clean and
// under a workdir root) beneath its root, component by component and
// following no symlink, so a link a sandbox planted under the root
// (ROOT/a/escape -> /) cannot make it a host directory. The directory is
// made (0700) where it does not exist, as providers would. It must be the
// server's alone (owndir.Check: owned by the server's uid, no one else may
// write into it), whatever the provider: a directory under a root that
// another user, a daemon, or a sandbox's own `chmod 1777`, opened to
// others would hand the sandbox what they leave there.
func (s *Server) openWorkdir(workdir string) (*os.File, error) {
	for _, root := range s.cfg.WorkdirRoots {
		root = filepath.Clean(root)
		if !within(workdir, root) {
			continue
		}
		rel, _ := filepath.Rel(root, workdir)
		f, err := safepath.MkdirBeneath(root, rel, 0o700)
		if errors.Is(err, safepath.ErrUnsafe) {
			return nil, invalid("spec.workdir", "%q: %v", workdir, err)
		}
		if err != nil {
			return nil, apiError(fmt.Errorf("spec.workdir %q: %w", workdir, err))
		}
		if err := owndir.Check(f, workdir); err != nil {
			f.Close()
			return nil, invalid("spec.workdir", "%v", err)
		}
		return f, nil
	}
	return nil, invalid("spec.workdir", "%q is not under a directory this server allows (%s)", workdir, strings.Join(s.cfg.WorkdirRoots, ", "))
}

// sameDir checks that path, opened again beneath the root it lies in
// (workspaces, else a workdir root), is still the directory held.
func sameDir(held *os.File, workspaces string, roots []string, path string) error {
	for _, root := range append([]string{workspaces}, roots...) {
		root = filepath.Clean(root)
		if root == "" || !within(path, root) {
			continue
		}
		rel, _ := filepath.Rel(root, path)
		f, err := safepath.OpenBeneath(root, rel)
		if err != nil {
			return invalid("spec.workdir", "%q changed while the sandbox was made: %v", path, err)
		}
		defer f.Close()
		if !safepath.SameFile(held, f) {
			return invalid("spec.workdir", "%q was replaced while the sandbox was made", path)
		}
		return nil
	}
	return invalid("spec.workdir", "%q is under no root this server allows", path)
}

// within reports whether path is root or beneath it (both clean).
func within(path, root string) bool {
	root = filepath.Clean(root)
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// checkExecSpec refuses an exec spec with a negative duration or no
// command, naming the field (runboxd checks the rest: sizes, NUL bytes).
func (s *Server) checkExecSpec(field string, spec *runboxv1.ExecSpec) error {
	if spec == nil {
		return invalid(field, "missing: give a command (spec.command) or an argv (spec.argv)")
	}
	if err := checkExecDurations(field, spec); err != nil {
		return err
	}
	return s.applyExecLimits(field, spec)
}

// checkExecDurations refuses durations out of range, and the rest of
// checkExecSpec's checks.
func checkExecDurations(field string, spec *runboxv1.ExecSpec) error {
	for _, d := range []struct {
		name string
		ms   int64
	}{{".timeout_ms", spec.TimeoutMs}, {".idle_timeout_ms", spec.IdleTimeoutMs}, {".grace_ms", spec.GraceMs}} {
		if d.ms < 0 {
			return invalid(field+d.name, "must not be negative (got %d)", d.ms)
		}
	}
	if err := wire.CheckSpecMs(spec); err != nil {
		return invalid(field, "%v", err)
	}
	switch {
	case spec.HeadBytes < 0:
		return invalid(field+".head_bytes", "must not be negative (got %d)", spec.HeadBytes)
	case spec.TailBytes < 0:
		return invalid(field+".tail_bytes", "must not be negative (got %d)", spec.TailBytes)
	case spec.Command == "" && len(spec.CommandRaw) == 0 && len(spec.Argv) == 0 && len(spec.ArgvRaw) == 0:
		return invalid(field, "no command: set command (a shell string) or argv")
	case !utf8.ValidString(spec.Id):
		return invalid(field+".id", "not valid UTF-8")
	}
	return nil
}

// checkEgress refuses a malformed egress policy, one without the private
// network, and allow_cidr ranges outside the operator's --allow-egress-cidr.
func (s *Server) checkEgress(spec *runboxv1.SandboxSpec) error {
	eg := egressPolicy(spec.GetEgress())
	if eg.Empty() {
		return nil
	}
	if spec.Network != "private" {
		return invalid("spec.egress", "an egress policy needs network private, not %q", spec.Network)
	}
	if err := egress.Policy(eg).Check(); err != nil {
		return invalid("spec.egress", "%v", err)
	}
	for _, c := range eg.AllowCIDR {
		// Both sides in the form the host side enforces (an IPv4-mapped
		// address is the IPv4 address it dials), so a range is checked as
		// what it opens.
		p, err := egress.ParsePrefix(c)
		if err != nil {
			return invalid("spec.egress.allow_cidr", "%q: %v", c, err)
		}
		if !slices.ContainsFunc(s.cfg.EgressCIDRs, func(o netip.Prefix) bool {
			o = egress.CanonicalPrefix(o)
			return o.Bits() <= p.Bits() && o.Contains(p.Addr())
		}) {
			return invalid("spec.egress.allow_cidr", "%q is not within a range this server allows (--allow-egress-cidr)", c)
		}
	}
	return nil
}

// egressPolicy converts the wire form of an egress policy.
func egressPolicy(e *runboxv1.EgressPolicy) runbox.EgressPolicy {
	return runbox.EgressPolicy{Allow: e.GetAllow(), AllowCIDR: e.GetAllowCidr(), Deny: e.GetDeny(), Resolve: e.GetResolve()}
}
