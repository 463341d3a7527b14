package loopbacksshd

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Alias is the SSH config alias a Client names the server by.
const Alias = "rbx"

// Client is a client side for a Server, in a directory of its own: a
// known_hosts file that knows the server's host key, and an SSH config
// (the format of ~/.ssh/config) with three aliases that log in as User
// with the server's Key:
//
//	rbx        User@127.0.0.1:port
//	rbx-jump   the same, as a jump host
//	rbx-via    the same host reached through rbx-jump (ProxyJump)
type Client struct {
	// Dir holds Config and KnownHosts (and the configs OpenSSHConfig
	// writes).
	Dir string
	// User is the user the aliases log in as.
	User string
	// Config is the SSH config file, Dir/config.
	Config string
	// KnownHosts is the known_hosts file, Dir/known_hosts.
	KnownHosts string

	server *Server
}

// WriteClient writes a client side that logs in as user into dir, which
// must exist: dir/config and dir/known_hosts, so that a dir named ~/.ssh
// is a home's whole SSH setup.
func (s *Server) WriteClient(dir, user string) (*Client, error) {
	c := &Client{Dir: dir, User: user, Config: filepath.Join(dir, "config"),
		KnownHosts: filepath.Join(dir, "known_hosts"), server: s}
	if err := os.WriteFile(c.KnownHosts, []byte(s.KnownHostsLine()+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("client known_hosts: %w", err)
	}
	host := func(alias, extra string) string {
		return fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n%s\n",
			alias, s.Port, user, s.Key.Path, extra)
	}
	conf := host(Alias, "") + host(Alias+"-jump", "") + host(Alias+"-via", "  ProxyJump "+Alias+"-jump\n")
	if err := os.WriteFile(c.Config, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	return c, nil
}

// OpenSSH is the ssh binary with a config file of its own.
type OpenSSH struct {
	// Config is the file `ssh -F` reads.
	Config string
}

// Command is `ssh -F CONFIG rbx args...`.
func (o OpenSSH) Command(args ...string) *exec.Cmd {
	return exec.Command("ssh", append([]string{"-F", o.Config, Alias}, args...)...)
}

// OpenSSH writes a fresh config for the ssh binary: the alias rbx with
// the client's known_hosts as its only one, no prompts (BatchMode), errors
// only, and the lines of extra (ControlMaster options, say), each indented.
func (c *Client) OpenSSH(extra string) (OpenSSH, error) {
	f, err := os.CreateTemp(c.Dir, "openssh-*.conf")
	if err != nil {
		return OpenSSH{}, fmt.Errorf("openssh config: %w", err)
	}
	conf := fmt.Sprintf("Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  BatchMode yes\n  LogLevel ERROR\n%s",
		Alias, c.server.Port, c.User, c.server.Key.Path, c.KnownHosts, extra)
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return OpenSSH{}, fmt.Errorf("openssh config %s: %w", f.Name(), err)
	}
	return OpenSSH{Config: f.Name()}, nil
}

// ControlMaster is an OpenSSH ControlMaster connection to the server:
// every Command rides the one connection it holds.
type ControlMaster struct {
	OpenSSH
}

// OpenControlMaster opens a ControlMaster connection with its socket at
// control (a path short enough for a unix socket) and leaves it in the
// background; the caller must Close it.
func (c *Client) OpenControlMaster(control string) (*ControlMaster, error) {
	o, err := c.OpenSSH("  ControlMaster auto\n  ControlPath " + control + "\n  ControlPersist 10m\n")
	if err != nil {
		return nil, err
	}
	if out, err := o.Command("true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("open ssh ControlMaster: %w: %s", err, out)
	}
	return &ControlMaster{o}, nil
}

// Close ends the master connection (ssh -O exit).
func (m *ControlMaster) Close() error {
	if out, err := exec.Command("ssh", "-F", m.Config, "-O", "exit", Alias).CombinedOutput(); err != nil {
		return fmt.Errorf("close ssh ControlMaster: %w: %s", err, out)
	}
	return nil
}
