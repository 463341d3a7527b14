package servercli_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/handover"
)

// help runs the CLI in-process with the server commands as sc has them and
// returns what it printed.
func help(t *testing.T, sc cli.ServerCommands, args ...string) string {
	t.Helper()
	t.Setenv("RUNBOX_HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := cli.Main(context.Background(), sc, args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("runbox %q: exit %d, %s", args, code, stderr.String())
	}
	return stdout.String()
}

// commandList returns the "Available Commands:" section of a --help.
func commandList(t *testing.T, out string) string {
	t.Helper()
	_, list, ok := strings.Cut(out, "\nAvailable Commands:\n")
	if !ok {
		t.Fatalf("no command list in:\n%s", out)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	return list
}

// TestFullListsWhatServerLists: runbox --help (runbox-full's, where the
// server commands are stand-ins handing over to runbox-server) lists every
// command with the same summary as runbox-server's, whose server commands
// are the real ones; and those are exactly handover.ServerCommands, which
// the front hands to runbox-server directly.
func TestFullListsWhatServerLists(t *testing.T) {
	fullList := commandList(t, help(t, cli.ServerCommands{}, "--help"))
	serverList := commandList(t, help(t, cli.ServerCommands{Make: servercli.Commands}, "--help"))
	if fullList != serverList {
		t.Errorf("runbox-full --help lists\n%s\nrunbox-server --help lists\n%s\nwant the same commands and summaries", fullList, serverList)
	}
	for _, name := range handover.ServerCommands {
		if !slices.ContainsFunc(strings.Split(fullList, "\n"), func(l string) bool { return strings.HasPrefix(l, "  "+name+" ") }) {
			t.Errorf("runbox-full --help does not list %s:\n%s", name, fullList)
		}
		// runbox-server's own command, not a stand-in handing it on.
		if out := help(t, cli.ServerCommands{Make: servercli.Commands}, name, "--help"); strings.Contains(out, "runbox-server's command") || !strings.Contains(out, "Flags:") {
			t.Errorf("runbox-server %s --help:\n%s\nwant the command's own help, not a stand-in's", name, out)
		}
	}
}
