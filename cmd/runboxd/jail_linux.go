package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/landlock"
	"github.com/runbox/runbox/internal/layerchmod"
	"github.com/runbox/runbox/internal/seccomp"
	"github.com/runbox/runbox/internal/supervisor"
)

// configFD is the descriptor on which the provider sends the jail's
// configuration (JSON), and closes it, once it has put the process in the
// sandbox's cgroups, so no command can start outside them.
const configFD = 3

// jailServe is `runboxd jail`: PID 1 of a local sandbox. Its configuration
// arrives on fd 3.
func jailServe(args []string, stderr io.Writer) error {
	cfg, err := jailFlags(args, stderr)
	if err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return jail.ErrNotPID1
	}
	dropSignalsFromInside()
	jc, err := readConfig()
	if err != nil {
		return err
	}
	if err := jail.RequireNoCgo(); err != nil {
		return err
	}
	for _, fd := range jc.CloseFDs {
		if fd > configFD {
			unix.Close(fd)
		}
	}
	if err := openOOMCounters(jc, &cfg); err != nil {
		return err
	}
	keepThreads(jc.Threads)
	if err := openExecCgroups(jc.ExecTasks, &cfg); err != nil {
		return err
	}
	entered, err := jail.Enter(jc, jailListener(jc))
	if err != nil {
		return err
	}
	ln := entered.Listener
	cfg.CgroupDir = entered.CgroupDir
	if err := lockDown(); err != nil {
		ln.Close()
		return err
	}
	cfg.SpawnSetup = spawnSetup(jc, stderr)
	if jc.Workspace != "" {
		cfg.Dir = jail.WorkspacePath
		// Relative paths in file calls resolve against the daemon's
		// working directory: make it the sandbox's.
		if err := os.Chdir(jail.WorkspacePath); err != nil {
			return fmt.Errorf("jail: %w", err)
		}
	}
	var also []func(*daemon.Server, *slog.Logger) *egress.Proxy
	if jc.Egress {
		offer, err := listenEgress()
		if err != nil {
			ln.Close()
			return err
		}
		also = append(also, offer)
	}
	return serveOn(context.Background(), cfg, authConfig{sum: jc.AuthSHA256}, stderr, func(*supervisor.Supervisor) (net.Listener, error) { return ln, nil }, also...)
}

// jailFlags parses `runboxd jail`'s flags, which are the supervisor's
// only: it takes no arguments.
func jailFlags(args []string, stderr io.Writer) (supervisor.Config, error) {
	fs := flag.NewFlagSet("jail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg supervisor.Config
	supervisorFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, errors.New("jail: takes no arguments")
	}
	return cfg, nil
}

// openOOMCounters gives cfg the OOM counters it reads while the sandbox
// runs: its commands' memory cgroup's (OOMKills) and, for a FUSE root,
// its server's (RootLost, which says why the root stopped answering).
// They are opened before the pivot hides the host's cgroup tree.
func openOOMCounters(jc jail.Config, cfg *supervisor.Config) error {
	if jc.OOMControl != "" {
		f, err := os.Open(jc.OOMControl)
		if err != nil {
			return fmt.Errorf("jail: memory cgroup: %w", err)
		}
		cfg.OOMKills = func() (uint64, error) { return oomKills(f) }
	}
	if jc.FuseRoot {
		var serverOOM *os.File
		if jc.FuseServerOOMControl != "" {
			var err error
			if serverOOM, err = os.Open(jc.FuseServerOOMControl); err != nil {
				return fmt.Errorf("jail: the FUSE server's memory cgroup: %w", err)
			}
		}
		cfg.RootLost = func() string { return fuseRootLost(serverOOM) }
	}
	return nil
}

// openExecCgroups opens, for writing, the tasks files of the cgroup v1
// hierarchies the commands are spawned into (cfg.ExecCgroupsV1). They are
// opened before the pivot too: the file's opener is what the kernel checks
// when the spawn thread writes to it.
func openExecCgroups(paths []string, cfg *supervisor.Config) error {
	for _, path := range paths {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("jail: commands' cgroup: %w", err)
		}
		cfg.ExecCgroupsV1 = append(cfg.ExecCgroupsV1, f)
	}
	return nil
}

// jailListener returns how jail.Enter gets runboxd's listener: the one the
// provider passed (jc.ListenerFD), else a new socket at the path it gives.
func jailListener(jc jail.Config) func(path string) (net.Listener, error) {
	return func(path string) (net.Listener, error) {
		if jc.ListenerFD == 0 {
			return daemon.Listen(path)
		}
		f := os.NewFile(uintptr(jc.ListenerFD), "listener")
		defer f.Close()
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("jail: inherited listener: %w", err)
		}
		return ln, nil
	}
}

// lockDown drops runboxd's capabilities and then, last, installs its
// seccomp filter: from there on neither runboxd nor anything it starts may
// mount, load modules, touch the keyring, bpf, perf, ... (see seccomp).
func lockDown() error {
	if err := jail.DropCapabilities(); err != nil {
		return err
	}
	return seccomp.Install()
}

