// Package sandboxkey resolves the key a user names a sandbox by, the same
// way for every provider: an exact id, else an exact name, else a prefix of
// exactly one id.
package sandboxkey

import (
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
