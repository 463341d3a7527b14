package textfield

import (
	"slices"
	"testing"
)

func TestSplitAndJoin(t *testing.T) {
	for _, s := range []string{"", "ls -la", "caf\xc3\xa9", "bad \xff byte", "\x80"} {
		text, raw := Split(s)
		if text != "" && raw != nil {
			t.Errorf("Split(%q) set both fields: %q, %q", s, text, raw)
		}
		if got := Join(text, raw); got != s {
			t.Errorf("Join(Split(%q)) = %q", s, got)
		}
	}
	if text, raw := Split("bad \xff"); text != "" || string(raw) != "bad \xff" {
		t.Errorf("Split of invalid UTF-8 = %q, %q; want it all in the raw field", text, raw)
	}
}

func TestSplitListKeepsOrderWhole(t *testing.T) {
	valid := []string{"printf", "%s\n", "é"}
	if text, raw := SplitList(valid); !slices.Equal(text, valid) || raw != nil {
		t.Errorf("SplitList(%q) = %q, %q; want the text list", valid, text, raw)
	}
	mixed := []string{"printf", "\xff", "ok"}
	text, raw := SplitList(mixed)
	if text != nil || len(raw) != len(mixed) {
		t.Fatalf("SplitList(%q) = %q, %q; want every element in the raw list", mixed, text, raw)
	}
	for i, r := range raw {
		if string(r) != mixed[i] {
			t.Errorf("raw[%d] = %q, want %q", i, r, mixed[i])
		}
	}
}

func TestSplitEnvSortedPairs(t *testing.T) {
	type pair struct{ name, value string }
	mk := func(n, v []byte) pair { return pair{string(n), string(v)} }
	valid := map[string]string{"A": "1", "B": "é"}
	if text, raw := SplitEnv(valid, mk); len(text) != 2 || raw != nil {
		t.Errorf("SplitEnv(%q) = %q, %q; want the text map", valid, text, raw)
	}
	bad := map[string]string{"Z": "1", "A": "\xfe", "M": "x"}
	text, raw := SplitEnv(bad, mk)
	want := []pair{{"A", "\xfe"}, {"M", "x"}, {"Z", "1"}}
	if text != nil || !slices.Equal(raw, want) {
		t.Errorf("SplitEnv(%q) = %q, %q; want every pair raw, sorted by name: %q", bad, text, raw, want)
	}
}
