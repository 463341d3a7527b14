package ssh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// credentials are what a connection offers: the agent's keys (unless the
// configuration says IdentitiesOnly) and the identity files' keys.
type credentials struct {
	methods []gossh.AuthMethod
	// tried describes what is offered, for the error when nothing works.
	tried []string
	// skipped explains identity files that could not be used.
	skipped []string
	agent   net.Conn
}

// close releases the agent connection.
func (c *credentials) close() {
	if c.agent != nil {
		c.agent.Close()
	}
}

// defaultIdentities are the keys ssh tries without an IdentityFile.
var defaultIdentities = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// credentialsFor gathers the credentials for e.
func (p *Provider) credentialsFor(e endpoint) *credentials {
	c := &credentials{}
	var signers []gossh.Signer
	sock := p.AgentSocket
	if sock == "" {
		sock = os.Getenv("SSH_AUTH_SOCK")
	}
	if sock != "" && sock != "none" {
		if conn, err := net.Dial("unix", sock); err == nil {
			c.agent = conn
			ag := agent.NewClient(conn)
			if !e.IdentitiesOnly {
				if s, err := ag.Signers(); err == nil {
					signers = append(signers, s...)
					c.tried = append(c.tried, fmt.Sprintf("%d key(s) of the ssh-agent at %s", len(s), sock))
				}
			}
		} else {
			c.skipped = append(c.skipped, fmt.Sprintf("ssh-agent %s: %v", sock, err))
		}
	}
	files := e.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		if home, err := os.UserHomeDir(); err == nil {
			for _, n := range defaultIdentities {
				files = append(files, filepath.Join(home, ".ssh", n))
			}
		}
	}
	for _, f := range files {
		s, err := loadIdentity(f)
		switch {
		case err == nil:
			signers = append(signers, s)
			c.tried = append(c.tried, f)
		case errors.Is(err, os.ErrNotExist) && !explicit:
		default:
			c.skipped = append(c.skipped, err.Error())
		}
	}
	if len(signers) > 0 {
		c.methods = append(c.methods, gossh.PublicKeys(signers...))
	}
	return c
}

// loadIdentity reads a private key file. A key protected by a passphrase
// cannot be read without a prompt: the error says to load it into the
// agent.
func loadIdentity(path string) (gossh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	s, err := gossh.ParsePrivateKey(b)
	var pe *gossh.PassphraseMissingError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("identity %s is protected by a passphrase: add it to ssh-agent (ssh-add %s)", path, path)
	} else if err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	return s, nil
}

// authError explains a failed authentication: who, where, what was
// offered, and what was left out.
func (c *credentials) authError(e endpoint, err error) error {
	offered := "nothing (no ssh-agent, no identity file)"
	if len(c.tried) > 0 {
		offered = strings.Join(c.tried, ", ")
	}
	msg := fmt.Sprintf("%s@%s accepted none of: %s", e.User, e.addr(), offered)
	if len(c.skipped) > 0 {
		msg += "; not usable: " + strings.Join(c.skipped, "; ")
	}
	return fmt.Errorf("%w: %s (%v)", ErrAuth, msg, err)
}
