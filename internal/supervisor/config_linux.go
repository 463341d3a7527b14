package supervisor

import (
	"fmt"
	"os"
	"time"
)

// Config configures a Supervisor. The zero value is usable.
type Config struct {
	// CgroupMode is "auto" (or empty): cgroup2 where a writable cgroup v2
	// hierarchy exists, else proc; "cgroup2": require it; "off": proc.
	CgroupMode string
	// CgroupDir is the cgroup v2 directory under which execs get their
	// cgroups; empty means this process's own cgroup, found through
	// /proc/self/mountinfo.
	CgroupDir string
	// Retention is how long exited execs and cancel tombstones are kept.
	Retention time.Duration
	// RingBytes bounds each stream's replay ring.
	RingBytes int
	// RetainedOutputBytes bounds the replay rings of exited execs, all
	// together; 0 means DefaultRetainedOutputBytes.
	RetainedOutputBytes int
	// RetainedResultBytes bounds the Results of exited execs (head and
	// tail of each stream, kept stdin, and execOverhead for the exec
	// itself), all together; past it the oldest exited execs are forgotten
	// before their retention ends. 0 means DefaultRetainedResultBytes.
	RetainedResultBytes int
	// Drain bounds output reading after the leader exits.
	Drain time.Duration
	// Dir is the default working directory; empty means the daemon's.
	Dir string
	// Version is reported by Info.
	Version string
	// StateDir holds the daemon's files (session functions, spill files);
	// empty means a fresh temporary directory, removed at Shutdown.
	StateDir string
	// SpillDir is where spill files go; empty means StateDir's "spill"
	// directory. It should be on disk, not a RAM-backed tmpfs, where spilled
	// output would take memory outside the sandbox's limits.
	SpillDir string
	// SpillBytes bounds the total size of spill files; 0 → 1 GiB.
	SpillBytes int64
	// OOMKills, when set, returns how many processes the sandbox's memory
	// limit has killed so far (a cgroup's oom_kill counter). An exec whose
	// leader died of a SIGKILL runbox did not send while the counter rose
	// is reported OOMKilled.
	OOMKills func() (uint64, error)
	// RootLost, when set, says why the sandbox's root filesystem stopped
	// answering: its server, outside the sandbox, is gone (a FUSE root's
	// paths fail with ENOTCONN or ECONNABORTED). A spawn that fails so
	// carries what it returns, so the caller learns that no command can
	// start here any more and what to do, not only an errno.
	RootLost func() string
	// ExecCgroupsV1 are the tasks files of cgroup v1 groups every exec
	// starts in (a pids limit for commands only). The daemon forks from one
	// thread that joins them, so its other threads stay outside: however
	// many processes the commands make, the daemon can still make threads.
	ExecCgroupsV1 []*os.File
	// SpawnSetup, when set, runs once on the OS thread every exec is
	// forked from, before the first fork, with the containment mode
	// (ModeCgroup2 forks with clone3). What it changes in that thread (a
	// mount namespace, capability sets, a seccomp filter) every command
	// inherits, and nothing else in the daemon does. An error fails New.
	SpawnSetup func(mode string) error
	// CommandOOMScoreAdj is the oom_score_adj each command is given as it
	// starts, 1 to 1000; 0 means DefaultCommandOOMScoreAdj (the OOM
	// killer's first choice, and the daemon not); negative leaves commands
	// with the daemon's own.
	CommandOOMScoreAdj int

	// liveCatchUp overrides the package's liveCatchUp (tests).
	liveCatchUp time.Duration
}

// setDefaults fills in what cfg leaves unset: the default bounds, and the
// process's working directory.
func (cfg *Config) setDefaults() error {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.RingBytes <= 0 {
		cfg.RingBytes = DefaultRingBytes
	}
	if cfg.RetainedOutputBytes <= 0 {
		cfg.RetainedOutputBytes = DefaultRetainedOutputBytes
	}
	if cfg.RetainedResultBytes <= 0 {
		cfg.RetainedResultBytes = DefaultRetainedResultBytes
	}
	if cfg.Drain <= 0 {
		cfg.Drain = DefaultDrain
	}
	if cfg.liveCatchUp <= 0 {
		cfg.liveCatchUp = liveCatchUp
	}
	if cfg.CommandOOMScoreAdj == 0 {
		cfg.CommandOOMScoreAdj = DefaultCommandOOMScoreAdj
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("supervisor: working directory: %w", err)
		}
		cfg.Dir = wd
	}
	return nil
}
