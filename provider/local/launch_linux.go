package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/owndir"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/runboxdbin"
)

// Descriptors runboxd inherits (see cmd/runboxd's jail mode).
const (
	configFD   = 3 // a unix socket: the configuration, with mount descriptors
	listenerFD = 4 // the API socket, listening
	// binaryFD is runboxd's binary, executed through /proc/self/fd: a
	// mapped root may not be able to search the directories it lies in
	// (a private build directory, a home).
	binaryFD = 5
)

// SpillDir is where runboxd writes the full output of streams that
// outgrow a result's head and tail, inside the sandbox: on its overlay, so
// on the host's disk, not in a RAM tmpfs outside the sandbox's memory
// limit; readable by the sandbox's commands (it is their own output).
const SpillDir = "/var/tmp/runbox-spill"

// Paths of the host that a sandbox on the host's root does not see (see
// jail.Config): homes replaced by empty ones of its own, /run (daemons'
// sockets, container engines among them) by a fresh tmpfs, SSH host keys
// and container engines' state (engineDirs) masked.
var (
	privateDirs = []string{"/root", "/home"}
	freshDirs   = []string{"/run", "/var/run"}
	maskedGlobs = []string{"/etc/ssh/ssh_host_*_key"}
)

// launch builds the sandbox's directories and cgroups and starts runboxd
// as PID 1 of new namespaces, in its cgroups from its first instruction.
func (p *Provider) launch(ctx context.Context, l procbox.Launch) (*procbox.Detached, error) {
	s := &launching{l: l, rec: l.Record, spec: l.Spec}
	defer s.release()
	if err := checkRunboxd(s.rec.Runboxd); err != nil {
		return nil, err
	}
	if err := p.chooseRoot(s); err != nil {
		return nil, err
	}
	if err := s.prepareLayers(); err != nil {
		return nil, err
	}
	if err := p.stackFromSnapshot(s); err != nil {
		return nil, err
	}
	if err := s.makeCgroups(); err != nil {
		return nil, err
	}
	fail := func(err error) (*procbox.Detached, error) {
		s.cg.remove()
		return nil, err
	}
	if err := s.cg.delegate(s.ids); err != nil {
		return fail(err)
	}
	s.recordDetail()
	cfg, err := s.jailConfig()
	if err != nil {
		return fail(err)
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fail(fmt.Errorf("jail config: %w", err))
	}
	proc, err := s.startJail(cfg)
	if err != nil {
		return fail(err)
	}
	stopped := func(err error) (*procbox.Detached, error) {
		proc.Kill()
		<-proc.Exited
		os.Remove(s.rec.Socket)
		return fail(err)
	}
	if err := s.sendConfig(cfg, cfgJSON, proc); err != nil {
		return stopped(err)
	}
	if s.fuseRoot {
		pid, err := p.serveRoot(ctx, s.binF, s.fuseServer, s.parent, s.cloneLayers, s.ids, s.cg, proc, l)
		if err != nil {
			return stopped(err)
		}
		s.rec.Extra["fuse_server_pid"] = strconv.Itoa(pid)
	}
	if cfg.Egress {
		pid, err := startEgressHost(s.rec.Runboxd, l.Dir, s.rec.Socket, proc.Pid, l.Log)
		if err != nil {
			return stopped(err)
		}
		s.rec.Extra["egress_pid"] = strconv.Itoa(pid)
	}
	return proc, nil
}

// launching is what the steps of launch share: the sandbox's record and
// spec, how its root is made, where its layers are, its cgroups, and the
// descriptors held until launch returns.
type launching struct {
	l    procbox.Launch
	rec  *procbox.Record
	spec runbox.SandboxSpec // with the default limits once makeCgroups has run

	ids      idMap
	lower    string // the overlay's lower layer: "/" or the rootfs
	rootless bool   // in a user namespace of the caller's uid alone
	// fuseRoot says the host's root is served through FUSE (fuseServer)
	// by a stranger to it (see fuseServerCmd): root-only host files stay
	// unreadable, wherever they are, with no list of paths to hide.
	fuseRoot   bool
	fuseServer string

	disk   int64   // the bound on the sandbox's writable layers, 0 for none
	layers string  // the layers' directory on the host
	dk     *diskFS // the layers' own filesystem, or nil

	cg      *sandboxCgroups
	tmpSize int64
	shares  uint64

	// binF and parent are runboxd's binary and this side of its
	// configuration socket, which the FUSE server's start still needs.
	binF, parent *os.File
	// atEnd is what launch undoes when it returns, in reverse order: it
	// closes the descriptors runboxd inherited or was sent (its copies
	// stay), and the sandbox's disk (its mount stays).
	atEnd []func()
}

// release runs s.atEnd, last in first.
func (s *launching) release() {
	for i := len(s.atEnd) - 1; i >= 0; i-- {
		s.atEnd[i]()
	}
}

