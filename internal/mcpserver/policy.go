package mcpserver

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/runbox/runbox"
)

// Ceilings that apply when Limits names none.
const (
	// DefaultMaxMemory is the most memory a model may ask a sandbox to have.
	DefaultMaxMemory int64 = 8 << 30
	// DefaultMaxPids is the most processes and threads a model may ask a
	// sandbox to have.
	DefaultMaxPids int64 = 8192
	// DefaultMaxDisk is the most disk (outside the workspace) a model may
	// ask a sandbox to have.
	DefaultMaxDisk int64 = 20 << 30
)

// DefaultMaxCPUs is the most CPUs a model may ask a sandbox to have: this
// machine's.
var DefaultMaxCPUs = float64(runtime.NumCPU())

// Limits are the operator's defaults and ceilings for the sandboxes the
// sessions make. A model may ask for less or more than a default, within
// the ceiling, but never for no limit.
type Limits struct {
	// Memory (bytes), Pids and CPUs are what a sandbox gets when nobody
	// asks for more or less; zero leaves it to the provider's default.
	Memory int64
	Pids   int64
	CPUs   float64
	// Disk (bytes) is the disk bound of a sandbox that asks for none;
	// zero leaves it to the provider's default (local: a bound; docker:
	// none).
	Disk int64
	// MaxMemory, MaxPids, MaxCPUs and MaxDisk are the most a model may ask
	// for (zero: DefaultMaxMemory, DefaultMaxPids, DefaultMaxCPUs,
	// DefaultMaxDisk).
	MaxMemory int64
	MaxPids   int64
	MaxCPUs   float64
	MaxDisk   int64
	// Network is the network mode of a sandbox that names none ("": the
	// provider's default). A model may ask for Network, for "none" (only
	// loopback), and for the modes in Networks; no other.
	Network  string
	Networks []string
	// Allow are the names a model may let a "private"-network sandbox
	// reach (sandbox_create's allow): each it asks for must be covered by
	// one of these ("*", "*.example.com", or the name). None: a model
	// may make a private sandbox, but open no name.
	Allow []string
}

// withDefaults fills the zero ceilings.
func (l Limits) withDefaults() Limits {
	if l.MaxMemory <= 0 {
		l.MaxMemory = DefaultMaxMemory
	}
	if l.MaxPids <= 0 {
		l.MaxPids = DefaultMaxPids
	}
	if l.MaxCPUs <= 0 {
		l.MaxCPUs = DefaultMaxCPUs
	}
	if l.MaxDisk <= 0 {
		l.MaxDisk = DefaultMaxDisk
	}
	return l
}

// ErrOverCeiling is wrapped by the error for a request above one of the
// operator's ceilings (or for "no limit"), or for a provider or network
// mode the operator does not offer.
var ErrOverCeiling = fmt.Errorf("%w: not allowed here", runbox.ErrInvalidSpec)

