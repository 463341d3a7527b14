package ssh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	sshconfig "github.com/kevinburke/ssh_config"
)

// endpoint is one SSH server to connect to, with everything the SSH
// configuration says about it resolved.
type endpoint struct {
	// Alias is the host as the user named it (a config alias or a name).
	Alias string
	// Host is where to connect (HostName), Port its port, User the login.
	Host string
	Port int
	User string
	// HostKeyAlias, when set, is the name known_hosts files list the host
	// under instead of Host.
	HostKeyAlias string
	// IdentityFiles are private keys to offer, in order.
	IdentityFiles []string
	// IdentitiesOnly offers only IdentityFiles, not every agent key.
	IdentitiesOnly bool
	// Jumps are the ProxyJump hosts to go through, first to last.
	Jumps []endpoint
	// KnownHosts are the known_hosts files to check, user's first.
	KnownHosts []string
	// AcceptNew says the config asks for StrictHostKeyChecking=accept-new.
	AcceptNew bool
	// HashKnownHosts says a host key added to known_hosts is written with
	// its name hashed.
	HashKnownHosts bool
}

// addr is host:port for dialing.
func (e endpoint) addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(e.Port)) }

// keyName is host:port as known_hosts files name the host.
func (e endpoint) keyName() string {
	h := e.Host
	if e.HostKeyAlias != "" {
		h = e.HostKeyAlias
	}
	return net.JoinHostPort(h, strconv.Itoa(e.Port))
}

// String is user@host:port, and the jumps.
func (e endpoint) String() string {
	s := e.User + "@" + e.addr()
	for i := len(e.Jumps) - 1; i >= 0; i-- {
		s += " via " + e.Jumps[i].User + "@" + e.Jumps[i].addr()
	}
	return s
}

// sshConfig is the SSH client configuration: the user's file, then the
// system's, first value wins (as ssh_config(5) says).
type sshConfig struct {
	files []*sshconfig.Config
	home  string
}

// loadConfig reads the SSH configuration p names. A missing default file is
// no error; a file that does not parse is.
func (p *Provider) loadConfig() (*sshConfig, error) {
	home, _ := os.UserHomeDir()
	c := &sshConfig{home: home}
	var paths []string
	switch p.ConfigFile {
	case "none":
	case "":
		if home != "" {
			paths = append(paths, filepath.Join(home, ".ssh", "config"))
		}
		paths = append(paths, "/etc/ssh/ssh_config")
	default:
		paths = append(paths, p.ConfigFile)
	}
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) && p.ConfigFile == "" {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("ssh config: %w", err)
		}
		cfg, err := sshconfig.Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: %w", path, err)
		}
		c.files = append(c.files, cfg)
	}
	return c, nil
}

// get returns the first value of key for alias, or "".
func (c *sshConfig) get(alias, key string) string {
	for _, f := range c.files {
		if v, err := f.Get(alias, key); err == nil && v != "" {
			return v
		}
	}
	return ""
}

// getAll returns every value of key for alias, in order.
func (c *sshConfig) getAll(alias, key string) []string {
	var all []string
	for _, f := range c.files {
		if v, err := f.GetAll(alias, key); err == nil {
			all = append(all, v...)
		}
	}
	return all
}

// parseTarget splits [user@]host[:port] (host may be [IPv6]).
func parseTarget(s string) (userName, host string, port int, err error) {
	s = strings.TrimPrefix(s, "ssh://")
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		userName, s = s[:i], s[i+1:]
		if userName == "" {
			return "", "", 0, fmt.Errorf("ssh target %q: empty user before '@'", s)
		}
	}
	host = s
	if h, p, err := net.SplitHostPort(s); err == nil {
		host = h
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return "", "", 0, fmt.Errorf("ssh target %q: bad port %q", s, p)
		}
		port = n
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if host == "" || strings.ContainsAny(host, " \t/") {
		return "", "", 0, fmt.Errorf("ssh target %q: want [user@]host[:port] or a ~/.ssh/config alias", s)
	}
	return userName, host, port, nil
}

