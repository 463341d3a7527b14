package providertest

import (
	"encoding/json"
	"strings"
	"testing"
)

// CLI runs the runbox CLI as a test set it up (its binaries, home and
// environment) and returns its exit status, stdout and stderr.
type CLI func(args ...string) (code int, stdout, stderr string)

// LSStatus is the STATUS `runbox ls` prints for the sandbox id: "up",
// "paused", "held" or "lost". It fails the test when ls fails or does not list id.
func LSStatus(t testing.TB, cli CLI, id string) string {
	t.Helper()
	code, out, errs := cli("ls")
	if code != 0 {
		t.Fatalf("runbox ls: exit %d: %s", code, errs)
	}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != id {
			continue
		}
		for _, w := range f[1:] {
			if w == "up" || w == "paused" || w == "held" || w == "lost" {
				return w
			}
		}
		t.Fatalf("runbox ls line %q has no status", line)
	}
	t.Fatalf("runbox ls does not list %s:\n%s", id, out)
	return ""
}

// InspectPaused is what `runbox inspect` says of sandbox id being paused:
// its detail's "paused" and its daemon's.
func InspectPaused(t testing.TB, cli CLI, id string) (detail string, daemon bool) {
	t.Helper()
	v := inspectState(t, cli, id)
	return v.Detail["paused"], v.Daemon.Paused
}

// InspectHolds is what `runbox inspect` says of the holds on sandbox id
// (a snapshot copying it): its detail's "held" and its daemon's count.
func InspectHolds(t testing.TB, cli CLI, id string) (detail string, daemon int) {
	t.Helper()
	v := inspectState(t, cli, id)
	return v.Detail["held"], v.Daemon.Holds
}

// inspectedState is the part of `runbox inspect`'s output that says
// whether a sandbox is paused or held.
type inspectedState struct {
	Detail map[string]string `json:"detail"`
	Daemon *struct {
		Paused bool `json:"paused"`
		Holds  int  `json:"holds"`
	} `json:"daemon"`
}

// inspectState runs `runbox inspect id` and reads its state; it fails the
// test unless the daemon answered.
func inspectState(t testing.TB, cli CLI, id string) inspectedState {
	t.Helper()
	code, out, errs := cli("inspect", id)
	if code != 0 {
		t.Fatalf("runbox inspect: exit %d: %s", code, errs)
	}
	var v inspectedState
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Daemon == nil {
		t.Fatalf("runbox inspect printed %q (%v); want a daemon", out, err)
	}
	return v
}
