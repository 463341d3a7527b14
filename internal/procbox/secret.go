package procbox

import (
	"path/filepath"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/procrecord"
)

// secretFile is the name of the file, in a sandbox's directory, holding its
// secret (procrecord.SecretFile).
const secretFile = procrecord.SecretFile

// writeSecret makes a fresh secret for the sandbox in sbDir and stores it.
func writeSecret(sbDir string) error {
	return daemonauth.WriteSecretFile(filepath.Join(sbDir, secretFile))
}

// readSecret reads the secret of the sandbox in sbDir (procrecord.ReadSecret).
func readSecret(sbDir string) ([]byte, error) { return procrecord.ReadSecret(sbDir) }
