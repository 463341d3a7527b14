package daemonauth

import (
	"fmt"
	"os"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/recordfile"
)

// WriteSecretFile makes a fresh secret and stores it in a new file at path
// that only its owner may read (0600); an existing file is an error, never
// overwritten.
func WriteSecretFile(path string) error {
	secret, err := NewSecret()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox secret: %w", err)
	}
	_, err = f.Write(secret)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sandbox secret: %w", err)
	}
	return nil
}

// ReadSecretFile reads a secret WriteSecretFile stored, only from a
// regular file (recordfile.ReadRegular: never through a link, a FIFO or a
// device). Without one the
// sandbox cannot be reached: every error wraps runbox.ErrUnauthenticated
// (and fs.ErrNotExist when there is no file).
func ReadSecretFile(path string) ([]byte, error) {
	b, err := recordfile.ReadRegular(path, SecretSize)
	if err != nil {
		return nil, fmt.Errorf("%w: read the sandbox's secret: %w", runbox.ErrUnauthenticated, err)
	}
	if err := CheckSecret(b); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", runbox.ErrUnauthenticated, path, err)
	}
	return b, nil
}
