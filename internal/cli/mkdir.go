package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/homes"
)

// hostDirectoryProvider is a provider whose workspace is a directory of
// this machine (local, host).
type hostDirectoryProvider interface{ RunsInHostDirectory() bool }

// makeWorkdir creates the workdir up --mkdir names, as mkdir -p -m 0755
// run by the invoking user would (this process's uid; the umask may take
// more away, never add), so it is a directory only its owner may write
// into, which a workspace must be (internal/owndir); after refusing
// one inside, around or equal to a runbox home (this invocation's or any
// other this machine knows): a sandbox must never see a home. It is for
// the providers whose workspace is a directory of this machine; through a
// server, or with any other provider, it is an error. The provider checks
// the directory again as for any workdir (no symbolic link in its path).
func makeWorkdir(p runbox.Provider, workdir, home string) error {
	if _, remote := p.(*remoteProvider); remote {
		return fmt.Errorf("--mkdir: a server makes its sandboxes' workspaces itself (leave out --workdir): %w", runbox.ErrInvalidSpec)
	}
	if hd, ok := p.(hostDirectoryProvider); !ok || !hd.RunsInHostDirectory() {
		return fmt.Errorf("--mkdir is for providers whose workspace is a directory of this machine (local, host), not %s: %w", p.Name(), runbox.ErrInvalidSpec)
	}
	if workdir == "" {
		return fmt.Errorf("--mkdir needs --workdir DIR: %w", runbox.ErrInvalidSpec)
	}
	abs, err := filepath.Abs(workdir)
	if err != nil {
		return fmt.Errorf("--workdir: %w", err)
	}
	if h, err := filepath.Abs(home); err == nil && (within(h, abs) || within(abs, h)) {
		return fmt.Errorf("workdir %s and the runbox home %s overlap: a home holds its sandboxes' secrets and sockets; pick a directory apart from it: %w", abs, h, runbox.ErrInvalidSpec)
	}
	if err := homes.Check(abs, ""); err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fmt.Errorf("--mkdir: %w", err)
	}
	return nil
}

// within reports whether p is dir or lies under it (both absolute and
// clean).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (rel == "." || len(rel) < 3 || rel[:3] != "../")
}
