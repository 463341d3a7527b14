package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/runboxdbin"
)

// cgroupRoot is the name of the cgroup, in every hierarchy, under which
// each local sandbox gets its own (named by its id).
const cgroupRoot = "runbox-local"

// Record.Extra keys for what a sandbox's cgroups are.
const (
	extraCgroup2    = "cgroup2"     // absolute path of its cgroup v2 directory
	extraCgroup1    = "cgroup1"     // its path in each v1 hierarchy it uses
	extraOOMControl = "oom_control" // the file whose oom_kill counter runboxd reads
	// extraFuseCgroup2 is the cgroup v2 directory of the sandbox's FUSE
	// server (fuseServerGroup), on a unified host.
	extraFuseCgroup2 = "fuse_server_cgroup2"
	// extraFuseMemory is the FUSE server's memory limit (fuseServerMemory).
	extraFuseMemory = "fuse_server_memory"
)

// limitSubsystems are the v1 controllers the limits use.
var limitSubsystems = []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Cpu}

// sandboxCgroups is where a sandbox's runboxd is placed: a cgroup v2
// directory (the root of its cgroup namespace, under which runboxd makes one
// cgroup per exec) and, for limits on a v1 or hybrid host, v1 cgroups.
type sandboxCgroups struct {
	v2Dir       string
	v1          cgroup1.Cgroup
	v1Path      string
	oomControl  string
	execTasks   []string // tasks files of the groups only commands are in
	keepThreads int      // threads runboxd keeps where it shares the pids limit

	// fuseV2Dir (unified host) and fuseTasks (v1 or hybrid host) are
	// where the sandbox's FUSE server starts: see fuseServerGroup.
	fuseV2Dir string
	fuseTasks []string
	fuseOOM   string // the oom_kill counter of its group, when limited
}

// commandsGroup is the v1 cgroup, inside a sandbox's, that holds its
// commands and not runboxd, in the hierarchies of the limits that must be
// the commands' alone: pids (a fork bomb that reaches the limit must not stop
// runboxd making the threads it needs) and memory (the OOM killer, choosing
// among the processes whose leader is in the group, must not choose
// runboxd). runboxd forks from one thread of its own that has joined it.
const commandsGroup = "commands"

// fuseServerGroup is the cgroup of a sandbox's FUSE server, which serves
// its root from outside it and whose memory grows with what its commands
// do to their filesystem (a node per name looked up, a table of a
// directory's entries per open handle read): without a group of its own
// that memory would be counted under no limit. On a v1 or hybrid host it
// is a child of the sandbox's cgroup, beside commandsGroup, in the memory
// and pids hierarchies; on a unified host, where the sandbox's cgroup
// holds runboxd and so may not give a child a limit of its own (cgroup
// v2's no-internal-processes rule), it is the sibling
// runbox-local/<id>.fuse-server. Either way it is not under the cgroup
// the sandbox's runboxd is delegated, so nothing inside can move into it,
// out of it, or change its limits. Its memory limit is the sandbox's (see
// fuseServerMemory); runboxd is never in it, so a server that reaches it
// is the only process the kernel's OOM killer may choose there.
const fuseServerGroup = "fuse-server"

// fuseServerPids bounds the FUSE server's processes and threads:
// fuse-overlayfs serves from one thread (it runs
// `runboxd fuse-root`, a Go program, for a moment first: a handful more).
const fuseServerPids = 64

func hasLimits(spec runbox.SandboxSpec) bool {
	return spec.Memory > 0 || spec.Pids > 0 || spec.CPUs > 0
}

