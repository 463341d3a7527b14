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

// layersDir is the directory, in a sandbox's state directory, holding its
// overlay's layers and private directories. It belongs to the sandbox's
// root; a mapped runboxd gets it as a detached mount (jail.LayersTree), as
// the directories above it are closed to a mapped root.
const layersDir = "fs"

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
	rec, spec := l.Record, l.Spec
	bin, err := os.ReadFile(rec.Runboxd)
	if err != nil {
		return nil, fmt.Errorf("read runboxd: %w", err)
	}
	if spec.Rootfs != "" {
		// The binary runs in the host's root until it pivots, but a
		// dynamic one would then find its libraries gone for good.
		if err := runboxdbin.CheckStatic(bin, rec.Runboxd); err != nil {
			return nil, err
		}
	}
	ids, err := chooseIDMap(p.UIDBase, spec.HostRoot)
	if err != nil {
		return nil, err
	}
	lower := "/"
	if spec.Rootfs != "" {
		if lower, err = filepath.Abs(spec.Rootfs); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
	}
	// As root, the host's root is served through FUSE by a stranger to it
	// (see fuseServerCmd): root-only host files stay unreadable, wherever
	// they are, with no list of paths to hide.
	fuseRoot := ids.mapped() && lower == "/"
	var fuseServer string
	if fuseRoot {
		if fuseServer, err = findFuseServer(); err != nil {
			return nil, err
		}
		if ids.swapped, err = overflowID(); err != nil {
			return nil, err
		}
	}
	rootless := ids.userns && ids.size == 1
	disk, err := diskBound(spec, l.Home, rootless)
	if err != nil {
		return nil, err
	}
	// Everything the sandbox writes outside its workspace lies in the
	// layers: their own bounded filesystem holds them all. A FUSE root's
	// layers are on a filesystem of their own even with no bound, never on
	// the host root's (see unboundedDisk).
	image := disk
	if fuseRoot && disk == 0 {
		if image, err = unboundedDisk(l.Home); err != nil {
			return nil, err
		}
	}
	layers := filepath.Join(l.Dir, layersDir)
	var dk *diskFS
	if image > 0 {
		if dk, err = newDisk(l.Dir, image, disk == 0); err != nil {
			return nil, err
		}
		defer dk.Close()
		layers = dk.Path()
	} else if err := os.Mkdir(layers, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	// cloneLayers returns a detached mount of the layers for the jail or
	// the FUSE server to attach.
	cloneLayers := func() (int, error) {
		if dk != nil {
			return dk.mount()
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, layers, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("clone the mount of %s: %w", layers, err)
		}
		return fd, nil
	}
	var mountPoints []string
	if fuseRoot {
		mountPoints = []string{SpillDir}
		if rec.Workdir != "" {
			mountPoints = append(mountPoints, jail.WorkspacePath)
		}
	}
	if err := makeLayers(layers, lower, ids, mountPoints); err != nil {
		return nil, err
	}
	if spec.FromSnapshot != "" {
		if !fuseRoot {
			return nil, fmt.Errorf("snapshot %s: a local sandbox stacks a snapshot on the host's root served through %s; not with --rootfs, --host-root or without root: %w",
				spec.FromSnapshot, FuseServer, runbox.ErrUnsupported)
		}
		depth, err := p.stackSnapshot(spec.FromSnapshot, layers, snapshotLayersPath(l.Dir), ids)
		if err != nil {
			return nil, err
		}
		if rec.Extra == nil {
			rec.Extra = map[string]string{}
		}
		rec.Extra["snapshot"] = spec.FromSnapshot
		rec.Extra[extraSnapshotLayers] = strconv.Itoa(depth)
	}
	inLayers := func(name string) string { return filepath.Join(layers, name) }
	if ids.mapped() || dk != nil {
		inLayers = func(name string) string { return filepath.Join(jail.LayersPath, name) }
	}

	var tmpSize int64
	var shares uint64
	if !rootless { // rootless, there are no cgroups to hold limits
		spec, tmpSize, shares = withDefaults(spec)
	}
	cg, err := newCgroups(rec.ID, spec, shares, rootless)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*procbox.Detached, error) {
		cg.remove()
		return nil, err
	}
	if err := cg.delegate(ids); err != nil {
		return fail(err)
	}
	if rec.Extra == nil {
		rec.Extra = map[string]string{}
	}
	cg.record(rec.Extra)
	if spec.Rootfs != "" {
		rec.Extra["rootfs"] = lower
	}
	network := spec.Network
	if network == "" {
		network = NetworkHost
	}
	rec.Extra["network"] = network
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
	if shares > 0 {
		rec.Extra["cpu_shares"] = strconv.FormatUint(shares, 10)
	}
	if tmpSize > 0 {
		rec.Extra["tmp_size"] = strconv.FormatInt(tmpSize, 10)
	}
	if disk > 0 {
		rec.Extra["disk"] = strconv.FormatInt(disk, 10)
	}
	if fuseRoot {
		rec.Extra["root"] = "host's root through " + FuseServer + ", read as an unprivileged host user"
	}
	switch {
	case ids.mapped():
		rec.Extra["userns"] = fmt.Sprintf("0-%d -> host %d-%d", ids.size-1, ids.hostUID, ids.hostUID+ids.size-1)
	case ids.userns:
		rec.Extra["userns"] = fmt.Sprintf("0 -> host %d", ids.hostUID)
	default:
		rec.Extra["userns"] = "none: sandbox root is host root (--host-root)"
	}
	cfg := jail.Config{
		Lower:         lower,
		LowerTree:     ids.mapped() && !fuseRoot,
		FuseRoot:      fuseRoot,
		LayersTree:    ids.mapped() || dk != nil,
		Upper:         inLayers(upperDir),
		Work:          inLayers(workDir),
		Merged:        inLayers(mergedDir),
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
		PrivateDir:    inLayers("private"),
		Env:           jail.DefaultEnv,
		OOMControl:    cg.oomControl,
		ExecTasks:     cg.execTasks,
		Threads:       cg.keepThreads,
		AuthSHA256:    l.AuthSHA256,
	}
	if fuseRoot {
		cfg.Direct = []string{SpillDir}
	}
	if rec.Workdir != "" && !cfg.WorkspaceTree {
		// The jail opens the workspace by its path in its own mount
		// namespace and refuses any directory but the one checked.
		if cfg.WorkspaceDev, cfg.WorkspaceIno, err = owndir.Stat(l.WorkdirHandle); err != nil {
			return fail(err)
		}
	}
	if lower == "/" {
		cfg.Private, cfg.Fresh = privateDirs, freshDirs
		cfg.Mask = append(cfg.Mask, engineDirs()...)
		for _, g := range maskedGlobs {
			m, _ := filepath.Glob(g)
			cfg.MaskFiles = append(cfg.MaskFiles, m...)
		}
	}
	cfg.TmpSize = tmpSize
	if network == NetworkPrivate {
		cfg.Env = append(slices.Clip(cfg.Env), egress.Env...)
		if err := egress.WritePolicy(filepath.Join(l.Dir, egress.PolicyFile), egress.Policy(spec.Egress)); err != nil {
			return fail(err)
		}
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return fail(fmt.Errorf("jail config: %w", err))
	}
	ln, err := listenSocket(rec.Socket)
	if err != nil {
		return fail(err)
	}
	defer ln.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("config socket: %w", err))
	}
	child := os.NewFile(uintptr(pair[1]), "config")
	defer child.Close()
	parent := os.NewFile(uintptr(pair[0]), "config")
	defer parent.Close()

	binF, err := os.Open(rec.Runboxd)
	if err != nil {
		return fail(fmt.Errorf("runboxd: %w", err))
	}
	defer binF.Close()
	cmd := &exec.Cmd{
		Path: fmt.Sprintf("/proc/self/fd/%d", binaryFD),
		Args: append([]string{rec.Runboxd, "jail", "--spill-dir", SpillDir}, spec.DaemonArgs...),
	}
	cmd.Dir = "/"
	cmd.Env = jail.DefaultEnv
	cmd.Stdout, cmd.Stderr = l.Log, l.Log
	cmd.ExtraFiles = []*os.File{child, ln, binF} // configFD, listenerFD, binaryFD
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
	if cg.v2Dir != "" {
		dir, err := os.Open(cg.v2Dir)
		if err != nil {
			return fail(fmt.Errorf("cgroup %s: %w", cg.v2Dir, err))
		}
		defer dir.Close()
		attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	}
	cmd.SysProcAttr = attr
	proc, err := procbox.StartDetached(cmd)
	if err != nil {
		os.Remove(rec.Socket)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) {
			return fail(fmt.Errorf("%w (%v): run as root, enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces), or use --provider host or --provider docker",
				ErrNoNamespaces, err))
		}
		return fail(err)
	}
	stopped := func(err error) (*procbox.Detached, error) {
		proc.Kill()
		<-proc.Exited
		os.Remove(rec.Socket)
		return fail(err)
	}
	if err := cg.place(proc.Pid); err != nil {
		return stopped(err)
	}
	var trees []int
	defer func() {
		for _, fd := range trees {
			unix.Close(fd)
		}
	}()
	if cfg.LayersTree {
		fd, err := cloneLayers()
		if err != nil {
			return stopped(err)
		}
		trees = append(trees, fd)
	}
	if cfg.LowerTree {
		fd, err := idmappedTree(lower, proc.Pid)
		if err != nil {
			return stopped(err)
		}
		trees = append(trees, fd)
	}
	if cfg.WorkspaceTree {
		fd, err := idmappedTreeOf(l.WorkdirHandle, proc.Pid)
		if err != nil {
			return stopped(fmt.Errorf("workspace %s: %w", rec.Workdir, err))
		}
		trees = append(trees, fd)
	}
	// The configuration with its descriptors, then EOF, is runboxd's
	// go-ahead.
	var rights []byte
	if len(trees) > 0 {
		rights = unix.UnixRights(trees...)
	}
	n, err := unix.SendmsgN(int(parent.Fd()), cfgJSON, rights, nil, 0)
	if err == nil && n != len(cfgJSON) {
		err = fmt.Errorf("sent %d of %d bytes", n, len(cfgJSON))
	}
	if err == nil && fuseRoot {
		// EOF ends the configuration; the FUSE device comes back.
		err = unix.Shutdown(int(parent.Fd()), unix.SHUT_WR)
	} else if cerr := parent.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return stopped(fmt.Errorf("start runboxd: configuration: %w", err))
	}
	if fuseRoot {
		pid, err := p.serveRoot(ctx, binF, fuseServer, parent, cloneLayers, ids, proc, l)
		if err != nil {
			return stopped(err)
		}
		rec.Extra["fuse_server_pid"] = strconv.Itoa(pid)
	}
	if cfg.Egress {
		pid, err := startEgressHost(rec.Runboxd, l.Dir, rec.Socket, proc.Pid, l.Log)
		if err != nil {
			return stopped(err)
		}
		rec.Extra["egress_pid"] = strconv.Itoa(pid)
	}
	return proc, nil
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
// mounted it and sent the device back on sock, and returns its pid. The
// server outlives this process: it ends when the sandbox's last process
// does, which unmounts its root.
func (p *Provider) serveRoot(ctx context.Context, runboxd *os.File, server string, sock *os.File, cloneLayers func() (int, error), ids idMap, proc *procbox.Detached, l procbox.Launch) (int, error) {
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
	cmd := fuseServerCmd(runboxd, server, fuse, lower, layersTree, snapshots, ids, lowers, l.Log)
	srv, err := procbox.StartDetached(cmd)
	if err != nil {
		return 0, fmt.Errorf("start %s for the sandbox's root: %w", FuseServer, err)
	}
	return srv.Pid, nil
}

