package procbox

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
)

// secretFile is the name of the file, in a sandbox's directory, holding its
// secret: only its owner may read it (0600), and runboxd is given only its
// SHA-256.
const secretFile = "secret"

// writeSecret makes a fresh secret for the sandbox in sbDir and stores it.
func writeSecret(sbDir string) error {
	return daemonauth.WriteSecretFile(filepath.Join(sbDir, secretFile))
}

// readSecret reads the secret of the sandbox in sbDir. A sandbox without one
// (made by a runbox older than authentication) cannot be reached: the error
// wraps runbox.ErrUnauthenticated and says what to do.
func readSecret(sbDir string) ([]byte, error) {
	path := filepath.Join(sbDir, secretFile)
	b, err := daemonauth.ReadSecretFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no secret at %s (a sandbox made before runbox authenticated its connections, or one being removed): remove it with force and create it again", runbox.ErrUnauthenticated, path)
	}
	return b, err
}
