package procbox

import (
	"path/filepath"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/processrecord"
)

// secretFile is the name of the file, in a sandbox's directory, holding its
// secret (processrecord.SecretFile).
const secretFile = processrecord.SecretFile

// writeSecret makes a fresh secret for the sandbox in sbDir and stores it.
func writeSecret(sbDir string) error {
	return daemonauth.WriteSecretFile(filepath.Join(sbDir, secretFile))
}

// readSecret reads the secret of the sandbox in sbDir (processrecord.ReadSecret).
func readSecret(sbDir string) ([]byte, error) { return processrecord.ReadSecret(sbDir) }
