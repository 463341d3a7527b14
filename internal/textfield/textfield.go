// Package textfield splits a value between a protobuf string field, which
// may hold only valid UTF-8, and the bytes field beside it that carries any
// other value exactly (a command, a working directory, argv, the
// environment). runboxd's codec and the front's generated one both use it,
// so a value crosses either the same way.
package textfield

import (
	"maps"
	"slices"
	"unicode/utf8"
)

// Split returns s as the string field when it is valid UTF-8, else as the
// raw field's bytes.
func Split(s string) (text string, raw []byte) {
	if utf8.ValidString(s) {
		return s, nil
	}
	return "", []byte(s)
}

// Join is the inverse of Split: the raw bytes when set, else the string.
func Join(text string, raw []byte) string {
	if len(raw) > 0 {
		return string(raw)
	}
	return text
}

// SplitList returns ss as the string list when every element is valid
// UTF-8, else all of it as the raw list (the order of the elements is the
// meaning, so they are never split between the two).
func SplitList(ss []string) (text []string, raw [][]byte) {
	if !slices.ContainsFunc(ss, func(s string) bool { return !utf8.ValidString(s) }) {
		return ss, nil
	}
	raw = make([][]byte, len(ss))
	for i, s := range ss {
		raw[i] = []byte(s)
	}
	return nil, raw
}

// SplitEnv returns env as the string map when every name and value is
// valid UTF-8, else all of it as raw pairs made by pair, sorted by name.
func SplitEnv[P any](env map[string]string, pair func(name, value []byte) P) (text map[string]string, raw []P) {
	valid := true
	for k, v := range env {
		valid = valid && utf8.ValidString(k) && utf8.ValidString(v)
	}
	if valid {
		return env, nil
	}
	raw = make([]P, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		raw = append(raw, pair([]byte(k), []byte(env[k])))
	}
	return nil, raw
}
