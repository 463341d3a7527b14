package sandboxkey

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

type rec struct{ ID, Name string }

func match(recs []rec, key string) (rec, error) {
	return Match(recs, key, func(r rec) string { return r.ID }, func(r rec) string { return r.Name })
}

func TestMatch(t *testing.T) {
	recs := []rec{{"abc111", "one"}, {"abc222", "abc111x"}, {"def333", "abc"}}
	for key, want := range map[string]string{
		"abc111":  "abc111",
		"abc111x": "abc222", // an exact name
		"abc":     "def333", // a name beats an id prefix
		"abc2":    "abc222",
		"d":       "def333",
	} {
		got, err := match(recs, key)
		if err != nil || got.ID != want {
			t.Errorf("match(%q) = %s, %v; want %s", key, got.ID, err, want)
		}
	}
	if _, err := match(recs, "ab"); !errors.Is(err, runbox.ErrSandboxNotFound) || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("match(ab) err = %v; want an ambiguous ErrSandboxNotFound", err)
	}
	for _, key := range []string{"", "x", "abc1111"} {
		if _, err := match(recs, key); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("match(%q) err = %v; want ErrSandboxNotFound", key, err)
		}
	}
}

// TestValidNameAndID: the functions accept exactly what the regexps they
// replace (kept here as the reference) accept.
func TestValidNameAndID(t *testing.T) {
	name := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	id := regexp.MustCompile(`^[0-9a-f]{12}$`)
	cases := []string{"", "a", "A9", "_a", "a_b.c-d", "a b", "a/b", "é", "-x", ".x",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "0123456789ab", "0123456789AB", "0123456789a", "0123456789abc", "g123456789ab"}
	for c := range 256 {
		cases = append(cases, "x"+string(rune(c)), string(rune(c))+"23456789abc")
	}
	for _, s := range cases {
		if got, want := ValidName(s), name.MatchString(s); got != want {
			t.Errorf("ValidName(%q) = %v; want %v", s, got, want)
		}
		if got, want := ValidID(s), id.MatchString(s); got != want {
			t.Errorf("ValidID(%q) = %v; want %v", s, got, want)
		}
	}
}

// TestNewID: every id NewID makes has the form ValidID accepts, and 1000
// of them are distinct.
func TestNewID(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if !ValidID(id) || seen[id] {
			t.Fatalf("NewID() = %q (seen before: %v); want a fresh id ValidID accepts", id, seen[id])
		}
		seen[id] = true
	}
}
