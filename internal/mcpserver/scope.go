package mcpserver

import (
	"fmt"
	"strings"

	"github.com/runbox/runbox"
)

// A session sees and controls only its own sandboxes: the ones it made, or
// the one sandbox the server is bound to (Config.Sandbox). Every tool that
// takes a sandbox looks it up among them (find), never in the place, so
// another sandbox's id, id prefix or name answers exactly as one that never
// existed: nothing tells a model that it exists.

// owned is one of a session's own sandboxes, as the session recorded it.
type owned struct {
	sb runbox.Sandbox
	// made says the session made it; keep that it stays when the session
	// ends (a sandbox the session did not make always stays).
	made, keep bool
}

// own records sb as one of the session's sandboxes.
func (st *session) own(sb runbox.Sandbox, made, keep bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mine[sb.ID] = &owned{sb: sb, made: made, keep: keep}
}

// disown forgets sb as one of the session's sandboxes (it was removed, or
// is gone), and the connection to it.
func (st *session) disown(id string) {
	st.forget(id)
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.mine, id)
}

// owned returns the session's sandboxes.
func (st *session) owned() []*owned {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*owned, 0, len(st.mine))
	for _, o := range st.mine {
		out = append(out, o)
	}
	return out
}

// find returns the session's sandbox whose id or name is key, else the
// one whose id starts with key. Any other key is not found (notFound),
// whatever the place holds.
func (st *session) find(key string) (*owned, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var prefixed []*owned
	for _, o := range st.mine {
		if matchesExactly(o.sb, key) {
			return o, nil
		}
		if key != "" && strings.HasPrefix(o.sb.ID, key) {
			prefixed = append(prefixed, o)
		}
	}
	switch len(prefixed) {
	case 0:
		return nil, notFound(key)
	case 1:
		return prefixed[0], nil
	}
	return nil, fmt.Errorf("%w: %q is the start of %d of this session's sandboxes; give more of the id", runbox.ErrSandboxNotFound, key, len(prefixed))
}

// matchesExactly reports whether key is sb's id or name.
func matchesExactly(sb runbox.Sandbox, key string) bool {
	return key != "" && (sb.ID == key || sb.Name == key)
}

// matches reports whether key names sb: its id, its name, or the start of
// its id.
func matches(sb runbox.Sandbox, key string) bool {
	return matchesExactly(sb, key) || (key != "" && strings.HasPrefix(sb.ID, key))
}

// notFound is the one answer for a sandbox key that names none of the
// session's sandboxes.
func notFound(key string) error {
	return fmt.Errorf("%w: %q", runbox.ErrSandboxNotFound, key)
}
