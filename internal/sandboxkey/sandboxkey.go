// Package sandboxkey resolves the key a user names a sandbox by, the same
// way for every provider: an exact id, else an exact name, else a prefix of
// exactly one id.
package sandboxkey

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/runbox/runbox"
)

// Match returns the item key names, reading each item's id and name with
// the functions given. A key that names nothing, or a prefix of several
// ids (the error lists them), is runbox.ErrSandboxNotFound.
func Match[T any](items []T, key string, id, name func(T) string) (T, error) {
	var zero T
	if key == "" {
		return zero, runbox.ErrSandboxNotFound
	}
	for _, it := range items {
		if id(it) == key {
			return it, nil
		}
	}
	for _, it := range items {
		if name(it) == key {
			return it, nil
		}
	}
	var found []T
	for _, it := range items {
		if strings.HasPrefix(id(it), key) {
			found = append(found, it)
		}
	}
	switch len(found) {
	case 0:
		return zero, runbox.ErrSandboxNotFound
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, it := range found {
		ids[i] = id(it)
	}
	return zero, fmt.Errorf("prefix %q is ambiguous (%s): %w", key, strings.Join(ids, ", "), runbox.ErrSandboxNotFound)
}

// ValidName reports whether s may be a sandbox's name (docker's rule): a
// letter or digit, then up to 62 letters, digits, '_', '.' or '-'. (A
// function, not a regexp: compiling one at package init costs every runbox
// command its start-up.)
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 63 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// idBytes is how many random bytes a sandbox id holds: 12 hex digits, as
// docker's short ids (ValidID).
const idBytes = 6

// NewID returns a fresh sandbox id: 12 random lowercase hex digits, the
// form ValidID accepts. Every provider makes its ids here; a provider that
// keeps a directory per id still retries when the id is taken.
func NewID() (string, error) {
	var b [idBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sandbox id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidID reports whether s has the form of a sandbox id (NewID's): 12
// lowercase hex digits.
func ValidID(s string) bool {
	if len(s) != 2*idBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