// newCgroups makes the sandbox's cgroups, with the spec's limits and, when
// shares is not 0, that CPU weight (cpu.shares; cgroup v2's cpu.weight is
// shares scaled as the kernel's own v1 emulation does), and, when
// fuseRoot, the group its FUSE server starts in (fuseServerGroup). Without
// root it makes none, and refuses limits (rootless, there is no FUSE
// server either: the kernel's overlay serves the root).
func newCgroups(id string, spec runbox.SandboxSpec, shares uint64, rootless, fuseRoot bool) (*sandboxCgroups, error) {
	if rootless {
		if hasLimits(spec) {
			return nil, fmt.Errorf("resource limits need cgroups, which only root can make here: %w", errors.ErrUnsupported)
		}
		return &sandboxCgroups{}, nil
	}
	c := &sandboxCgroups{}
	mode := cgroups.Mode()
	if mode == cgroups.Unified {
		// Limits and per-exec containment in one v2 tree.
		res := &cgroup2.Resources{}
		if spec.Memory > 0 {
			res.Memory = &cgroup2.Memory{Max: &spec.Memory}
		}
		if spec.Pids > 0 {
			// runboxd shares the limit, and keeps its threads from the
			// start (cgroup v2 has no thread-level pids group).
			res.Pids = &cgroup2.Pids{Max: spec.Pids + runboxdbin.SharedLimitAllowance}
			c.keepThreads = runboxdbin.SharedLimitThreads
		}
		if spec.CPUs > 0 || shares > 0 {
			res.CPU = &cgroup2.CPU{}
		}
		if spec.CPUs > 0 {
			quota, period := cpuQuota(spec.CPUs)
			res.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
		}
		if shares > 0 {
			weight := 1 + (shares-2)*9999/262142
			res.CPU.Weight = &weight
		}
		group := "/" + cgroupRoot + "/" + id
		if _, err := cgroup2.NewManager("/sys/fs/cgroup", group, res); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", group, err)
		}
		c.v2Dir = filepath.Join("/sys/fs/cgroup", group)
		if spec.Memory > 0 {
			c.oomControl = filepath.Join(c.v2Dir, "memory.events")
		}
		if fuseRoot {
			if err := c.newFuseServerGroup2(group+"."+fuseServerGroup, spec); err != nil {
				c.remove()
				return nil, err
			}
		}
		return c, nil
	}
	// A v1 or hybrid host: limits in v1, per-exec containment in the v2
	// hierarchy when there is one.
	if mnt := cgroup2Mount(); mnt != "" {
		dir := filepath.Join(mnt, cgroupRoot, id)
		if err := os.MkdirAll(dir, 0o755); err == nil {
			c.v2Dir = dir
		}
	}
	if hasLimits(spec) || shares > 0 || fuseRoot {
		res := &specs.LinuxResources{CPU: &specs.LinuxCPU{}}
		if spec.CPUs > 0 {
			quota, period := cpuQuota(spec.CPUs)
			res.CPU.Quota, res.CPU.Period = &quota, &period
		}
		if shares > 0 {
			res.CPU.Shares = &shares
		}
		c.v1Path = "/" + cgroupRoot + "/" + id
		cg, err := cgroup1.New(cgroup1.StaticPath(c.v1Path), res, cgroup1.WithHierarchy(limitHierarchy))
		if err != nil {
			c.remove()
			return nil, fmt.Errorf("cgroup v1 %s: %w", c.v1Path, err)
		}
		c.v1 = cg
		if err := c.newCommandsGroup(spec); err != nil {
			c.remove()
			return nil, err
		}
		if fuseRoot {
			if err := c.newFuseServerGroup1(spec); err != nil {
				c.remove()
				return nil, err
			}
		}
	}
	return c, nil
}

// fuseServerSubsystems are the v1 hierarchies of fuseServerGroup.
var fuseServerSubsystems = []cgroup1.Name{cgroup1.Pids, cgroup1.Memory}

// fuseServerMemory is the memory limit of a sandbox's FUSE server, 0 for
// none: the sandbox's own memory limit, and at least FuseServerMinMemory.
// What a sandbox's commands make the server hold is then bounded by what
// the sandbox was given, so a host that can afford a sandbox's memory can
// afford its server too; a sandbox asked to be unlimited (--memory 0) has
// an unlimited server, as its commands are.
func fuseServerMemory(spec runbox.SandboxSpec) int64 {
	if spec.Memory <= 0 {
		return 0
	}
	return max(spec.Memory, FuseServerMinMemory)
}

