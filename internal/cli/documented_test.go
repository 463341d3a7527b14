package cli_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Behaviours docs/cli.md promises that other tests did not exercise
// (issue 20), each through the CLI against a host sandbox.

// TestExecEnvPassThrough: -e K passes this process's value of K; an unset K
// is not passed; without -e the variable does not reach the command (the
// sandbox was created before it was set, so its daemon does not have it).
func TestExecEnvPassThrough(t *testing.T) {
	setHome(t)
	id := up(t)
	t.Setenv("RUNBOX_TEST_PASSED", "from the caller")
	os.Unsetenv("RUNBOX_TEST_UNSET")
	const show = `echo "${RUNBOX_TEST_PASSED-absent}|${RUNBOX_TEST_UNSET-absent}"`
	o := rb(t, "exec", "-e", "RUNBOX_TEST_PASSED", "-e", "RUNBOX_TEST_UNSET", id, "--", show)
	if o.code != 0 || o.stdout != "from the caller|absent\n" {
		t.Errorf("exec -e K: %+v; want this process's value and an unset K left out", o)
	}
	if o := rb(t, "exec", id, "--", show); o.code != 0 || o.stdout != "absent|absent\n" {
		t.Errorf("exec without -e: %+v; want the variable absent", o)
	}
}

// loginHome makes a HOME whose .profile exports a token, and returns the
// directory and the token.
func loginHome(t *testing.T) (home, token string) {
	t.Helper()
	home = t.TempDir()
	token = fmt.Sprintf("login-%d", rand.Int64())
	if err := os.WriteFile(filepath.Join(home, ".profile"), []byte("export RUNBOX_LOGIN_MARK="+token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return home, token
}

// TestExecLogin: --login runs a login shell, which reads $HOME/.profile;
// without it the profile is not read.
func TestExecLogin(t *testing.T) {
	setHome(t)
	id := up(t)
	home, token := loginHome(t)
	const show = `echo "mark=${RUNBOX_LOGIN_MARK:-none}"`
	if o := rb(t, "exec", "--login", "-e", "HOME="+home, id, "--", show); o.code != 0 || !strings.HasSuffix(o.stdout, "mark="+token+"\n") {
		t.Errorf("exec --login: %+v; want mark=%s from %s/.profile", o, token, home)
	}
	if o := rb(t, "exec", "-e", "HOME="+home, id, "--", show); o.code != 0 || o.stdout != "mark=none\n" {
		t.Errorf("exec without --login: %+v; want mark=none", o)
	}
}

// TestShIsLoginShell: runbox sh starts a login shell: its $HOME/.profile
// has been read when the first command runs.
func TestShIsLoginShell(t *testing.T) {
	setHome(t)
	id := up(t)
	home, token := loginHome(t)
	// The terminal echoes the typed line (mark=$...), so only the
	// expanded value can match.
	o := runboxStdin(t, "echo \"mark=$RUNBOX_LOGIN_MARK\"\nexit\n", "sh", "-e", "HOME="+home, id)
	if o.code != 0 || !strings.Contains(o.stdout, "mark="+token) {
		t.Errorf("runbox sh: %+v; want the login shell to have read %s/.profile (mark=%s)", o, home, token)
	}
}

// TestLsWithoutDocker: with no Docker engine answering, ls still lists the
// other providers' sandboxes, exits 0, and says on stderr that docker
// sandboxes were not listed. (DOCKER_HOST names a socket nothing listens
// on: an engine that stopped.)
func TestLsWithoutDocker(t *testing.T) {
	home := setHome(t)
	id := up(t, "--name", "listed")
	stoppedEngine(t, home) // one never started is no warning (TestLsQuietAndDockerNote)
	o := rb(t, "ls")
	if o.code != 0 || !regexp.MustCompile(`(?m)^`+id+`\s+listed\s+host\s+up\b`).MatchString(o.stdout) {
		t.Errorf("ls without a docker engine: %+v; want %s listed, host, up", o, id)
	}
	if !strings.HasPrefix(o.stderr, "runbox: docker sandboxes not listed: ") || strings.Count(o.stderr, "\n") != 1 {
		t.Errorf("ls without a docker engine: stderr %q; want one line saying docker sandboxes were not listed", o.stderr)
	}
	o = rb(t, "ls", "--json")
	var sbs []sandboxJSON
	if err := json.Unmarshal([]byte(o.stdout), &sbs); err != nil || o.code != 0 || len(sbs) != 1 || sbs[0].ID != id {
		t.Errorf("ls --json without a docker engine: %+v (%v); want a JSON array with %s", o, err, id)
	}
	if !strings.HasPrefix(o.stderr, "runbox: docker sandboxes not listed: ") {
		t.Errorf("ls --json without a docker engine: stderr %q; want the note", o.stderr)
	}
}

// TestExecStreamGapMessage: an attach that comes after more output than the
// daemon's replay ring holds prints what the ring still has and says on
// stderr exactly how many bytes are missing and which spill file has all of
// them; the printed bytes and the missing ones add up to the whole stream,
// and the spill file holds it. (The host provider's sandbox is this
// machine, so the spill file can be read directly.)
func TestExecStreamGapMessage(t *testing.T) {
	setHome(t)
	id := up(t)
	const total = 3_000_000 // well past the 1 MiB ring
	done := filepath.Join(t.TempDir(), "done")
	cmd := fmt.Sprintf(`seq 1 1000000 | head -c %d; : > %s`, total, done)
	if out := must(t, "exec", "--detach", "--id", "gap", id, "--", cmd); out != "gap\n" {
		t.Fatalf("exec --detach printed %q", out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached exec did not finish within a minute")
		}
	}
	o := rb(t, "attach", id, "gap")
	// The cut is marked where it happens, and summed up at the end.
	m := regexp.MustCompile(`(?s)^\nrunbox: \[\.\.\. (\d+) bytes of output left out here [^\n]*\]\nrunbox: warning: (\d+) bytes of output are missing above \((\d+) gaps?\): the sandbox's spill files have it: (\S+)\n$`).FindStringSubmatch(o.stderr)
	if o.code != 0 || m == nil {
		t.Fatalf("late attach: exit %d, %d bytes of stdout, stderr %q; want exit 0 and the gap warning naming the spill file", o.code, len(o.stdout), o.stderr)
	}
	lost, _ := strconv.Atoi(m[2])
	if m[1] != m[2] {
		t.Errorf("the cut's marker says %s bytes, the warning %s", m[1], m[2])
	}
	if lost+len(o.stdout) != total || lost == 0 {
		t.Errorf("attach printed %d bytes and reports %d missing; want them to add up to the %d written", len(o.stdout), lost, total)
	}
	var full strings.Builder
	for i := 1; full.Len() < total; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}
	want := full.String()[:total]
	if !strings.HasSuffix(want, o.stdout) {
		t.Errorf("attach printed %d bytes that are not the stream's tail", len(o.stdout))
	}
	if b, err := os.ReadFile(m[4]); err != nil || string(b) != want {
		t.Errorf("spill file %s: %d bytes, %v; want the whole %d-byte stream", m[4], len(b), err, total)
	}
}

// TestSyncCacheQuietColonPath: sync's local digest cache (under
// $RUNBOX_HOME) is trusted while a file's size and mtime are those it was
// hashed with, and the file is read again once they change; -q prints
// nothing; ./a:b is a local path, where a:b would name a sandbox.
//
// Digests only matter for a file whose mtime differs between the two sides
// (equal size and mtime is "unchanged" without them). The test pulls into a
// local directory: a local copy whose mtime was moved is hashed (and its
// digest cached), found equal, and given the sandbox's mtime back. A
// same-size edit with the hashed mtime put back is then trusted to the
// cache (not read, so not replaced), until its mtime moves again.
func TestSyncCacheQuietColonPath(t *testing.T) {
	setHome(t)
	id := up(t)
	work := t.TempDir()
	t.Chdir(work)
	if err := os.Mkdir("a:b", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("a:b", "f.txt"), []byte("version 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	remote := id + ":" + filepath.Join(t.TempDir(), "synced")
	if o := rb(t, "sync", "-q", "./a:b", remote); o.code != 0 || o.stdout != "" || o.stderr != "" {
		t.Fatalf("sync -q ./a:b: %+v; want exit 0 and no output at all", o)
	}
	// Without ./ both sides read as SANDBOX:PATH, which sync refuses.
	if o := rb(t, "sync", "a:b", remote); o.code != 125 || !strings.Contains(o.stderr, "exactly one of SRC and DST must be SANDBOX:PATH") {
		t.Errorf("sync a:b (no ./): %+v; want 125, a:b read as a sandbox path", o)
	}

	pulled := filepath.Join(work, "pulled")
	f := filepath.Join(pulled, "f.txt")
	pull := func() {
		t.Helper()
		if o := rb(t, "sync", "-q", remote, pulled); o.code != 0 || o.stdout != "" || o.stderr != "" {
			t.Fatalf("sync -q %s %s: %+v; want exit 0 and no output at all", remote, pulled, o)
		}
	}
	check := func(what, want string) {
		t.Helper()
		if b, err := os.ReadFile(f); err != nil || string(b) != want {
			t.Errorf("%s: pulled f.txt %q, %v; want %q", what, b, err, want)
		}
	}
	setMtime := func(m time.Time) {
		t.Helper()
		if err := os.Chtimes(f, m, m); err != nil {
			t.Fatal(err)
		}
	}
	pull()
	check("first pull", "version 1\n")
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	sandboxMtime := fi.ModTime()
	hashedAt := sandboxMtime.Add(-time.Hour)

	// Same content, another mtime: read, found equal, mtime set back.
	setMtime(hashedAt)
	pull()
	check("pull over a copy with another mtime", "version 1\n")
	if fi, err := os.Stat(f); err != nil || !fi.ModTime().Equal(sandboxMtime) {
		t.Fatalf("pull over an equal copy: mtime %v, %v; want the sandbox's %v", fi.ModTime(), err, sandboxMtime)
	}

	// A same-size edit with the hashed mtime put back: the cached digest
	// is trusted, the file is not read, so it is not replaced.
	if err := os.WriteFile(f, []byte("version 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	setMtime(hashedAt)
	pull()
	check("pull over a same-size edit with the hashed mtime (the cached digest must be trusted, the file not read)", "version 2\n")

	// Another mtime: the cached digest no longer applies; read, found
	// different, replaced.
	setMtime(hashedAt.Add(time.Minute))
	pull()
	check("pull over the edit once its mtime moved", "version 1\n")
}

// TestExecJSONSpill: exec --json of output that outgrows the result's head
// and tail names each stream's spill file (stdout_spill, stderr_spill), and
// each file holds its whole stream (the host provider's sandbox is this
// machine, so the files can be read directly); a small stream has none.
func TestExecJSONSpill(t *testing.T) {
	setHome(t)
	id := up(t)
	o := rb(t, "exec", "--json", id, "--", "seq 1 200000; seq 1 100000 >&2")
	var res struct {
		StdoutDropped int64  `json:"stdout_dropped"`
		StderrDropped int64  `json:"stderr_dropped"`
		StdoutSpill   string `json:"stdout_spill"`
		StderrSpill   string `json:"stderr_spill"`
	}
	if err := json.Unmarshal([]byte(o.stdout), &res); err != nil || o.code != 0 {
		t.Fatalf("exec --json: %v, exit %d, stderr %q", err, o.code, o.stderr)
	}
	seq := func(n int) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "%d\n", i)
		}
		return b.String()
	}
	for _, s := range []struct {
		name, path string
		dropped    int64
		want       string
	}{{"stdout", res.StdoutSpill, res.StdoutDropped, seq(200000)}, {"stderr", res.StderrSpill, res.StderrDropped, seq(100000)}} {
		if s.path == "" || s.dropped != int64(len(s.want))-64<<10 {
			t.Errorf("%s: spill %q, dropped %d; want a spill file and %d dropped", s.name, s.path, s.dropped, len(s.want)-64<<10)
			continue
		}
		if b, err := os.ReadFile(s.path); err != nil || string(b) != s.want {
			t.Errorf("%s spill file %s: %d bytes, %v; want the whole %d-byte stream", s.name, s.path, len(b), err, len(s.want))
		}
	}
	o = rb(t, "exec", "--json", id, "--", "echo small")
	if !strings.Contains(o.stdout, `"stdout_spill":""`) || !strings.Contains(o.stdout, `"stderr_spill":""`) {
		t.Errorf("exec --json of small output: %q; want empty spill fields", o.stdout)
	}
}