// closeAtEnd closes f when launch returns.
func (s *launching) closeAtEnd(f *os.File) {
	s.atEnd = append(s.atEnd, func() { f.Close() })
}

// checkRunboxd reads runboxd's binary and refuses a dynamically linked
// one, before anything is made: it would run in the host's root until it
// pivots and then find its libraries gone, and a build with cgo cannot
// jail itself at all (a static build with cgo is refused by the jail:
// jail.ErrCgoBuild).
func checkRunboxd(path string) error {
	bin, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read runboxd: %w", err)
	}
	return runboxdbin.CheckStatic(bin, path)
}

// chooseRoot decides the sandbox's ids and root: the lower layer (the
// host's root or the spec's rootfs), and whether the host's root is served
// through FUSE, which needs its server and an overflow id.
func (p *Provider) chooseRoot(s *launching) error {
	var err error
	if s.ids, err = chooseIDMap(p.UIDBase, s.spec.HostRoot); err != nil {
		return err
	}
	s.lower = "/"
	if s.spec.Rootfs != "" {
		if s.lower, err = filepath.Abs(s.spec.Rootfs); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	// As root, the host's root is served through FUSE by a stranger to it.
	s.fuseRoot = s.ids.mapped() && s.lower == "/"
	if s.fuseRoot {
		if s.fuseServer, err = findFuseServer(); err != nil {
			return err
		}
		if s.ids.swapped, err = overflowID(); err != nil {
			return err
		}
	}
	s.rootless = s.ids.userns && s.ids.size == 1
	return nil
}

// makeCgroups gives the spec its default limits (not rootless: there are
// no cgroups to hold them) and makes the sandbox's cgroups.
func (s *launching) makeCgroups() error {
	if !s.rootless {
		s.spec, s.tmpSize, s.shares = withDefaults(s.spec)
	}
	var err error
	s.cg, err = newCgroups(s.rec.ID, s.spec, s.shares, s.rootless, s.fuseRoot)
	return err
}

// network is the sandbox's network mode, never "".
func (s *launching) network() string {
	if s.spec.Network == "" {
		return NetworkHost
	}
	return s.spec.Network
}

// recordDetail puts in the record what runbox inspect shows of the
// sandbox's isolation: its cgroups, root, network, limits and user
// namespace.
func (s *launching) recordDetail() {
	rec, spec, ids := s.rec, s.spec, s.ids
	if rec.Extra == nil {
		rec.Extra = map[string]string{}
	}
	s.cg.record(rec.Extra)
	if spec.Rootfs != "" {
		rec.Extra["rootfs"] = s.lower
	}
	rec.Extra["network"] = s.network()
	// The limits, as runbox inspect shows them (bytes, a count, CPUs).
	if spec.Memory > 0 {
		rec.Extra["memory"] = strconv.FormatInt(spec.Memory, 10)
	}
	if spec.Pids > 0 {
		rec.Extra["pids"] = strconv.FormatInt(spec.Pids, 10)
	}
	if spec.CPUs > 0 {
		rec.Extra["cpus"] = strconv.FormatFloat(spec.CPUs, 'f', -1, 64)
	}
	if s.shares > 0 {
		rec.Extra["cpu_shares"] = strconv.FormatUint(s.shares, 10)
	}
	if s.tmpSize > 0 {
		rec.Extra["tmp_size"] = strconv.FormatInt(s.tmpSize, 10)
	}
	if s.disk > 0 {
		rec.Extra["disk"] = strconv.FormatInt(s.disk, 10)
	}
	if s.fuseRoot {
		rec.Extra["root"] = "host's root through " + FuseServer + ", read as an unprivileged host user"
		if m := fuseServerMemory(spec); m > 0 && !s.rootless {
			rec.Extra[extraFuseMemory] = strconv.FormatInt(m, 10)
		}
	}
	switch {
	case ids.mapped():
		rec.Extra["userns"] = fmt.Sprintf("0-%d -> host %d-%d", ids.size-1, ids.hostUID, ids.hostUID+ids.size-1)
	case ids.userns:
		rec.Extra["userns"] = fmt.Sprintf("0 -> host %d", ids.hostUID)
	default:
		rec.Extra["userns"] = "none: sandbox root is host root (--host-root)"
	}
}

// jailConfig is runboxd's jail configuration: how it builds the sandbox's
// root, what it hides of the host's, its namespaces and its cgroup files.
// A private sandbox's egress policy is written beside it.
func (s *launching) jailConfig() (jail.Config, error) {
	rec, l, ids, network := s.rec, s.l, s.ids, s.network()
	cfg := jail.Config{
		Lower:         s.lower,
		LowerTree:     ids.mapped() && !s.fuseRoot,
		FuseRoot:      s.fuseRoot,
		LayersTree:    ids.mapped() || s.dk != nil,
		Upper:         s.inLayers(upperDir),
		Work:          s.inLayers(workDir),
		Merged:        s.inLayers(mergedDir),
		Workspace:     rec.Workdir,
		WorkspaceTree: ids.mapped() && rec.Workdir != "",
		Socket:        rec.Socket,
		ListenerFD:    listenerFD,
		CloseFDs:      []int{binaryFD},
		UserNS:        ids.userns,
		Hostname:      hostname(rec),
		NetworkNone:   network == NetworkNone || network == NetworkPrivate,
		Egress:        network == NetworkPrivate,
		Mask:          []string{l.Home},
		PrivateDir:    s.inLayers("private"),
		Env:           jail.DefaultEnv,
		OOMControl:    s.cg.oomControl,
		// The server's own counter: runboxd says why the root is gone.
		FuseServerOOMControl: s.cg.fuseOOM,
		ExecTasks:            s.cg.execTasks,
		Threads:              s.cg.keepThreads,
		AuthSHA256:           l.AuthSHA256,
	}
	if s.fuseRoot {
		cfg.Direct = []string{SpillDir}
	}
	if rec.Workdir != "" && !cfg.WorkspaceTree {
		// The jail opens the workspace by its path in its own mount
		// namespace and refuses any directory but the one checked.
		var err error
		if cfg.WorkspaceDev, cfg.WorkspaceIno, err = owndir.Stat(l.WorkdirHandle); err != nil {
			return jail.Config{}, err
		}
	}
	if s.lower == "/" {
		cfg.Private, cfg.Fresh = privateDirs, freshDirs
		cfg.Mask = append(cfg.Mask, engineDirs()...)
		for _, g := range maskedGlobs {
			m, _ := filepath.Glob(g)
			cfg.MaskFiles = append(cfg.MaskFiles, m...)
		}
	}
	cfg.TmpSize = s.tmpSize
	if network == NetworkPrivate {
		cfg.Env = append(slices.Clip(cfg.Env), egress.Env...)
		if err := egress.WritePolicy(filepath.Join(l.Dir, egress.PolicyFile), egress.Policy(s.spec.Egress)); err != nil {
			return jail.Config{}, err
		}
	}
	return cfg, nil
}

// startJail starts `runboxd jail` detached, as PID 1 of new namespaces
// and in the sandbox's cgroup from its first instruction, with its
// listening socket, its binary and one end of its configuration socket
// (the other is s.parent). It waits for its configuration.
func (s *launching) startJail(cfg jail.Config) (*procbox.Detached, error) {
	rec, l := s.rec, s.l
	ln, err := listenSocket(rec.Socket)
	if err != nil {
		return nil, err
	}
	s.closeAtEnd(ln)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("config socket: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "config")
	s.closeAtEnd(child)
	s.parent = os.NewFile(uintptr(pair[0]), "config")
	s.closeAtEnd(s.parent)

	if s.binF, err = os.Open(rec.Runboxd); err != nil {
		return nil, fmt.Errorf("runboxd: %w", err)
	}
	s.closeAtEnd(s.binF)
	cmd := &exec.Cmd{
		Path: fmt.Sprintf("/proc/self/fd/%d", binaryFD),
		Args: append([]string{rec.Runboxd, "jail", "--spill-dir", SpillDir}, s.spec.DaemonArgs...),
	}
	cmd.Dir = "/"
	cmd.Env = jail.DefaultEnv
	cmd.Stdout, cmd.Stderr = l.Log, l.Log
	cmd.ExtraFiles = []*os.File{child, ln, s.binF} // configFD, listenerFD, binaryFD
	if cmd.SysProcAttr, err = s.jailProcAttr(cfg); err != nil {
		return nil, err
	}
	proc, err := procbox.StartDetached(cmd)
	if err != nil {
		os.Remove(rec.Socket)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) {
			return nil, fmt.Errorf("%w (%v): run as root, enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces), or use --provider host or --provider docker",
				ErrNoNamespaces, err)
		}
		return nil, err
	}
	return proc, nil
}

// jailProcAttr is how runboxd jail is cloned: a session of its own, new
// namespaces (a user namespace with the sandbox's id map unless it is the
// host's root), and its cgroup entered by clone3 itself.
func (s *launching) jailProcAttr(cfg jail.Config) (*syscall.SysProcAttr, error) {
	ids := s.ids
	attr := &syscall.SysProcAttr{
		Setsid: true,
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWCGROUP,
	}
	if cfg.NetworkNone {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if ids.userns {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings, attr.GidMappings = ids.sysProcIDMaps()
		// Unprivileged, setgroups must be denied to map a gid; mapped by
		// root, the sandbox keeps it (apt drops to _apt with it).
		attr.GidMappingsEnableSetgroups = ids.mapped()
		if ids.mapped() {
			// The caller's own uid is not in the map: become the
			// sandbox's root before exec, or exec drops every capability.
			attr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
		}
	}
	if s.cg.v2Dir != "" {
		dir, err := os.Open(s.cg.v2Dir)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", s.cg.v2Dir, err)
		}
		s.closeAtEnd(dir)
		attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	}
	return attr, nil
}

// sendConfig puts runboxd (proc) in the sandbox's cgroups, then sends it
// its configuration with the mounts it attaches (the layers, the host's
// root and the workspace, id-mapped, as cfg asks), then EOF, its go-ahead;
// with a FUSE root, the socket stays open for the FUSE device to come
// back.
func (s *launching) sendConfig(cfg jail.Config, cfgJSON []byte, proc *procbox.Detached) error {
	if err := s.cg.place(proc.Pid); err != nil {
		return err
	}
	var trees []int
	s.atEnd = append(s.atEnd, func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	})
	if cfg.LayersTree {
		fd, err := s.cloneLayers()
		if err != nil {
			return err
		}
		trees = append(trees, fd)
	}
	if cfg.LowerTree {
		fd, err := idmappedTree(s.lower, proc.Pid)
		if err != nil {
			return err
		}
		trees = append(trees, fd)
	}
	if cfg.WorkspaceTree {
		fd, err := idmappedTreeOf(s.l.WorkdirHandle, proc.Pid)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", s.rec.Workdir, err)
		}
		trees = append(trees, fd)
	}
	// The configuration with its descriptors, then EOF, is runboxd's
	// go-ahead.
	var rights []byte
	if len(trees) > 0 {
		rights = unix.UnixRights(trees...)
	}
	parent := s.parent
	n, err := unix.SendmsgN(int(parent.Fd()), cfgJSON, rights, nil, 0)
	if err == nil && n != len(cfgJSON) {
		err = fmt.Errorf("sent %d of %d bytes", n, len(cfgJSON))
	}
	if err == nil && s.fuseRoot {
		// EOF ends the configuration; the FUSE device comes back.
		err = unix.Shutdown(int(parent.Fd()), unix.SHUT_WR)
	} else if cerr := parent.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("start runboxd: configuration: %w", err)
	}
	return nil
}

