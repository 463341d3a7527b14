package supervisor

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/runbox/runbox"
)

// specDigest is what an exec id stands for: a hash of each part of the spec
// that decides what runs and what its Result holds. An exec id is an
// idempotency key: Start with an id that exists attaches when the digests
// match and is refused with runbox.ErrExecIDConflict when they differ. The
// exec table keeps the digest, not the spec's bytes.
type specDigest []fieldSum

type fieldSum struct {
	name string
	sum  [sha256.Size]byte
}

// digestSpec hashes spec's parts. A PTY's size is left out (a terminal
// resized between a call and its retry is the same request), and so is
// the id.
func digestSpec(s runbox.ExecSpec) specDigest {
	field := func(name string, parts ...[]byte) fieldSum {
		h := sha256.New()
		var n [8]byte
		for _, p := range parts {
			binary.BigEndian.PutUint64(n[:], uint64(len(p)))
			h.Write(n[:])
			h.Write(p)
		}
		f := fieldSum{name: name}
		h.Sum(f.sum[:0])
		return f
	}
	num := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	flag := func(b bool) []byte {
		if b {
			return []byte{1}
		}
		return []byte{0}
	}
	argv := [][]byte{num(int64(len(s.Argv)))}
	for _, a := range s.Argv {
		argv = append(argv, []byte(a))
	}
	env := [][]byte{num(int64(len(s.Env)))}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		env = append(env, []byte(k), []byte(s.Env[k]))
	}
	return specDigest{
		field("command", []byte(s.Command)),
		field("argv", argv...),
		field("login", flag(s.Login)),
		field("env", env...),
		field("cwd", []byte(s.Cwd)),
		field("session", []byte(s.Session)),
		field("stdin", s.Stdin, flag(s.StdinStream)),
		field("pty", flag(s.PTY != nil)),
		field("timeouts", num(int64(s.Timeout)), num(int64(s.IdleTimeout)), num(int64(s.Grace))),
		field("output limits", num(int64(s.HeadBytes)), num(int64(s.TailBytes)), num(int64(s.Spill))),
	}
}

// conflict returns nil when d and other are the same spec, else an error
// wrapping runbox.ErrExecIDConflict that names the id and the parts that
// differ.
func (d specDigest) conflict(id string, other specDigest) error {
	var differ []string
	for i, f := range d {
		if i >= len(other) || other[i] != f {
			differ = append(differ, f.name)
		}
	}
	if len(differ) == 0 {
		return nil
	}
	return fmt.Errorf("%w: exec %q was started with a different %s; "+
		"give this one another id, or send the same spec to attach to that exec",
		runbox.ErrExecIDConflict, id, strings.Join(differ, ", "))
}
