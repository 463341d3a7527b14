package main

import (
	"flag"
	"fmt"
	"path/filepath"

	"github.com/runbox/runbox/internal/cmdview"
	"github.com/runbox/runbox/internal/supervisor"
)

// privateFlag adds serve's --private flag to fs.
func privateFlag(fs *flag.FlagSet) *string {
	return fs.String("private", "", "runboxd's own directory (binary, socket, state), to hide from commands: they run in a mount namespace of their own where it is an empty read-only directory, with at most Docker's default capabilities and system calls. runboxd needs CAP_SYS_ADMIN for it (commands never get it) and does not start if the view cannot be built")
}

// usePrivate configures cfg so that commands run in a view without dir
// (see internal/cmdview), keeps runboxd's state in dir, and makes runboxd
// non-dumpable, so that no command reaches dir through runboxd's /proc
// entries. The view itself is built when the supervisor starts: an error
// there stops runboxd.
func usePrivate(cfg *supervisor.Config, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("serve: --private %q: want an absolute path", dir)
	}
	if err := cmdview.Undumpable(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	cfg.SpawnSetup = func(mode string) error {
		return cmdview.Enter(cmdview.Spec{
			Hide:     []string{dir},
			KeepCaps: cmdview.DockerDefaultCaps,
			Filter:   true,
			Clone3:   mode == supervisor.ModeCgroup2,
		})
	}
	return nil
}
