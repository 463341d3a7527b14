package server

import (
	"strconv"
	"strings"
	"time"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Limits are the operator's ceilings on what a tenant may ask for, and the
// defaults a tenant that asks for nothing gets. A zero field means no
// ceiling (Max*) or no default (Default*). With a ceiling set, "no limit"
// (0, or nothing, with no default) is refused like a value above it: a
// tenant cannot escape a ceiling by asking for none.
type Limits struct {
	MaxMemory, DefaultMemory int64 // bytes
	MaxPids, DefaultPids     int64
	MaxCPUs, DefaultCPUs     float64
	// MaxDisk bounds what a tenant may ask for; DefaultDisk is what a
	// tenant that asks for nothing gets (0: the provider's own default,
	// which for local is a bound within DefaultMaxDisk and for docker is
	// none). Unlike the others, asking for nothing is not refused under
	// MaxDisk: 0 is the provider's default, never "no limit", as no
	// tenant can ask for none.
	MaxDisk, DefaultDisk               int64 // bytes
	MaxExecTimeout, DefaultExecTimeout time.Duration
}

// ceiling applies a default and a ceiling to *v (already checked not to be
// negative), naming field and the operator's flag in a refusal.
func ceiling[T int64 | float64](field, flag string, v *T, def, max T) error {
	if *v == 0 {
		*v = def
	}
	if max > 0 && (*v == 0 || *v > max) {
		asked := "no limit"
		if *v != 0 {
			asked = formatNum(*v)
		}
		return invalid(field, "%s is above this server's ceiling %s (%s)", asked, formatNum(max), flag)
	}
	return nil
}

func formatNum[T int64 | float64](v T) string {
	return strings.TrimSuffix(strings.TrimRight(strings.TrimRight(strconvFormat(float64(v)), "0"), "."), ".")
}

// applySandboxLimits gives spec the operator's defaults and refuses what is
// above a ceiling.
// The host and ssh providers cannot limit resources (they refuse any
// limit), so they get no default and no ceiling: an operator who offers
// them offers no isolation (--allow-host-provider).
func (s *Server) applySandboxLimits(spec *runboxv1.SandboxSpec) error {
	if spec.Provider == "host" || spec.Provider == "ssh" {
		return nil
	}
	l := s.cfg.Limits
	if err := ceiling("spec.memory_bytes", "--max-memory", &spec.MemoryBytes, l.DefaultMemory, l.MaxMemory); err != nil {
		return err
	}
	if err := ceiling("spec.pids", "--max-pids", &spec.Pids, l.DefaultPids, l.MaxPids); err != nil {
		return err
	}
	if err := ceiling("spec.cpus", "--max-cpus", &spec.Cpus, l.DefaultCPUs, l.MaxCPUs); err != nil {
		return err
	}
	if spec.DiskBytes == 0 {
		spec.DiskBytes = l.DefaultDisk
	}
	if l.MaxDisk > 0 && spec.DiskBytes > l.MaxDisk {
		return invalid("spec.disk_bytes", "%d is above this server's ceiling %d (--max-disk)", spec.DiskBytes, l.MaxDisk)
	}
	return nil
}

// applyExecLimits gives an exec spec the default timeout and refuses one
// above the ceiling (or none, under a ceiling).
func (s *Server) applyExecLimits(field string, spec *runboxv1.ExecSpec) error {
	l := s.cfg.Limits
	return ceiling(field+".timeout_ms", "--max-exec-timeout", &spec.TimeoutMs, l.DefaultExecTimeout.Milliseconds(), l.MaxExecTimeout.Milliseconds())
}

func strconvFormat(f float64) string { return strconv.FormatFloat(f, 'f', 3, 64) }
