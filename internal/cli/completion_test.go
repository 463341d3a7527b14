package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// bashCompletionLib is Debian's bash-completion, which cobra's bash script
// needs (_get_comp_words_by_ref): without it the script loads, and every
// Tab prints "_get_comp_words_by_ref: command not found" into the line
// being typed.
const bashCompletionLib = "/usr/share/bash-completion/bash_completion"

// TestCompletionInRealShells (issue 30): the script `runbox completion
// bash|zsh|fish` prints, loaded in that shell running in a real terminal,
// completes as a user sees it: Tab after `runbox ex` gives `runbox exec`,
// after `runbox up --mk` gives `--mkdir` (a flag, from the front's command
// tree), and after `runbox serve --li` gives `--listen` (a server
// command's flag, which the front hands to runbox-server).
func TestCompletionInRealShells(t *testing.T) {
	needTmux(t)
	t.Setenv("RUNBOX_HOME", t.TempDir())
	dir := filepath.Dir(binary(t))
	path := dir + ":" + os.Getenv("PATH")
	for _, sh := range []struct {
		name, start, load string
		needs             []string
	}{
		{"bash", "bash --norc --noprofile",
			"source " + bashCompletionLib + "; source <(runbox completion bash)",
			[]string{bashCompletionLib}},
		{"zsh", "zsh -f",
			"bindkey -e; autoload -U compinit && compinit -u -d $ZDOTDIR/.zcompdump; source <(runbox completion zsh)",
			nil},
		{"fish", "fish --no-config",
			"set -g fish_autosuggestion_enabled 0; runbox completion fish | source",
			nil},
	} {
		t.Run(sh.name, func(t *testing.T) {
			needShell(t, sh.name, sh.needs...)
			state := t.TempDir()
			p := newPane(t, fmt.Sprintf("env PATH=%s ZDOTDIR=%s XDG_CONFIG_HOME=%s XDG_DATA_HOME=%s %s",
				path, state, state, state, sh.start))
			p.keys(true, sh.load+`; echo RE""ADY`)
			p.keys(false, "Enter")
			p.waitFor(regexp.MustCompile(`(?m)^READY\s*$`), "the completion script loaded")
			for _, c := range []struct{ typed, want string }{
				{"runbox ex", `runbox exec\b`},
				{"runbox up --mk", `runbox up --mkdir\b`},
				{"runbox serve --li", `runbox serve --listen\b`},
			} {
				p.keys(true, c.typed)
				p.keys(false, "Tab")
				p.waitFor(regexp.MustCompile(c.want), fmt.Sprintf("%q completed to %s", c.typed, c.want))
				// Clear the line with a key read in turn (C-u, with the
				// cursor at its end), not C-c: a signal is not queued
				// behind the shell's completion, so it can be lost while
				// the completion function still runs.
				p.keys(false, "C-u")
			}
		})
	}
}

// needShell skips (or, with RUNBOX_REQUIRE_SHELLS=1, fails) a test that
// needs the shell name and the files needs.
func needShell(t *testing.T, name string, needs ...string) {
	t.Helper()
	missing := ""
	if _, err := exec.LookPath(name); err != nil {
		missing = name
	}
	for _, f := range needs {
		if _, err := os.Stat(f); err != nil {
			missing = f
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("RUNBOX_REQUIRE_SHELLS") == "1" {
		t.Fatalf("RUNBOX_REQUIRE_SHELLS=1 but %s is not installed", missing)
	}
	t.Skipf("%s is not installed (apt-get install zsh fish bash-completion); set RUNBOX_REQUIRE_SHELLS=1 to make this a failure", missing)
}