// Check reports an operator's defaults that lie above their ceilings or
// are negative.
func (l Limits) Check() error {
	l = l.withDefaults()
	var errs []error
	if l.Memory < 0 || l.Memory > l.MaxMemory {
		errs = append(errs, fmt.Errorf("the default memory %d MiB is not within 0..%d MiB (the ceiling)", l.Memory>>20, l.MaxMemory>>20))
	}
	if l.Pids < 0 || l.Pids > l.MaxPids {
		errs = append(errs, fmt.Errorf("the default pids %d is not within 0..%d (the ceiling)", l.Pids, l.MaxPids))
	}
	if l.CPUs < 0 || l.CPUs > l.MaxCPUs || math.IsNaN(l.CPUs) {
		errs = append(errs, fmt.Errorf("the default cpus %v is not within 0..%v (the ceiling)", l.CPUs, l.MaxCPUs))
	}
	if l.Disk < 0 || l.Disk > l.MaxDisk {
		errs = append(errs, fmt.Errorf("the default disk %d MiB is not within 0..%d MiB (the ceiling)", l.Disk>>20, l.MaxDisk>>20))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	return nil
}

// networks returns the network modes a model may ask for.
func (l Limits) networks() []string {
	out := []string{"none"}
	for _, n := range append([]string{l.Network}, l.Networks...) {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// providers returns the providers a model may name in sandbox_create:
// the default one and Config.Providers. "" stands for the place's default.
func (c Config) providers() []string {
	out := []string{c.Provider}
	for _, p := range c.Providers {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// provider returns the provider a sandbox_create that names asked runs
// with, or an error naming the ones offered.
func (c Config) provider(asked string) (string, error) {
	if asked == "" || slices.Contains(c.providers(), asked) {
		if asked == "" {
			return c.Provider, nil
		}
		return asked, nil
	}
	var named []string
	for _, p := range c.providers() {
		if p != "" {
			named = append(named, p)
		}
	}
	if len(named) == 0 {
		return "", fmt.Errorf("%w: provider %q: this server offers only its default provider; leave provider out", ErrOverCeiling, asked)
	}
	def := c.Provider
	if def == "" {
		def = "the server's default"
	}
	return "", fmt.Errorf("%w: provider %q: this server offers only %s (leave provider out for %s)",
		ErrOverCeiling, asked, strings.Join(named, ", "), def)
}

// defaultSpec is the spec of a session's default sandbox.
func (s *Server) defaultSpec() runbox.SandboxSpec {
	spec := s.cfg.Spec
	l := s.cfg.Limits
	spec.Memory, spec.Pids, spec.CPUs, spec.Disk, spec.Network = l.Memory, l.Pids, l.CPUs, l.Disk, l.Network
	return spec
}

// apply applies what a model asked of sandbox_create to spec: each
// resource within (0, ceiling], the operator's default when not asked.
func (l Limits) apply(spec *runbox.SandboxSpec, in SandboxCreateInput) error {
	spec.Memory, spec.Pids, spec.CPUs, spec.Disk, spec.Network = l.Memory, l.Pids, l.CPUs, l.Disk, l.Network
	if in.DiskMB != nil {
		if *in.DiskMB <= 0 || *in.DiskMB > l.MaxDisk>>20 {
			return fmt.Errorf("%w: disk_mb %d: ask for 1 to %d (the ceiling), or leave it out for %s",
				ErrOverCeiling, *in.DiskMB, l.MaxDisk>>20, orDefault(l.Disk>>20, "MiB"))
		}
		spec.Disk = *in.DiskMB << 20
	}
	if in.MemoryMB != nil {
		if *in.MemoryMB <= 0 || *in.MemoryMB > l.MaxMemory>>20 {
			return fmt.Errorf("%w: memory_mb %d: ask for 1 to %d (the ceiling), or leave it out for %s",
				ErrOverCeiling, *in.MemoryMB, l.MaxMemory>>20, orDefault(l.Memory>>20, "MiB"))
		}
		spec.Memory = *in.MemoryMB << 20
	}
	if in.Pids != nil {
		if *in.Pids <= 0 || *in.Pids > l.MaxPids {
			return fmt.Errorf("%w: pids %d: ask for 1 to %d (the ceiling), or leave it out for %s",
				ErrOverCeiling, *in.Pids, l.MaxPids, orDefault(l.Pids, "processes"))
		}
		spec.Pids = *in.Pids
	}
	if in.CPUs != nil {
		if !(*in.CPUs > 0) || *in.CPUs > l.MaxCPUs {
			return fmt.Errorf("%w: cpus %v: ask for more than 0 and at most %v (the ceiling), or leave it out for %s",
				ErrOverCeiling, *in.CPUs, l.MaxCPUs, orDefault(l.CPUs, "CPUs"))
		}
		spec.CPUs = *in.CPUs
	}
	if in.Network != "" {
		if !slices.Contains(l.networks(), in.Network) {
			return fmt.Errorf("%w: network %q: ask for %s, or leave it out for %s",
				ErrOverCeiling, in.Network, strings.Join(l.networks(), " or "), orDefault(l.Network, ""))
		}
		spec.Network = in.Network
	}
	if len(in.Allow) > 0 {
		if spec.Network != "private" {
			return fmt.Errorf("%w: allow needs network private (a sandbox of its own network, reaching out through its proxy)", runbox.ErrInvalidSpec)
		}
		if err := l.checkAllow(in.Allow); err != nil {
			return err
		}
		spec.Egress.Allow = in.Allow
	}
	return nil
}

// orDefault names a default: "the default (N unit)", or the provider's
// when there is none.
func orDefault[T int64 | float64 | string](v T, unit string) string {
	var zero T
	if v == zero {
		return "the provider's default"
	}
	s := fmt.Sprint(v)
	if f, ok := any(v).(float64); ok {
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	if unit != "" {
		s += " " + unit
	}
	return "the default (" + s + ")"
}
