package sandboxkey

import (
	"errors"
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