// spawnSetup returns what the spawn thread runs before each command: the
// filters that hold the commands, not runboxd.
//
// No setuid or setgid bit on any file they make (security rule 4);
// runboxd strips them from the modes it applies. As root with a range of
// unprivileged host ids (a layers tree), the sandbox's root is one overlay
// mount whose upper layer is kept under those ids in a directory closed to
// other host users: a chmod with those bits on a file of it is applied for
// them by layerchmod (packages such as sudo install); anywhere else it is
// refused. With --host-root (no user namespace: the upper layer's files
// would be host root's), and rootless (the root is a tmpfs with an overlay
// per host directory, none of them the root's mount), it is refused
// everywhere.
//
// And none of them connects to an abstract unix socket of the host's (a
// sandbox on the host's network shares its namespace) or signals anything
// outside the sandbox's Landlock domain (security rule 6).
func spawnSetup(jc jail.Config, stderr io.Writer) func(string) error {
	loadPrivilegeFilter := seccomp.LoadPrivilegeFilter
	if jc.UserNS && jc.LayersTree {
		loadPrivilegeFilter = layerPrivilegeFilter(stderr)
	}
	return func(string) error {
		if err := loadPrivilegeFilter(); err != nil {
			return err
		}
		err := landlock.ScopeOut()
		if errors.Is(err, landlock.ErrUnsupported) {
			fmt.Fprintf(stderr, "runboxd: %v: commands can reach the host's abstract unix sockets (use --network none)\n", err)
			return nil
		}
		return err
	}
}

// layerPrivilegeFilter starts the server of setuid and setgid chmods on
// the sandbox's root layer ("/" after the pivot; never the workspace) and
// returns the spawn thread's filter loader, which hands it the filter's
// listener. The server's thread exists before the filter, so it never
// carries it. Where the server cannot start, commands get the plain
// refusal (seccomp.LoadPrivilegeFilter), and the log says why.
func layerPrivilegeFilter(stderr io.Writer) func() error {
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "runboxd: "+format+"\n", args...) }
	srv, err := layerchmod.Start(layerchmod.Config{Layer: "/", Apart: []string{jail.WorkspacePath}, Proc: "/proc", Logf: logf})
	if err != nil {
		logf("%v: a setuid or setgid chmod is refused everywhere", err)
		return seccomp.LoadPrivilegeFilter
	}
	return func() error {
		l, err := seccomp.LoadLayerPrivilegeFilter()
		if err != nil {
			srv.Close()
			return err
		}
		srv.Serve(l)
		return nil
	}
}

// oomKills reads the oom_kill counter of a memory.oom_control file.
func oomKills(f *os.File) (uint64, error) {
	buf := make([]byte, 512)
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(buf[:n])) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, errors.New("no oom_kill counter in memory.oom_control")
}

// fuseRootLost says why a FUSE root stopped answering and what to do:
// its server (outside the sandbox) is gone, killed by the kernel at the
// memory bound of its cgroup when oom, that cgroup's counter, says so.
func fuseRootLost(oom *os.File) string {
	why := "its server (fuse-overlayfs, which runs outside the sandbox) has exited"
	if oom != nil {
		if n, err := oomKills(oom); err == nil && n > 0 {
			why = "its server (fuse-overlayfs, which runs outside the sandbox) was killed by the kernel at its memory limit, the sandbox's own (--memory), by what the sandbox's commands made it hold (directories held open and read, names looked up)"
		}
	}
	return "the sandbox's root filesystem is gone: " + why + "; no command can start in this sandbox any more, though its workspace is intact and its files can still be copied out (runbox cp): remove it (runbox rm) and create another, with a larger --memory if the work needs it"
}

// maxConfig bounds the configuration the provider sends.
const maxConfig = 1 << 20

// readConfig reads the jail configuration from configFD (a unix socket), to
// its end, with the descriptors sent along with it (SCM_RIGHTS): the
// layers, the id-mapped root and the workspace trees, in that order, where the
// configuration says there are.
func readConfig() (jail.Config, error) {
	var jc jail.Config
	var b []byte
	var fds []int
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(configFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return jc, fmt.Errorf("jail: read configuration (fd %d): %w", configFD, err)
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return jc, fmt.Errorf("jail: configuration descriptors: %w", err)
			}
			for _, m := range msgs {
				if rights, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, rights...)
				}
			}
		}
		if n == 0 {
			break
		}
		if b = append(b, buf[:n]...); len(b) > maxConfig {
			return jc, fmt.Errorf("jail: configuration larger than %d bytes", maxConfig)
		}
	}
	if len(b) == 0 {
		unix.Close(configFD)
		return jc, errors.New("jail: the provider sent no configuration")
	}
	if err := json.Unmarshal(b, &jc); err != nil {
		unix.Close(configFD)
		return jc, fmt.Errorf("jail: configuration: %w", err)
	}
	if jc.FuseRoot {
		// The FUSE device goes back this way (jail.Enter closes it).
		jc.ReplyFD = configFD
	} else {
		unix.Close(configFD)
	}
	want := 0
	for _, b := range []bool{jc.LayersTree, jc.LowerTree, jc.WorkspaceTree} {
		if b {
			want++
		}
	}
	if len(fds) != want {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return jc, fmt.Errorf("jail: expected %d mount descriptors with the configuration, got %d", want, len(fds))
	}
	if jc.LayersTree {
		jc.LayersTreeFD, fds = fds[0], fds[1:]
	}
	if jc.LowerTree {
		jc.LowerTreeFD, fds = fds[0], fds[1:]
	}
	if jc.WorkspaceTree {
		jc.WorkspaceTreeFD = fds[0]
	}
	return jc, nil
}
