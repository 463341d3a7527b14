package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The name index (internal/sandboxnames): up claims a name in it before
// creating, rm clears it, and exec by name reads it, in runbox-full and in
// the front. These tests run the real binaries.

// TestNameIndexConcurrentCreates: concurrent `runbox up --name N`, half on
// the host provider and half on local (so no one provider's own lock
// decides), make exactly one sandbox: one up prints its id, the others
// exit 125 saying the name is in use (ErrNameInUse's text), and
// `runbox exec N` reaches the winner, run by the front itself. Before the
// index, the check across providers and the create were apart, and two
// providers could each make a sandbox of that name.
func TestNameIndexConcurrentCreates(t *testing.T) {
	setHome(t)
	const n = 6
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		provider := "host"
		if i%2 == 1 {
			provider = "local"
		}
		wg.Go(func() { outs[i] = runBin(t, "up", "--provider", provider, "--name", "same") })
	}
	wg.Wait()
	var winner string
	for _, o := range outs {
		switch {
		case o.code == 0 && winner == "":
			winner = strings.TrimSpace(o.stdout)
		case o.code == 0:
			t.Errorf("a second up --name same succeeded: %q and %q", winner, o.stdout)
		case o.code != 125 || !strings.Contains(o.stderr, "sandbox name already in use"):
			t.Errorf("losing up: %+v; want exit 125, name already in use", o)
		}
	}
	if winner == "" {
		t.Fatalf("no up --name same succeeded: %+v", outs)
	}
	named := 0
	for _, sb := range lsJSON(t) {
		if sb.Name == "same" {
			named++
			if sb.ID != winner {
				t.Errorf("sandbox %s is named same; the winner is %s", sb.ID, winner)
			}
		}
	}
	if named != 1 {
		t.Errorf("%d sandboxes named same; want 1", named)
	}
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	if o := runBin(t, "exec", "same", "--", "exit 9"); o.code != 9 {
		t.Errorf("exec same: %+v; want exit 9", o)
	}
	if s := spied(t, log); s != "" {
		t.Errorf("exec by name went to runbox-full (%q); want the front to resolve it from the index", s)
	}
	// rm clears the entry: the name is free again, and a new sandbox
	// takes it.
	must(t, "rm", "same")
	if o := runBin(t, "exec", "same", "--", "true"); o.code != 125 || !strings.Contains(o.stderr, "no such sandbox") {
		t.Errorf("exec same after rm: %+v; want 125, no such sandbox", o)
	}
	id := up(t, "--name", "same")
	if o := runBin(t, "exec", "same", "--", "exit 4"); o.code != 4 {
		t.Errorf("exec same after a new up: %+v; want exit 4", o)
	}
	if e := indexEntry(t, "same"); e["id"] != id {
		t.Errorf("index entry of same: %v; want the new sandbox %s", e, id)
	}
}

// TestNameIndexConcurrentCreatesDocker: the same across providers that
// keep their records apart (host and docker), where before the index
// nothing but a check-then-create across providers stood between two
// creates of one name.
func TestNameIndexConcurrentCreatesDocker(t *testing.T) {
	setHome(t)
	engine := dockerNeeded(t)
	t.Setenv("DOCKER_HOST", engine)
	image := os.Getenv("RUNBOX_TEST_IMAGE")
	if image == "" {
		image = "runbox-test:busybox"
	}
	// Before DOCKER_HOST is restored for setHome's cleanup.
	t.Cleanup(func() {
		for _, sb := range lsJSON(t) {
			rb(t, "rm", "-f", sb.ID)
		}
	})
	const n = 4
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		args := []string{"up", "--name", "cross"}
		if i%2 == 1 {
			args = append(args, "--provider", "docker", "--image", image)
		}
		wg.Go(func() { outs[i] = runBin(t, args...) })
	}
	wg.Wait()
	won := 0
	for _, o := range outs {
		switch {
		case o.code == 0:
			won++
		case o.code != 125 || !strings.Contains(o.stderr, "sandbox name already in use"):
			t.Errorf("losing up: %+v; want exit 125, name already in use", o)
		}
	}
	named := 0
	for _, sb := range lsJSON(t) {
		if sb.Name == "cross" {
			named++
		}
	}
	if won != 1 || named != 1 {
		t.Errorf("%d ups succeeded and %d sandboxes are named cross; want 1 and 1 (%+v)", won, named, outs)
	}
}

