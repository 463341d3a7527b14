package cli_test

import (
	"strconv"
	"testing"
)

// TestInspectShowsLocalLimits (issue 30): `runbox inspect` of a local
// sandbox shows its memory and pids limits, the defaults when none were
// asked for and the asked-for ones otherwise, as docker's inspect shows a
// container's.
func TestInspectShowsLocalLimits(t *testing.T) {
	setHome(t)
	localNeeded(t)
	for _, c := range []struct {
		args         []string
		memory, pids string
	}{
		{nil, "", ""},
		{[]string{"--memory", "256M", "--pids", "300"}, strconv.Itoa(256 << 20), "300"},
	} {
		id := up(t, append([]string{"--provider", "local"}, c.args...)...)
		var sb sandboxJSON
		if err := jsonUnmarshal(must(t, "inspect", id), &sb); err != nil {
			t.Fatalf("inspect %s: %v", id, err)
		}
		for k, want := range map[string]string{"memory": c.memory, "pids": c.pids} {
			got := sb.Detail[k]
			if want == "" {
				want = "a positive limit (the default)"
				if n, err := strconv.ParseInt(got, 10, 64); err == nil && n > 0 {
					continue
				}
			} else if got == want {
				continue
			}
			t.Errorf("runbox up %q; inspect's detail %s = %q; want %s", c.args, k, got, want)
		}
		must(t, "rm", "-f", id)
	}
}
