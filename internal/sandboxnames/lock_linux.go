package sandboxnames

import (
	"fmt"
	"os"

	"github.com/runbox/runbox/internal/recordfile"
)

// locked runs f holding the index's lock, creating the directory first.
func (x Index) locked(f func() error) error {
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return fmt.Errorf("name index: %w", err)
	}
	release, err := recordfile.LockDir(x.dir)
	if err != nil {
		return fmt.Errorf("name index: %w", err)
	}
	defer release()
	return f()
}
