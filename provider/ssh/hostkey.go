package ssh

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyError is an unknown or changed host key. It names the host, the
// key it offered (type and SHA-256 fingerprint, as ssh-keygen -l prints
// it) and, for a changed key, the known_hosts lines that hold another.
// errors.Is matches ErrHostKeyUnknown or ErrHostKeyChanged.
type HostKeyError struct {
	// Host is the name checked, host or [host]:port.
	Host string
	// KeyType and Fingerprint describe the key the host offered.
	KeyType, Fingerprint string
	// Known lists the keys known_hosts holds for the host instead, as
	// "file:line TYPE FINGERPRINT"; empty for an unknown host.
	Known []string
	// Files are the known_hosts files checked.
	Files []string
}

// Error says what was offered, what is known, and what to do.
func (e *HostKeyError) Error() string {
	offered := e.KeyType + " key " + e.Fingerprint
	if len(e.Known) == 0 {
		return fmt.Sprintf("%v: %s offered %s, which is in no known_hosts file (%s); check the fingerprint with the host's administrator (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on it), then accept it with `%s` once or `runbox up --ssh-accept-new`",
			ErrHostKeyUnknown, e.Host, offered, strings.Join(e.Files, ", "), sshCommand(e.Host))
	}
	return fmt.Sprintf("%v: %s offered %s, but known_hosts holds %s: someone may be in the middle, or the host was reinstalled; if you know it was, remove the old key (ssh-keygen -R '%s') and connect again",
		ErrHostKeyChanged, e.Host, offered, strings.Join(e.Known, "; "), e.Host)
}

// sshCommand is the ssh command line that connects to a known_hosts name.
func sshCommand(name string) string {
	if host, port, err := net.SplitHostPort(name); err == nil {
		return "ssh -p " + port + " " + host
	}
	return "ssh " + name
}

// Is matches ErrHostKeyUnknown or ErrHostKeyChanged.
func (e *HostKeyError) Is(target error) bool {
	if len(e.Known) == 0 {
		return target == ErrHostKeyUnknown
	}
	return target == ErrHostKeyChanged
}

// hostKeys checks host keys against known_hosts files and, when asked,
// records a new one.
type hostKeys struct {
	files     []string // every file checked; files[0] is written by accept-new
	acceptNew bool
	hash      bool
	mu        sync.Mutex // serialises reading and appending
}

// knownHostsFiles returns the files to check for e: the provider's, else
// the configuration's, else OpenSSH's defaults.
func (p *Provider) knownHostsFiles(e endpoint) []string {
	if len(p.KnownHostsFiles) > 0 {
		return p.KnownHostsFiles
	}
	if len(e.KnownHosts) > 0 {
		return e.KnownHosts
	}
	var files []string
	if home, err := os.UserHomeDir(); err == nil {
		files = append(files, filepath.Join(home, ".ssh", "known_hosts"))
	}
	return append(files, "/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
}

// callback returns the database of the files that exist now.
func (h *hostKeys) callback() (gossh.HostKeyCallback, error) {
	var existing []string
	for _, f := range h.files {
		if _, err := os.Stat(f); err == nil {
			existing = append(existing, f)
		}
	}
	if len(existing) == 0 {
		return func(string, net.Addr, gossh.PublicKey) error { return &knownhosts.KeyError{} }, nil
	}
	cb, err := knownhosts.New(existing...)
	if err != nil {
		return nil, fmt.Errorf("known_hosts: %w", err)
	}
	return cb, nil
}

// check is the HostKeyCallback: a key known_hosts lists for the host
// passes; an unknown host is refused with a *HostKeyError, or recorded in
// files[0] with accept-new; a changed or revoked key is always refused.
func (h *hostKeys) check(hostname string, remote net.Addr, key gossh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	cb, err := h.callback()
	if err != nil {
		return err
	}
	err = cb(hostname, remote, key)
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return fmt.Errorf("%w: %s offered %s key %s, which %s:%d marks revoked",
			ErrHostKeyChanged, knownhosts.Normalize(hostname), key.Type(), gossh.FingerprintSHA256(key), re.Revoked.Filename, re.Revoked.Line)
	case !errors.As(err, &ke):
		return err
	}
	herr := &HostKeyError{Host: knownhosts.Normalize(hostname), KeyType: keyTypeName(key), Fingerprint: gossh.FingerprintSHA256(key), Files: h.files}
	for _, w := range ke.Want {
		herr.Known = append(herr.Known, fmt.Sprintf("%s:%d %s %s", w.Filename, w.Line, keyTypeName(w.Key), gossh.FingerprintSHA256(w.Key)))
	}
	if len(herr.Known) > 0 || !h.acceptNew {
		return herr
	}
	return h.add(hostname, key)
}

// add appends key for hostname to files[0], creating it (and its
// directory) private to the user.
func (h *hostKeys) add(hostname string, key gossh.PublicKey) error {
	if len(h.files) == 0 {
		return errors.New("known_hosts: no file to record a new host key in")
	}
	path := h.files[0]
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	name := knownhosts.Normalize(hostname)
	if h.hash {
		name = knownhosts.HashHostname(name)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	_, err = fmt.Fprintln(f, name+" "+strings.TrimSpace(string(gossh.MarshalAuthorizedKey(key))))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("known_hosts %s: %w", path, err)
	}
	return nil
}

// knownAlgorithms returns the host key algorithms to ask hostname for:
// those of the keys known_hosts holds for it, so that a host known by its
// ed25519 key is not taken for a changed one because it offered its ECDSA
// key first. Nil (the library's defaults) for an unknown host.
func (h *hostKeys) knownAlgorithms(hostname string, remote net.Addr) []string {
	h.mu.Lock()
	cb, err := h.callback()
	h.mu.Unlock()
	if err != nil {
		return nil
	}
	// A key no file holds makes the database list what it does hold.
	var ke *knownhosts.KeyError
	if !errors.As(cb(hostname, remote, probeKey{}), &ke) {
		return nil
	}
	var algos []string
	seen := map[string]bool{}
	for _, w := range ke.Want {
		for _, a := range algorithmsFor(w.Key.Type()) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// algorithmsFor returns the signature algorithms a key type signs with.
func algorithmsFor(keyType string) []string {
	switch keyType {
	case gossh.KeyAlgoRSA:
		return []string{gossh.KeyAlgoRSASHA512, gossh.KeyAlgoRSASHA256, gossh.KeyAlgoRSA}
	case gossh.CertAlgoRSAv01:
		return []string{gossh.CertAlgoRSASHA512v01, gossh.CertAlgoRSASHA256v01, gossh.CertAlgoRSAv01}
	}
	return []string{keyType}
}

// keyTypeName is a key's type as ssh-keygen -l prints it (ED25519, RSA,
// ECDSA).
func keyTypeName(k gossh.PublicKey) string {
	t := k.Type()
	switch {
	case strings.Contains(t, "ed25519"):
		return "ED25519"
	case strings.Contains(t, "ecdsa"):
		return "ECDSA"
	case strings.Contains(t, "rsa"):
		return "RSA"
	}
	return strings.ToUpper(t)
}

// probeKey is a key no known_hosts file holds.
type probeKey struct{}

func (probeKey) Type() string                          { return "runbox-probe" }
func (probeKey) Marshal() []byte                       { return []byte("runbox-probe-key") }
func (probeKey) Verify([]byte, *gossh.Signature) error { return errors.New("probe key") }