// newFuseServerGroup1 makes fuseServerGroup on a v1 or hybrid host, in the
// memory and pids hierarchies, with fuseServerMemory and fuseServerPids.
// It stays root's: the sandbox's root is delegated nothing of it.
func (c *sandboxCgroups) newFuseServerGroup1(spec runbox.SandboxSpec) error {
	limit := int64(fuseServerPids)
	res := &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}
	if m := fuseServerMemory(spec); m > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &m}
	}
	group := c.v1Path + "/" + fuseServerGroup
	hierarchy := func() ([]cgroup1.Subsystem, error) {
		all, err := limitHierarchy()
		return slices.DeleteFunc(all, func(s cgroup1.Subsystem) bool { return !slices.Contains(fuseServerSubsystems, s.Name()) }), err
	}
	if _, err := cgroup1.New(cgroup1.StaticPath(group), res, cgroup1.WithHierarchy(hierarchy)); err != nil {
		return fmt.Errorf("cgroup v1 %s: %w", group, err)
	}
	for _, name := range fuseServerSubsystems {
		if dir := subsystemPath(name, group); dir != "" {
			c.fuseTasks = append(c.fuseTasks, filepath.Join(dir, "tasks"))
			if name == cgroup1.Memory && res.Memory != nil {
				c.fuseOOM = filepath.Join(dir, "memory.oom_control")
			}
		}
	}
	if len(c.fuseTasks) == 0 {
		return fmt.Errorf("cgroup v1 %s: no memory or pids hierarchy to put the FUSE server in", group)
	}
	return nil
}

// newFuseServerGroup2 makes fuseServerGroup on a unified host, at group
// (beside the sandbox's own cgroup), with fuseServerMemory and
// fuseServerPids.
func (c *sandboxCgroups) newFuseServerGroup2(group string, spec runbox.SandboxSpec) error {
	res := &cgroup2.Resources{Pids: &cgroup2.Pids{Max: fuseServerPids}}
	if m := fuseServerMemory(spec); m > 0 {
		res.Memory = &cgroup2.Memory{Max: &m}
	}
	if _, err := cgroup2.NewManager("/sys/fs/cgroup", group, res); err != nil {
		return fmt.Errorf("cgroup %s: %w", group, err)
	}
	c.fuseV2Dir = filepath.Join("/sys/fs/cgroup", group)
	if res.Memory != nil {
		c.fuseOOM = filepath.Join(c.fuseV2Dir, "memory.events")
	}
	return nil
}

// commandsSubsystems are the hierarchies of commandsGroup.
var commandsSubsystems = []cgroup1.Name{cgroup1.Pids, cgroup1.Memory}

// newCommandsGroup makes commandsGroup with the spec's memory and pids
// limits, in the hierarchies those need.
func (c *sandboxCgroups) newCommandsGroup(spec runbox.SandboxSpec) error {
	res := &specs.LinuxResources{}
	var names []cgroup1.Name
	if spec.Memory > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &spec.Memory}
		names = append(names, cgroup1.Memory)
	}
	if spec.Pids > 0 {
		limit := spec.Pids + 1 // and the runboxd thread that forks them
		res.Pids = &specs.LinuxPids{Limit: &limit}
		names = append(names, cgroup1.Pids)
	}
	if len(names) == 0 {
		return nil
	}
	group := c.v1Path + "/" + commandsGroup
	hierarchy := func() ([]cgroup1.Subsystem, error) {
		all, err := limitHierarchy()
		return slices.DeleteFunc(all, func(s cgroup1.Subsystem) bool { return !slices.Contains(names, s.Name()) }), err
	}
	if _, err := cgroup1.New(cgroup1.StaticPath(group), res, cgroup1.WithHierarchy(hierarchy)); err != nil {
		return fmt.Errorf("cgroup v1 %s: %w", group, err)
	}
	for _, name := range names {
		c.execTasks = append(c.execTasks, filepath.Join(subsystemPath(name, group), "tasks"))
	}
	if spec.Memory > 0 {
		c.oomControl = filepath.Join(subsystemPath(cgroup1.Memory, group), "memory.oom_control")
	}
	return nil
}

// subsystemPath is where a v1 cgroup's directory is in one hierarchy, or
// "" when that hierarchy is not mounted.
func subsystemPath(name cgroup1.Name, group string) string {
	subs, _ := limitHierarchy()
	for _, sub := range subs {
		if p, ok := sub.(interface{ Path(string) string }); ok && sub.Name() == name {
			return p.Path(group)
		}
	}
	return ""
}

// limitHierarchy is the v1 hierarchies the limits use, and no others.
func limitHierarchy() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(s cgroup1.Subsystem) bool {
		return !slices.Contains(limitSubsystems, s.Name())
	}), nil
}

