package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/runbox/runbox/internal/commandview"
	"github.com/runbox/runbox/internal/supervisor"
)

// privateFlag adds serve's --private flag to fs.
func privateFlag(fs *flag.FlagSet) *string {
	return fs.String("private", "", "runboxd's own directory (binary, socket), to hide from commands: they run in a mount namespace of their own where it is an empty read-only directory, and where runboxd's state directory (default: DIR-state; spill files, session functions) is read-only, with at most Docker's default capabilities and system calls. runboxd needs CAP_SYS_ADMIN for it (commands never get it) and does not start if the view cannot be built")
}

// usePrivate configures cfg so that commands run in a view without dir
// (see internal/commandview) and makes runboxd non-dumpable, so that no command
// reaches dir through runboxd's /proc entries. runboxd's state directory
// (default: dir + "-state") stays in the view, read-only: it holds what
// later commands read, spill files (whose paths results return) and session
// functions (which a session's shell sources). The view itself is built
// when the supervisor starts: an error there stops runboxd.
func usePrivate(cfg *supervisor.Config, dir string) error {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("serve: --private %q: want an absolute path", dir)
	}
	if err := commandview.Undumpable(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = dir + "-state"
	}
	readOnly := []string{cfg.StateDir}
	if cfg.SpillDir != "" {
		if err := os.MkdirAll(cfg.SpillDir, 0o700); err != nil {
			return fmt.Errorf("serve: spill directory: %w", err)
		}
		readOnly = append(readOnly, cfg.SpillDir)
	}
	cfg.SpawnSetup = func(mode string) error {
		return commandview.Enter(commandview.Spec{
			Hide:     []string{dir},
			ReadOnly: readOnly,
			KeepCaps: commandview.DockerDefaultCaps,
			Filter:   true,
			Clone3:   mode == supervisor.ModeCgroup2,
		})
	}
	return nil
}
