package servercli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/servercli"
)

// commandPaths lists every command --help shows below path (path
// included), as the words after "runbox": read from the help text, not
// from the tree the generator walks, so a command the generator missed is
// still asked for.
func commandPaths(t *testing.T, path []string) [][]string {
	t.Helper()
	out := help(t, cli.ServerCommands{Make: servercli.Commands}, append(append([]string{}, path...), "--help")...)
	paths := [][]string{path}
	_, list, ok := strings.Cut(out, "\nAvailable Commands:\n")
	if !ok {
		return paths
	}
	list, _, _ = strings.Cut(list, "\n\n")
	for line := range strings.Lines(list) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "help" { // cobra's own help command has no page
			continue
		}
		paths = append(paths, commandPaths(t, append(append([]string{}, path...), f[0]))...)
	}
	return paths
}

// TestManPagesCoverEveryCommand: runbox man DIR writes one page per command
// --help lists (runbox.1, runbox-exec.1, runbox-token-create.1, ...), each a
// section 1 page with NAME and SYNOPSIS that man -l formats without a
// warning (when man is installed), and no page for a command that is not
// there. A command added to the tree without a page fails it.
func TestManPagesCoverEveryCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1") // made by runbox man
	t.Setenv("SOURCE_DATE_EPOCH", "0")
	help(t, cli.ServerCommands{Make: servercli.Commands}, "man", dir)

	want := map[string]string{} // page name -> command line
	for _, p := range commandPaths(t, nil) {
		want[strings.Join(append([]string{"runbox"}, p...), "-")+".1"] = strings.Join(append([]string{"runbox"}, p...), " ")
	}
	if len(want) < 20 {
		t.Fatalf("only %d commands found in --help: %v", len(want), want)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Name()] = true
		if _, ok := want[e.Name()]; !ok {
			t.Errorf("page %s: no such command in --help", e.Name())
		}
	}
	manBin, manErr := exec.LookPath("man")
	if manErr != nil {
		t.Logf("man is not installed (apt-get install man-db): only the pages' header and sections are checked")
	}
	th := regexp.MustCompile(`(?m)^\.TH "RUNBOX" "1" "Jan 1970" "runbox [^"]+" "runbox manual"$`)
	for page, line := range want {
		if !got[page] {
			t.Errorf("%s has no man page %s", line, page)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if !th.MatchString(src) {
			t.Errorf("%s: no .TH header of section 1 dated by SOURCE_DATE_EPOCH:\n%.300s", page, src)
		}
		for _, sec := range []string{".SH NAME\n", ".SH SYNOPSIS\n"} {
			if !strings.Contains(src, sec) {
				t.Errorf("%s: no %q section", page, strings.TrimSpace(sec))
			}
		}
		if strings.Contains(src, "Auto generated") {
			t.Errorf("%s: carries cobra's dated footer", page)
		}
		if manErr != nil {
			continue
		}
		cmd := exec.Command(manBin, "-l", "-P", "cat", filepath.Join(dir, page))
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "LANG=C.UTF-8")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man -l %s: %v, stderr %q", page, err, stderr.String())
		}
		out := stdout.String()
		shown := regexp.MustCompile(`NAME\n\s+` + regexp.QuoteMeta(strings.TrimSuffix(page, ".1")) + `\s+-\s[\s\S]*SYNOPSIS\n\s+` + strings.ReplaceAll(line, " ", `\s+`) + `\s`) // justified: any spaces
		if !shown.MatchString(out) {
			t.Errorf("man -l %s does not show NAME %q and SYNOPSIS %q:\n%.400s", page, strings.TrimSuffix(page, ".1"), line, out)
		}
	}
}