// cpuQuota turns a CPU count into a CFS quota per 100 ms period.
func cpuQuota(cpus float64) (quota int64, period uint64) {
	period = 100_000
	return int64(cpus * float64(period)), period
}

// place puts pid into the sandbox's v1 cgroups (the v2 one it was cloned
// into).
func (c *sandboxCgroups) place(pid int) error {
	if c.v1 == nil {
		return nil
	}
	if err := c.v1.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("cgroup v1 %s: add runboxd: %w", c.v1Path, err)
	}
	return nil
}

// enterFuseServerGroup makes the calling thread, locked to its goroutine
// (startFuseServer's), one whose children start in the sandbox's
// fuseServerGroup: on a v1 or hybrid host the thread joins the group
// itself (a v1 child starts in its parent thread's groups), on a unified
// host attr clones the child into it (clone3's CLONE_INTO_CGROUP). So the
// server is bounded from its first instruction, before it can serve a
// single request. The returned function, to call once the child is
// started, puts the thread back in the groups it left and closes what
// attr holds: no thread of this process stays in the server's group (the
// runtime may keep a locked thread rather than end it, its main one), to
// be charged, or killed, with the server. With no group (rootless, or a
// sandbox without a FUSE root) it does nothing.
func (c *sandboxCgroups) enterFuseServerGroup(attr *syscall.SysProcAttr) (func(), error) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	var back []string
	leave := func() {
		for _, tasks := range back {
			_ = os.WriteFile(tasks, tid, 0)
		}
	}
	if len(c.fuseTasks) > 0 {
		own, err := os.ReadFile("/proc/thread-self/cgroup")
		if err != nil {
			return nil, fmt.Errorf("put %s in its cgroup: %w", FuseServer, err)
		}
		for _, name := range fuseServerSubsystems {
			if group := v1GroupOf(own, name); group != "" {
				if dir := subsystemPath(name, group); dir != "" {
					back = append(back, filepath.Join(dir, "tasks"))
				}
			}
		}
	}
	for _, tasks := range c.fuseTasks {
		if err := os.WriteFile(tasks, tid, 0); err != nil {
			leave()
			return nil, fmt.Errorf("put %s in its cgroup: %w", FuseServer, err)
		}
	}
	if c.fuseV2Dir == "" {
		return leave, nil
	}
	dir, err := os.Open(c.fuseV2Dir)
	if err != nil {
		leave()
		return nil, fmt.Errorf("put %s in its cgroup: %w", FuseServer, err)
	}
	attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	return func() { leave(); dir.Close() }, nil
}

// v1GroupOf returns the group of the v1 hierarchy of controller name in
// a /proc/*/cgroup listing, or "".
func v1GroupOf(listing []byte, name cgroup1.Name) string {
	for line := range strings.Lines(string(listing)) {
		// hierarchy-ID:controller-list:path
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), string(name)) {
			return f[2]
		}
	}
	return ""
}

// delegate gives the sandbox's mapped root what runboxd, running as it,
// writes: its cgroup v2 directory (where it makes one cgroup per exec, and
// moves processes) and the v1 tasks files its spawn thread joins, as
// systemd and runc delegate a subtree.
func (c *sandboxCgroups) delegate(ids idMap) error {
	if !ids.mapped() {
		return nil
	}
	var paths []string
	if c.v2Dir != "" {
		paths = append(paths, c.v2Dir)
		for _, f := range []string{"cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
			paths = append(paths, filepath.Join(c.v2Dir, f))
		}
	}
	paths = append(paths, c.execTasks...)
	for _, p := range paths {
		if err := ids.chown(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delegate cgroup %s: %w", p, err)
		}
	}
	return nil
}

// record notes the cgroups in a record's Extra.
func (c *sandboxCgroups) record(extra map[string]string) {
	if c.v2Dir != "" {
		extra[extraCgroup2] = c.v2Dir
	}
	if c.v1Path != "" {
		extra[extraCgroup1] = c.v1Path
	}
	if c.oomControl != "" {
		extra[extraOOMControl] = c.oomControl
	}
	if c.fuseV2Dir != "" {
		extra[extraFuseCgroup2] = c.fuseV2Dir
	}
}

func (c *sandboxCgroups) remove() error {
	return removeCgroups(c.v2Dir, c.v1Path, c.fuseV2Dir)
}

