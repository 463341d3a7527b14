package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/supervisor"
)

// configFD is the descriptor on which the provider sends the jail's
// configuration (JSON), and closes it, once it has put the process in the
// sandbox's cgroups, so no command can start outside them.
const configFD = 3

// jailServe is `runboxd jail`: PID 1 of a local sandbox. Its configuration
// arrives on fd 3.
func jailServe(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("jail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg supervisor.Config
	supervisorFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errors.New("jail: takes no arguments")
	}
	if os.Getpid() != 1 {
		return jail.ErrNotPID1
	}
	dropSignalsFromInside()
	jc, err := readConfig()
	if err != nil {
		return err
	}
	if jc.OOMControl != "" {
		// Opened before the pivot hides the host's cgroup tree.
		f, err := os.Open(jc.OOMControl)
		if err != nil {
			return fmt.Errorf("jail: memory cgroup: %w", err)
		}
		cfg.OOMKills = func() (uint64, error) { return oomKills(f) }
	}
	keepThreads(jc.Threads)
	for _, path := range jc.ExecTasks {
		// Opened before the pivot too; the file's opener is what the
		// kernel checks when the spawn thread writes to it.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("jail: commands' cgroup: %w", err)
		}
		cfg.ExecCgroupsV1 = append(cfg.ExecCgroupsV1, f)
	}
	entered, err := jail.Enter(jc, daemon.Listen)
	if err != nil {
		return err
	}
	ln := entered.Listener
	cfg.CgroupDir = entered.CgroupDir
	if err := jail.DropCapabilities(); err != nil {
		ln.Close()
		return err
	}
	if jc.Workspace != "" {
		cfg.Dir = jail.WorkspacePath
		// Relative paths in file calls resolve against the daemon's
		// working directory: make it the sandbox's.
		if err := os.Chdir(jail.WorkspacePath); err != nil {
			return fmt.Errorf("jail: %w", err)
		}
	}
	return serveOn(context.Background(), cfg, stderr, func(*supervisor.Supervisor) (net.Listener, error) { return ln, nil })
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

// readConfig reads the jail configuration from configFD, to its end.
func readConfig() (jail.Config, error) {
	var jc jail.Config
	f := os.NewFile(configFD, "config")
	if f == nil {
		return jc, errors.New("jail: no configuration descriptor (fd 3)")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return jc, fmt.Errorf("jail: read configuration: %w", err)
	}
	if len(b) == 0 {
		return jc, errors.New("jail: the provider sent no configuration")
	}
	if err := json.Unmarshal(b, &jc); err != nil {
		return jc, fmt.Errorf("jail: configuration: %w", err)
	}
	return jc, nil
}
