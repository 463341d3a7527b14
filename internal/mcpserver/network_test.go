package mcpserver_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestMCPNetworkSetOnStdio: runbox mcp --provider local with the
// operator's --allow *.python.org: network_set replaces the names a
// model's private sandbox may reach (the operator's runbox network shows
// the new list), refuses a name past the operator's list and a malformed
// one without changing the policy, and refuses an unknown sandbox and a
// sandbox not on the private network.
func TestMCPNetworkSetOnStdio(t *testing.T) {
	s := startLocal(t, "--allow-network", "private", "--allow", "*.python.org")
	sb := ok[struct {
		ID string `json:"id"`
	}](t, s.cs, "sandbox_create", map[string]any{"network": "private", "allow": []string{"pypi.python.org"}})
	policy := func() []string {
		t.Helper()
		cmd := exec.Command(runboxBin, "network", sb.ID)
		cmd.Env = append(os.Environ(), "RUNBOX_HOME="+s.home)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("runbox network %s: %v", sb.ID, err)
		}
		var p struct {
			Allow []string `json:"allow"`
		}
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatalf("runbox network %s printed %q: %v", sb.ID, out, err)
		}
		return p.Allow
	}
	if got := policy(); !slices.Equal(got, []string{"pypi.python.org"}) {
		t.Fatalf("the sandbox's policy after sandbox_create: allow %q", got)
	}
	out := ok[struct {
		Sandbox string   `json:"sandbox"`
		Allow   []string `json:"allow"`
	}](t, s.cs, "network_set", map[string]any{"sandbox": sb.ID, "allow": []string{"docs.python.org", "*.python.org"}})
	want := []string{"docs.python.org", "*.python.org"}
	if out.Sandbox != sb.ID || !slices.Equal(out.Allow, want) {
		t.Errorf("network_set: %+v, want sandbox %s allow %q", out, sb.ID, want)
	}
	if got := policy(); !slices.Equal(got, want) {
		t.Errorf("the sandbox's policy after network_set: allow %q, want %q", got, want)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"sandbox": sb.ID, "allow": []string{"evil.example"}}, "*.python.org"},
		{map[string]any{"sandbox": sb.ID, "allow": []string{"*"}}, "*.python.org"},
		{map[string]any{"sandbox": sb.ID, "allow": []string{"a b.python.org"}}, "a b.python.org"},
		{map[string]any{"sandbox": "nosuch", "allow": []string{}}, "nosuch"},
	} {
		if msg := failing(t, s.cs, "network_set", c.args); !strings.Contains(msg, c.want) {
			t.Errorf("network_set %v: %q, want it to name %q", c.args, msg, c.want)
		}
	}
	if got := policy(); !slices.Equal(got, want) {
		t.Errorf("refused network_set calls changed the policy: allow %q, want %q", got, want)
	}
	plain := ok[struct {
		ID string `json:"id"`
	}](t, s.cs, "sandbox_create", map[string]any{"network": "none"})
	if msg := failing(t, s.cs, "network_set", map[string]any{"sandbox": plain.ID, "allow": []string{}}); !strings.Contains(msg, "private") {
		t.Errorf("network_set on a sandbox on network none: %q, want it to say it needs the private network", msg)
	}
}