// makeLayers closes the layers directory to everyone but the sandbox's
// root and makes in it the overlay's upper, work and mount point
// directories, and, on the host's root, the sanitised copies of the
// host's password files in the upper layer, and the directories of
// mountPoints (see seedMountPoints).
func makeLayers(layers, lower string, ids idMap, mountPoints []string) error {
	// It exists already (it may be the root of the sandbox's disk, 0755).
	if err := os.Chmod(layers, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	// Chown, not Lchown: layers is a fresh directory or the root of the
	// sandbox's disk, reached through /proc/self/fd.
	if ids.mapped() {
		if err := os.Chown(layers, ids.hostUID, ids.hostGID); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	for _, d := range []string{upperDir, workDir, mergedDir} {
		p := filepath.Join(layers, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := ids.chown(p); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if ids.swapped != 0 {
		// Served through FUSE: the upper layer's root is the sandbox's
		// root directory, kept as its root's on-disk id (see onDisk).
		if err := lchownMapped(filepath.Join(layers, upperDir), 0, 0, ids); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := makeFuseDevice(layers, ids); err != nil {
			return err
		}
	}
	if lower == "/" {
		if err := sanitizeSecrets("/", filepath.Join(layers, upperDir), ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	}
	if ids.swapped != 0 {
		if err := seedUnreadable("/", filepath.Join(layers, upperDir), ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
		if err := seedMountPoints("/", filepath.Join(layers, upperDir), mountPoints, ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	}
	return nil
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