// resolve turns a target into an endpoint through the configuration:
// HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump,
// HostKeyAlias, UserKnownHostsFile, GlobalKnownHostsFile,
// StrictHostKeyChecking (accept-new), HashKnownHosts. A user or port in the
// target wins over the configuration's, as with ssh.
func (c *sshConfig) resolve(target string, depth int) (endpoint, error) {
	if depth > 8 {
		return endpoint{}, fmt.Errorf("ssh target %q: ProxyJump nests more than 8 deep (a loop?)", target)
	}
	userName, alias, port, err := parseTarget(target)
	if err != nil {
		return endpoint{}, err
	}
	e := endpoint{Alias: alias, Host: alias, Port: port, User: userName}
	if v := c.get(alias, "HostName"); v != "" {
		e.Host = c.expand(v, alias, "", "")
	}
	if e.User == "" {
		e.User = c.get(alias, "User")
	}
	if e.User == "" {
		u, err := user.Current()
		if err != nil {
			return endpoint{}, fmt.Errorf("ssh target %q: no user given and the local user is unknown: %w", target, err)
		}
		e.User = u.Username
	}
	if e.Port == 0 {
		if v := c.get(alias, "Port"); v != "" {
			if e.Port, err = strconv.Atoi(v); err != nil || e.Port <= 0 || e.Port > 65535 {
				return endpoint{}, fmt.Errorf("ssh config: Port %q for %s: want a port number", v, alias)
			}
		} else {
			e.Port = 22
		}
	}
	if v := c.get(alias, "ProxyCommand"); v != "" && !strings.EqualFold(v, "none") {
		return endpoint{}, fmt.Errorf("ssh config: ProxyCommand for %s is not supported by runbox (it talks SSH itself): use ProxyJump", alias)
	}
	e.HostKeyAlias = c.get(alias, "HostKeyAlias")
	for _, f := range c.getAll(alias, "IdentityFile") {
		e.IdentityFiles = append(e.IdentityFiles, c.expand(f, alias, e.Host, e.User))
	}
	e.IdentitiesOnly = strings.EqualFold(c.get(alias, "IdentitiesOnly"), "yes")
	for _, k := range []string{"UserKnownHostsFile", "GlobalKnownHostsFile"} {
		for _, v := range c.getAll(alias, k) {
			for f := range strings.FieldsSeq(v) {
				if !strings.EqualFold(f, "none") {
					e.KnownHosts = append(e.KnownHosts, c.expand(f, alias, e.Host, e.User))
				}
			}
		}
	}
	e.AcceptNew = strings.EqualFold(c.get(alias, "StrictHostKeyChecking"), "accept-new")
	e.HashKnownHosts = strings.EqualFold(c.get(alias, "HashKnownHosts"), "yes")
	if v := c.get(alias, "ProxyJump"); v != "" && !strings.EqualFold(v, "none") {
		for hop := range strings.SplitSeq(v, ",") {
			j, err := c.resolve(strings.TrimSpace(hop), depth+1)
			if err != nil {
				return endpoint{}, fmt.Errorf("ProxyJump %s of %s: %w", hop, alias, err)
			}
			// A jump host's own jumps come before it.
			e.Jumps = append(e.Jumps, j.Jumps...)
			j.Jumps = nil
			e.Jumps = append(e.Jumps, j)
		}
	}
	return e, nil
}

// expand replaces ~ and the tokens ssh_config(5) defines for paths (%d
// home, %u local user, %h host, %r remote user, %n alias, %%).
func (c *sshConfig) expand(s, alias, host, remoteUser string) string {
	if s == "~" || strings.HasPrefix(s, "~/") {
		s = c.home + s[1:]
	}
	if !strings.Contains(s, "%") {
		return s
	}
	local := ""
	if u, err := user.Current(); err == nil {
		local = u.Username
	}
	if host == "" {
		host = alias
	}
	r := strings.NewReplacer("%%", "%", "%d", c.home, "%u", local, "%h", host, "%r", remoteUser, "%n", alias)
	return r.Replace(s)
}
