package runbox_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevelopmentDocListsEveryPackage keeps docs/development.md's layout
// true: every package of the module is named there.
func TestDevelopmentDocListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/development.md")
	if err != nil {
		t.Fatal(err)
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
		if !strings.Contains(string(doc), rel+"/") {
			t.Errorf("docs/development.md does not list package %s/", rel)
		}
	}
}
