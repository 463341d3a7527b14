package runbox_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevelopmentDocListsEveryPackage keeps docs/development.md's layout
// true: every package of the module has a line of its own there, whose
// first column names its directory and whose second says what it is, and
// every path the layout names exists.
func TestDevelopmentDocListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(doc), "\n## Layout\n")
	if !ok {
		t.Fatal("docs/development.md has no ## Layout section")
	}
	if _, layout, ok = strings.Cut(layout, "\n```\n"); !ok {
		t.Fatal("docs/development.md's layout has no code block")
	}
	layout, _, _ = strings.Cut(layout, "\n```")
	listed := make(map[string]bool)
	for line := range strings.Lines(layout) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		paths, what, ok := strings.Cut(line, "  ")
		if !ok || strings.TrimSpace(what) == "" {
			t.Errorf("docs/development.md: %q says nothing of what it names", line)
		}
		for _, path := range strings.Split(paths, ", ") {
			if listed[path] {
				t.Errorf("docs/development.md lists %s twice", path)
			}
			listed[path] = true
			if _, err := os.Stat(path); err != nil {
				t.Errorf("docs/development.md lists %s, which does not exist", path)
			}
		}
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/runbox/runbox"
	for pkg := range strings.Lines(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(pkg), module), "/")
		if rel == "" {
			continue // the root package: runbox.go, errors.go, doc.go
		}
		if !listed[rel+"/"] {
			t.Errorf("docs/development.md does not list package %s/ on a line of its own", rel)
		}
	}
}