// removeCgroups deletes a sandbox's cgroups once its processes are gone:
// its v2 directory, its v1 groups (commandsGroup and fuseServerGroup in
// them) and its FUSE server's v2 directory (fuseV2Dir, on a unified host).
// The kernel kills the rest of a pid namespace when its init exits, but
// they take a moment to leave their cgroups, so it retries for a while.
// The FUSE server ends by itself once the sandbox's root is unmounted,
// which happens when its last process is gone; one that lingers past the
// wait is killed, as removeCgroupTree kills what lingers in a v2 tree.
func removeCgroups(v2Dir, v1Path, fuseV2Dir string) error {
	var errs []error
	for _, dir := range []string{v2Dir, fuseV2Dir} {
		if dir != "" {
			if err := removeCgroupTree(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if v1Path != "" {
		for _, name := range commandsSubsystems {
			if dir := subsystemPath(name, v1Path+"/"+commandsGroup); dir != "" {
				if err := removeWhenEmpty(dir); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, name := range fuseServerSubsystems {
			if dir := subsystemPath(name, v1Path+"/"+fuseServerGroup); dir != "" {
				if err := removeKillingStragglers(dir); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if cg, err := cgroup1.Load(cgroup1.StaticPath(v1Path), cgroup1.WithHierarchy(limitHierarchy)); err == nil {
			var derr error
			for deadline := time.Now().Add(cgroupRemoveBound); ; time.Sleep(20 * time.Millisecond) {
				if derr = cg.Delete(); derr == nil || time.Now().After(deadline) {
					break
				}
			}
			if derr != nil {
				errs = append(errs, fmt.Errorf("cgroup v1 %s: %w", v1Path, derr))
			}
		} else if !errors.Is(err, cgroup1.ErrCgroupDeleted) {
			errs = append(errs, fmt.Errorf("cgroup v1 %s: %w", v1Path, err))
		}
	}
	// The shared parents go too once no sandbox uses them (best effort:
	// another sandbox may be starting in them right now).
	if v2Dir != "" {
		_ = os.Remove(filepath.Dir(v2Dir))
	}
	if v1Path != "" {
		if subs, err := limitHierarchy(); err == nil {
			for _, sub := range subs {
				if p, ok := sub.(interface{ Path(string) string }); ok {
					_ = os.Remove(p.Path("/" + cgroupRoot))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupRemoveBound bounds how long removal waits for a sandbox's last
// processes to leave its cgroups. The kernel kills a pid namespace's
// processes when its init exits, but on a loaded machine the last of them
// (and the teardown of the sandbox's mounts) can take seconds.
const cgroupRemoveBound = 15 * time.Second

// removeCgroupTree removes a cgroup v2 directory and the per-exec cgroups
// runboxd left in it, deepest first, killing what still runs in them. Each
// round walks the tree afresh.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	deadline := time.Now().Add(cgroupRemoveBound)
	for {
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		var last error
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
				last = err
			}
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: %w", dir, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeWhenEmpty removes a v1 cgroup directory once its last task has
// left it (dying tasks take a moment), if it exists.
func removeWhenEmpty(dir string) error {
	deadline := time.Now().Add(cgroupRemoveBound)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup v1 %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeKillingStragglers removes a v1 cgroup directory as
// removeWhenEmpty does, but kills what is still in it half-way through
// the wait: only a sandbox's FUSE server is ever there, and it has nothing
// left to serve once the sandbox's runboxd is gone.
func removeKillingStragglers(dir string) error {
	deadline := time.Now().Add(cgroupRemoveBound)
	killAt := time.Now().Add(cgroupRemoveBound / 2)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup v1 %s: %w", dir, err)
		}
		if time.Now().After(killAt) {
			if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
				for f := range strings.FieldsSeq(string(b)) {
					// Never this process: a thread of the provider that
					// started a server may be there for a moment.
					if pid, perr := strconv.Atoi(f); perr == nil && pid > 0 && pid != os.Getpid() {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroup2Mount returns where a cgroup v2 hierarchy is mounted, or "".
func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if f := strings.Fields(post); len(f) > 0 && f[0] == "cgroup2" {
			if pf := strings.Fields(pre); len(pf) > 4 {
				return pf[4]
			}
		}
	}
	return ""
}