// TestNameIndexStale: an entry whose sandbox was removed behind runbox's
// back (runboxd killed, its record deleted) resolves as a name nothing
// ever had: the same exit status and message, from the front and from
// runbox-full; and an entry that names another live sandbox (one with
// another name) never runs the command there. A new up takes the stale
// name over.
func TestNameIndexStale(t *testing.T) {
	home := setHome(t)
	gone := up(t, "--name", "gone")
	other := up(t, "--name", "other")
	removeBehindBack(t, home, gone)

	never := runBin(t, "exec", "never", "--", "true")
	if never.code != 125 || !strings.Contains(never.stderr, "no such sandbox") {
		t.Fatalf("exec never: %+v; want 125, no such sandbox", never)
	}
	want := strings.ReplaceAll(never.stderr, "never", "gone")
	if o := runBin(t, "exec", "gone", "--", "true"); o.code != never.code || o.stderr != want || o.stdout != "" {
		t.Errorf("exec by a stale name: %+v; want what an unknown name gives: %q", o, want)
	}
	if o := rb(t, "exec", "gone", "--", "true"); o.code != never.code || o.stderr != want {
		t.Errorf("runbox-full exec by a stale name: %+v; want %q", o, want)
	}

	// Point the stale entry at the other live sandbox, as a reused id or
	// a hand-edited file would: its record has another name.
	b, err := json.Marshal(map[string]string{"provider": "host", "id": other})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "names", "gone"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := marker(t)
	for _, run := range []func(...string) outcome{
		func(a ...string) outcome { return runBin(t, a...) },
		func(a ...string) outcome { return rb(t, a...) },
	} {
		o := run("exec", "gone", "--", "touch "+filepath.Join(home, "ran-"+strings.ReplaceAll(m, " ", "-")))
		if o.code != 125 || o.stderr != want {
			t.Errorf("exec by an entry naming another sandbox: %+v; want %q", o, want)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "ran-"+strings.ReplaceAll(m, " ", "-"))); err == nil {
		t.Errorf("the command ran in sandbox %s, which the stale entry named", other)
	}

	id := up(t, "--name", "gone")
	if o := runBin(t, "exec", "gone", "--", "exit 6"); o.code != 6 {
		t.Errorf("exec by the name a new up took over: %+v; want exit 6", o)
	}
	if e := indexEntry(t, "gone"); e["id"] != id {
		t.Errorf("index entry of gone: %v; want %s", e, id)
	}
}

// TestNameIndexRepaired: a sandbox whose name the index lacks (made by an
// older runbox, or the entry deleted) is found by the full lookup, which
// writes the entry back, so the next exec by name is the front's.
func TestNameIndexRepaired(t *testing.T) {
	home := setHome(t)
	id := up(t, "--name", "lacking")
	if err := os.Remove(filepath.Join(home, "names", "lacking")); err != nil {
		t.Fatal(err)
	}
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	if o := runBin(t, "exec", "lacking", "--", "exit 2"); o.code != 2 {
		t.Errorf("exec by a name the index lacks: %+v; want exit 2", o)
	}
	if s := spied(t, log); s != "exec lacking -- exit 2\n" {
		t.Errorf("runbox-full got %q; want the exec handed over", s)
	}
	if e := indexEntry(t, "lacking"); e["id"] != id || e["provider"] != "host" {
		t.Errorf("index entry after the full lookup: %v; want host %s", e, id)
	}
	if o := runBin(t, "exec", "lacking", "--", "exit 3"); o.code != 3 {
		t.Errorf("exec by the repaired name: %+v; want exit 3", o)
	}
	if s := spied(t, log); s != "exec lacking -- exit 2\n" {
		t.Errorf("runbox-full got %q; want the second exec run by the front", s)
	}
}

// indexEntry reads name's entry in the index of $RUNBOX_HOME.
func indexEntry(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(os.Getenv("RUNBOX_HOME"), "names", name))
	if err != nil {
		t.Fatalf("name index entry %s: %v", name, err)
	}
	var e map[string]any
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// removeBehindBack kills a host sandbox's runboxd and deletes its
// directory, as a user cleaning up by hand would, without runbox rm.
func removeBehindBack(t *testing.T, home, id string) {
	t.Helper()
	dir := filepath.Join(home, "sandboxes", id)
	b, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Pid int }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Pid <= 0 {
		t.Fatalf("record of %s has no pid", id)
	}
	_ = syscall.Kill(rec.Pid, syscall.SIGKILL)
	deadline := time.Now().Add(hangBound)
	for syscall.Kill(rec.Pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
}