// startEgressHost starts the host side of a private-network sandbox's
// egress (runboxd egress), as the caller, on the host's network. It reads
// the policy in the state directory for every connection and exits when
// the sandbox's runboxd (pid) does.
func startEgressHost(runboxd, stateDir, socket string, pid int, log *os.File) (int, error) {
	d, err := procbox.SpawnDetached(runboxd, []string{"egress", "--state-dir", stateDir, "--socket", socket, "--pid", strconv.Itoa(pid)}, "/", log)
	if err != nil {
		return 0, fmt.Errorf("start the egress host side: %w", err)
	}
	return d.Pid, nil
}

// serveRoot starts the FUSE server of a sandbox's root once its jail has
// mounted it and sent the device back on sock, in the server's cgroup of
// cg, and returns its pid. The
// server outlives this process: it ends when the sandbox's last process
// does, which unmounts its root.
func (p *Provider) serveRoot(ctx context.Context, runboxd *os.File, server string, sock *os.File, cloneLayers func() (int, error), ids idMap, cg *sandboxCgroups, proc *procbox.Detached, l procbox.Launch) (int, error) {
	fuse, err := receiveFuseDevice(ctx, int(sock.Fd()), proc.Exited)
	if err != nil {
		return 0, err
	}
	defer fuse.Close()
	lower, err := hostRootTree()
	if err != nil {
		return 0, err
	}
	defer lower.Close()
	fd, err := cloneLayers()
	if err != nil {
		return 0, err
	}
	layersTree := os.NewFile(uintptr(fd), "layers")
	defer layersTree.Close()
	lowers := snapshotLowers(stackedLayers(runbox.Sandbox{Detail: l.Record.Extra}))
	var snapshots *os.File
	if len(lowers) > 0 {
		if snapshots, err = snapshotTree(snapshotLayersPath(l.Dir)); err != nil {
			return 0, err
		}
		defer snapshots.Close()
	}
	cmd := fuseServerCmd(runboxd, server, fuse, layersTree, ids, lowers, l.Log)
	srv, err := startFuseServer(cmd, lower, snapshots, ids, cg)
	if err != nil {
		return 0, fmt.Errorf("start %s for the sandbox's root: %w", FuseServer, err)
	}
	return srv.Pid, nil
}

// listenSocket listens on the unix socket at path, mode 0600, replacing a
// file left there, and returns it as a file for runboxd to inherit; the
// socket stays when this process lets go of it.
func listenSocket(path string) (*os.File, error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	defer ul.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	f, err := ul.File()
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return f, nil
}
