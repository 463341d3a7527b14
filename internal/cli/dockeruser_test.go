package cli_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The CLI as a docker user expects it (issue 30): each test drives the
// real runbox binary.

// TestRemoteHostErrors: with RUNBOX_HOST set, a missing token, an address
// without a scheme, a server that does not answer and a server that
// refuses the token are each an error with exit status 125 naming the
// variable to fix, for ls as for exec and up (ls listed this machine's
// sandboxes and exited 0).
func TestRemoteHostErrors(t *testing.T) {
	setHome(t)
	id := up(t)
	refused := func() string { // an address nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	// A server that refuses every token, as runbox serve does (connect's
	// error, and runboxd's tag for the sentinel).
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Runbox-Error", "unauthenticated")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":"unauthenticated","message":"invalid token"}`))
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true) // the client speaks h2c
	srv.Start()
	defer srv.Close()
	for _, c := range []struct {
		host, token, want string
	}{
		{"http://" + refused, "", "RUNBOX_TOKEN"},
		{refused, "tok", "RUNBOX_HOST"},
		{"http://" + refused, "tok", "RUNBOX_HOST"},
		{srv.URL, "tok", "RUNBOX_TOKEN"},
	} {
		t.Setenv("RUNBOX_HOST", c.host)
		t.Setenv("RUNBOX_TOKEN", c.token)
		for _, args := range [][]string{{"ls"}, {"ls", "-q"}, {"exec", id, "true"}, {"up"}} {
			o := runBin(t, args...)
			if o.code != 125 || !strings.Contains(o.stderr, c.want) || strings.Count(o.stderr, "\n") != 1 || strings.Contains(o.stdout, id) {
				t.Errorf("RUNBOX_HOST=%s RUNBOX_TOKEN=%s runbox %q: %+v; want exit 125 and one line naming %s", c.host, c.token, args, o, c.want)
			}
		}
	}
}

// TestExecFlagsAfterSandbox: as with docker exec, the arguments after
// SANDBOX are the command's, flags included (runbox exec SB ls -la said
// "unknown shorthand flag"); "--" and runbox's flags between SANDBOX and
// "--" still work. Both binaries: by id the front runs it, by name
// runbox-full.
func TestExecFlagsAfterSandbox(t *testing.T) {
	setHome(t)
	id := up(t, "--name", "agent")
	dir := t.TempDir()
	for _, key := range []string{id, "agent"} {
		for _, args := range [][]string{
			{"exec", key, "ls", "-la", dir},
			{"exec", key, "--", "ls", "-la", dir},
			{"exec", "--timeout", "30s", key, "ls", "-la", dir},
			{"exec", key, "--timeout", "30s", "--", "ls", "-la", dir},
		} {
			if o := runBin(t, args...); o.code != 0 || !strings.HasPrefix(o.stdout, "total ") {
				t.Errorf("runbox %q: %+v; want ls -la's listing", args, o)
			}
		}
		// A flag runbox also has goes to the command when it follows it.
		if o := runBin(t, "exec", key, "echo", "--timeout", "-e", "x"); o.code != 0 || o.stdout != "--timeout -e x\n" {
			t.Errorf("exec %s echo --timeout -e x: %+v; want the arguments echoed", key, o)
		}
	}
	if o := runBin(t, "run", "ls", "-d", dir); o.code != 0 || o.stdout != dir+"\n" {
		t.Errorf("run ls -d DIR: %+v", o)
	}
}

// TestLogsFollowNeverSignals: runbox logs -f shows an exec's output as it
// comes, and Ctrl-C ends the watch (exit 130) with the exec still
// running; without -f, a running exec is an error and an ended one's
// output is shown. attach's help line says that Ctrl-C stops the exec.
func TestLogsFollowNeverSignals(t *testing.T) {
	setHome(t)
	id := up(t)
	m := marker(t)
	must(t, "exec", "--detach", "--id", "job", id, "--", "echo started; "+m+"; echo done")
	cmd := binCmd(t, "logs", "-f", id, "job")
	out := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.written:
	case <-time.After(hangBound):
		t.Fatal("logs -f showed nothing")
	}
	signalled(t, cmd, syscall.SIGINT)
	if code, _ := waitExit(t, cmd, hangBound); code != 130 || out.String() != "started\n" || stderr.String() != "" {
		t.Errorf("logs -f after Ctrl-C: exit %d, stdout %q, stderr %q; want 130, the output, nothing on stderr", code, out.String(), stderr.String())
	}
	if n := pollCount(t, m, 0, nil2); n == 0 {
		t.Errorf("%d processes of the exec alive after logs -f's Ctrl-C; want it still running", n)
	}
	if o := runBin(t, "logs", id, "job"); o.code != 125 || !strings.Contains(o.stderr, "logs -f") {
		t.Errorf("logs of a running exec: %+v; want 125 pointing at logs -f", o)
	}
	must(t, "cancel", "--grace", "0", id, "job")
	if o := runBin(t, "logs", id, "job"); o.code != 0 || o.stdout != "started\n" {
		t.Errorf("logs of an ended exec: %+v; want its output, exit 0", o)
	}
	if o := runBin(t, "--help"); !regexp.MustCompile(`attach +.*Ctrl-C stops the exec`).MatchString(o.stdout) {
		t.Errorf("runbox --help's attach line does not say Ctrl-C stops the exec:\n%s", o.stdout)
	}
}

// TestCpDockerRules: runbox cp refuses what docker cp refuses, creating
// nothing (it made /no/such/dir as a file named dir): a DST ending in "/"
// that does not exist, a DST whose directory does not exist, a directory
// onto a file; an existing directory DST takes SRC under its own name;
// the summary's plurals are right.
func TestCpDockerRules(t *testing.T) {
	setHome(t)
	id := up(t)
	base := t.TempDir() // the host sandbox sees this machine's files
	src := filepath.Join(base, "config.json")
	if err := os.WriteFile(src, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(base, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "no", "such")
	for _, c := range []struct{ src, dst string }{
		{src, id + ":" + missing + "/dir/"},
		{src, id + ":" + missing + "/file"},
		{src, id + ":" + filepath.Join(base, "nodir") + "/"},
		{tree, id + ":" + src},
		{id + ":" + src, filepath.Join(base, "no", "x")},
	} {
		if o := runBin(t, "cp", c.src, c.dst); o.code != 125 || !strings.HasPrefix(o.stderr, "runbox: cp") {
			t.Errorf("cp %s %s: %+v; want exit 125", c.src, c.dst, o)
		}
	}
	for _, p := range []string{filepath.Join(base, "no"), filepath.Join(base, "nodir")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("a refused cp created %s", p)
		}
	}
	o := runBin(t, "cp", src, id+":"+tree+"/")
	if o.code != 0 || !strings.HasPrefix(o.stderr, "copied 1 file, 0 links, 0 dirs ") {
		t.Errorf("cp FILE SB:DIR/: %+v; want \"copied 1 file, 0 links, 0 dirs\"", o)
	}
	if _, err := os.Stat(filepath.Join(tree, "config.json")); err != nil {
		t.Errorf("cp FILE SB:DIR/ did not put FILE inside DIR: %v", err)
	}
}

// TestCancelUnknownID: cancelling an id the sandbox never saw (a typo) is
// an error, exit 125, unless --tombstone asks for the tombstone; either
// way an exec started with that id is refused.
func TestCancelUnknownID(t *testing.T) {
	setHome(t)
	id := up(t)
	if o := runBin(t, "cancel", id, "deadbeef"); o.code != 125 || !contains(o.stderr, "deadbeef", "no such exec") {
		t.Errorf("cancel of an unknown id: %+v; want 125, no such exec", o)
	}
	if o := runBin(t, "cancel", "--tombstone", id, "cafe"); o.code != 0 || !strings.Contains(o.stderr, "tombstone") {
		t.Errorf("cancel --tombstone of an unknown id: %+v; want 0 and a note", o)
	}
	for _, x := range []string{"deadbeef", "cafe"} {
		if o := runBin(t, "exec", "--id", x, id, "--", "echo ran"); o.code != 125 || o.stdout != "" {
			t.Errorf("exec --id %s after its cancel: %+v; want it refused", x, o)
		}
	}
}

// TestArgvExitStatus: an argv whose program does not exist exits 127 and
// one that cannot be executed 126, as a shell does (both were 125), by id
// (the front) and by name (runbox-full).
func TestArgvExitStatus(t *testing.T) {
	setHome(t)
	id := up(t, "--name", "agent")
	plain := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(plain, []byte("echo ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{id, "agent"} {
		for _, c := range []struct {
			argv []string
			code int
		}{
			{[]string{"no-such-command-3136", "arg"}, 127},
			{[]string{filepath.Join(filepath.Dir(plain), "missing"), "arg"}, 127},
			{[]string{plain, "arg"}, 126},
			{[]string{"no-such-command-3136"}, 127}, // the shell's own
		} {
			o := runBin(t, append([]string{"exec", key}, c.argv...)...)
			if o.code != c.code || o.stdout != "" {
				t.Errorf("exec %s %q: %+v; want exit %d", key, c.argv, o, c.code)
			}
		}
	}
}

// TestUpMkdir: a missing --workdir is an error that creates nothing;
// --mkdir creates it (as mkdir -p, as the caller) and the sandbox works
// in it; --mkdir never makes a directory inside the runbox home.
func TestUpMkdir(t *testing.T) {
	home := setHome(t)
	wd := filepath.Join(t.TempDir(), "a", "b")
	if o := runBin(t, "up", "--workdir", wd); o.code != 125 || !strings.Contains(o.stderr, "does not exist") {
		t.Errorf("up --workdir MISSING: %+v; want 125, does not exist", o)
	}
	if _, err := os.Lstat(wd); err == nil {
		t.Fatalf("up --workdir MISSING created it")
	}
	o := runBin(t, "up", "--mkdir", "--workdir", wd)
	if o.code != 0 {
		t.Fatalf("up --mkdir --workdir MISSING: %+v", o)
	}
	if fi, err := os.Stat(wd); err != nil || !fi.IsDir() {
		t.Errorf("up --mkdir did not make %s: %v", wd, err)
	}
	if o := runBin(t, "exec", strings.TrimSpace(o.stdout), "pwd"); o.stdout != wd+"\n" {
		t.Errorf("pwd in the --mkdir sandbox: %+v; want %s", o, wd)
	}
	inHome := filepath.Join(home, "planted", "ws")
	if o := runBin(t, "up", "--mkdir", "--workdir", inHome); o.code != 125 || !strings.Contains(o.stderr, "runbox home") {
		t.Errorf("up --mkdir --workdir INSIDE-HOME: %+v; want 125, runbox home", o)
	}
	if _, err := os.Lstat(filepath.Dir(inHome)); err == nil {
		t.Errorf("up --mkdir made %s inside the runbox home", filepath.Dir(inHome))
	}
}

// TestLsQuietAndDockerNote: ls -q prints the ids alone; a docker engine
// that was never started (its socket does not exist) is no warning, one
// whose socket refuses still is; inspect prints "->" and "<" as they are.
func TestLsQuietAndDockerNote(t *testing.T) {
	home := setHome(t)
	wd := filepath.Join(t.TempDir(), "a->b<c")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	id := up(t, "--workdir", wd)
	if o := runBin(t, "ls", "-q"); o.code != 0 || o.stdout != id+"\n" || o.stderr != "" {
		t.Errorf("ls -q with no docker engine ever started: %+v; want %s alone, no warning", o, id)
	}
	stoppedEngine(t, home)
	if o := runBin(t, "ls"); o.code != 0 || !strings.HasPrefix(o.stderr, "runbox: docker sandboxes not listed: ") {
		t.Errorf("ls with a stopped docker engine: %+v; want the warning", o)
	}
	if o := runBin(t, "inspect", id); o.code != 0 || !strings.Contains(o.stdout, `"`+wd+`"`) {
		t.Errorf("inspect: %+v; want the workdir %q as it is", o, wd)
	}
}

// stoppedEngine points DOCKER_HOST at a socket file in dir that nothing
// listens on: a docker engine that ran and stopped.
func stoppedEngine(t *testing.T, dir string) {
	t.Helper()
	sock := filepath.Join(dir, "stopped-engine.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
}
