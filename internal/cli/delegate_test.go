package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The runbox binary is a small front (internal/front) that runs execs on
// host and local sandboxes by id itself and hands everything else to
// runbox-full beside it, or, for the server commands, to runbox-server.
// These tests run the real binaries.

// goDeps lists the packages pkg links (go list -deps).
func goDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// linksPrefix returns the first of deps that starts with prefix, or "".
func linksPrefix(deps []string, prefix string) string {
	i := slices.IndexFunc(deps, func(d string) bool { return strings.HasPrefix(d, prefix) })
	if i < 0 {
		return ""
	}
	return deps[i]
}

// TestFrontLinksNoHeavyPackage: cmd/runbox's dependency list holds no HTTP
// stack, protobuf runtime or generated protobuf-go code (only the plain
// wire types), connect, command-line framework, provider SDK or
// database, whose package inits and start-up every command would pay;
// cmd/runbox-full's or cmd/runbox-server's holds each, so the check cannot
// pass by listing nothing.
func TestFrontLinksNoHeavyPackage(t *testing.T) {
	heavy := []string{
		"net/http",
		"crypto/tls",
		"google.golang.org/protobuf/",
		"connectrpc.com/",
		"github.com/spf13/cobra",
		"github.com/spf13/pflag",
		"k8s.io/client-go/",
		"github.com/moby/moby/client",
		"golang.org/x/crypto/ssh",
		"modernc.org/sqlite",
		"github.com/prometheus/client_golang/",
		"github.com/modelcontextprotocol/go-sdk/",
		"github.com/runbox/runbox/client",
		"github.com/runbox/runbox/gen/",
		"github.com/runbox/runbox/provider/",
		"github.com/runbox/runbox/internal/procbox",
		"github.com/runbox/runbox/internal/cli",
	}
	front := goDeps(t, "github.com/runbox/runbox/cmd/runbox")
	others := append(goDeps(t, "github.com/runbox/runbox/cmd/runbox-full"), goDeps(t, "github.com/runbox/runbox/cmd/runbox-server")...)
	// Of the generated code, the front links only the plain wire types
	// (gen/runbox/v1/runboxv1wire, standard-library code): the check of
	// google.golang.org/protobuf/ above shows they bring no runtime.
	const wireTypes = "github.com/runbox/runbox/gen/runbox/v1/runboxv1wire"
	if !slices.Contains(front, wireTypes) {
		t.Errorf("cmd/runbox does not link %s: the check below proves less than it says", wireTypes)
	}
	front = slices.DeleteFunc(front, func(d string) bool { return d == wireTypes })
	for _, h := range heavy {
		if d := linksPrefix(front, h); d != "" {
			t.Errorf("cmd/runbox links %s: its init runs before every command (the front hands what needs it to runbox-full or runbox-server)", d)
		}
		if linksPrefix(others, h) == "" {
			t.Errorf("neither cmd/runbox-full nor cmd/runbox-server links %s: the check above proves nothing", h)
		}
	}
}

// TestFullLinksNoServerPackage: cmd/runbox-full, which every command the
// front hands over runs, links none of what only the server commands need
// (serve's HTTP server, Prometheus and SQLite registry, the MCP SDK and
// its encoding/gob, cobra's man page generator): their package inits would
// run before every command. cmd/runbox-server, which runs those commands,
// links each, so the check cannot pass by listing nothing; and runbox-full
// does not link the front (issue 31: the handover's rules are package
// handover's).
func TestFullLinksNoServerPackage(t *testing.T) {
	serverOnly := []string{
		"github.com/runbox/runbox/internal/server",
		"github.com/runbox/runbox/internal/mcpserver",
		"github.com/runbox/runbox/internal/registry",
		"github.com/runbox/runbox/internal/cli/servercli",
		"modernc.org/sqlite",
		"modernc.org/libc",
		"github.com/prometheus/",
		"github.com/modelcontextprotocol/go-sdk/",
		"github.com/google/jsonschema-go/",
		"encoding/gob",
		"github.com/spf13/cobra/doc",
		"github.com/cpuguy83/go-md2man/",
		"github.com/russross/blackfriday/",
	}
	full := goDeps(t, "github.com/runbox/runbox/cmd/runbox-full")
	server := goDeps(t, "github.com/runbox/runbox/cmd/runbox-server")
	for _, h := range serverOnly {
		if d := linksPrefix(full, h); d != "" {
			t.Errorf("cmd/runbox-full links %s: its init runs before every command the front hands over (it belongs in runbox-server)", d)
		}
		if linksPrefix(server, h) == "" {
			t.Errorf("cmd/runbox-server does not link %s: the check above proves nothing", h)
		}
	}
	if slices.Contains(full, "github.com/runbox/runbox/internal/front") {
		t.Errorf("cmd/runbox-full links internal/front")
	}
}

// TestFullLinksNoClientset: runbox-full links the kubernetes provider
// through client-go's REST client over a scheme of core/v1 only, not the
// clientset, whose scheme registers every API group at package init (and
// gentype's fake-client machinery): every command runbox-full runs would
// pay those inits. runbox-full still links client-go's REST client, so the
// check cannot pass by listing nothing.
func TestFullLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/runbox/runbox/cmd/runbox-full").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, heavy := range []string{
		"k8s.io/client-go/kubernetes", // the clientset and its scheme, every group's typed client
		"k8s.io/client-go/testing",
		"k8s.io/apimachinery/pkg/util/managedfields",
		"github.com/google/gnostic-models/",
	} {
		if i := slices.IndexFunc(deps, func(d string) bool { return strings.HasPrefix(d, heavy) }); i >= 0 {
			t.Errorf("cmd/runbox-full links %s: its package init runs before every command", deps[i])
		}
	}
	if !slices.Contains(deps, "k8s.io/client-go/rest") {
		t.Errorf("cmd/runbox-full does not link k8s.io/client-go/rest: the check above proves nothing")
	}
}

// fullSpy writes a runbox-full stand-in that records each invocation's
// arguments (one line each) in the returned log, then becomes the real
// runbox-full with them.
func fullSpy(t *testing.T) (spy, log string) { return binSpy(t, "runbox-full") }

// binSpy is fullSpy for the binary named name beside runbox.
func binSpy(t *testing.T, name string) (spy, log string) {
	t.Helper()
	dir := t.TempDir()
	spy, log = filepath.Join(dir, name+"-spy"), filepath.Join(dir, "log")
	real := filepath.Join(filepath.Dir(binary(t)), name)
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(spy, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return spy, log
}

// spied reads what the spy recorded.
func spied(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return ""
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDelegation: runbox runs an exec by a host sandbox's id or name
// itself, and hands an id prefix, ls and serve to runbox-full with the
// same arguments, stdin, stdout, stderr and exit status.
func TestDelegation(t *testing.T) {
	setHome(t)
	id := up(t, "--name", "deleg")
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)

	o := runBin(t, "exec", id, "--", "echo by id; exit 7")
	if o.code != 7 || o.stdout != "by id\n" {
		t.Errorf("exec by id: %+v; want exit 7, its output", o)
	}
	if s := spied(t, log); s != "" {
		t.Errorf("exec by a host sandbox's id went to runbox-full (%q); want it run by runbox itself", s)
	}

	cmd := binCmd(t, "exec", "-i", id[:5], "--", "cat; echo err >&2; exit 5")
	cmd.Stdin = strings.NewReader("from stdin\n")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 || stdout.String() != "from stdin\n" || stderr.String() != "err\n" {
		t.Errorf("exec -i by id prefix: %v, stdout %q, stderr %q; want exit 5, stdin echoed, err", err, stdout.String(), stderr.String())
	}
	want := "exec -i " + id[:5] + " -- cat; echo err >&2; exit 5\n"
	if s := spied(t, log); s != want {
		t.Errorf("runbox-full got %q; want the invocation's arguments %q", s, want)
	}

	if o := runBin(t, "exec", "deleg", "--", "exit 3"); o.code != 3 {
		t.Errorf("exec by name: %+v; want exit 3", o)
	}
	if s := spied(t, log); s != want {
		t.Errorf("exec by a host sandbox's name went to runbox-full (%q); want it run by runbox itself (the name index)", s)
	}
	if o := runBin(t, "ls"); o.code != 0 || !strings.Contains(o.stdout, id) {
		t.Errorf("ls: %+v; want %s listed", o, id)
	}
	lines := strings.Split(strings.TrimSpace(spied(t, log)), "\n")
	if len(lines) != 2 || lines[1] != "ls" {
		t.Errorf("runbox-full got %q; want ls handed over", lines)
	}
}

// TestServerCommandsReachRunboxServer: the server commands (serve, mcp,
// token, audit, man) run in runbox-server with the invocation's arguments:
// the front hands them to it directly, runbox-full (flags before the
// command, `help COMMAND`, runbox-full called directly) hands them on, and
// the output, messages and exit status are runbox-server's; runbox --help
// still lists them.
func TestServerCommandsReachRunboxServer(t *testing.T) {
	setHome(t)
	fullSpyPath, fullLog := fullSpy(t)
	serverSpyPath, serverLog := binSpy(t, "runbox-server")
	t.Setenv("RUNBOX_FULL", fullSpyPath)
	t.Setenv("RUNBOX_SERVER", serverSpyPath)

	o := runBin(t, "serve", "--bad-flag")
	if o.code != 125 || o.stderr != "runbox: serve: unknown flag: --bad-flag (see 'runbox serve --help')\n" {
		t.Errorf("serve --bad-flag: %+v; want 125 and runbox-server's one-line usage error", o)
	}
	if s, f := spied(t, serverLog), spied(t, fullLog); s != "serve --bad-flag\n" || f != "" {
		t.Errorf("serve: runbox-server got %q, runbox-full %q; want it handed to runbox-server alone", s, f)
	}

	db := filepath.Join(t.TempDir(), "r.db")
	o = runBin(t, "--host", "http://127.0.0.1:1", "token", "list", "--db", db)
	if o.code != 0 || !strings.HasPrefix(o.stdout, "TOKEN ID") {
		t.Errorf("--host URL token list: %+v; want runbox-server's empty token table", o)
	}
	o = runBin(t, "help", "audit")
	if o.code != 0 || !strings.Contains(o.stdout, "--tenant") || !strings.Contains(o.stdout, "runbox audit") {
		t.Errorf("help audit: %+v; want audit's own help", o)
	}
	handed := "--host http://127.0.0.1:1 token list --db " + db + "\nhelp audit\n"
	if s, f := spied(t, serverLog), spied(t, fullLog); s != "serve --bad-flag\n"+handed || f != handed {
		t.Errorf("runbox-server got %q, runbox-full %q; want runbox-full to hand token and help on as given (%q)", s, f, handed)
	}

	full := filepath.Join(filepath.Dir(binary(t)), "runbox-full")
	cmd := exec.Command(full, "mcp", "--help")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "--max-timeout") {
		t.Errorf("runbox-full mcp --help: %v, %q; want mcp's own help from runbox-server", err, out)
	}

	o = runBin(t, "--help")
	for _, name := range []string{"serve", "mcp", "token", "audit", "man", "exec", "up"} {
		if !strings.Contains(o.stdout, "\n  "+name+" ") {
			t.Errorf("runbox --help does not list %s:\n%s", name, o.stdout)
		}
	}
}

// TestDelegatedExecInterrupt: Ctrl-C of a runbox that handed its exec to
// runbox-full reaches runbox-full (the same process, replaced), which
// cancels the exec: everything it started is gone and the status is the
// command's.
func TestDelegatedExecInterrupt(t *testing.T) {
	setHome(t)
	id := up(t)
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	m := marker(t)
	// Only the sleeps carry the marker, not runbox's command line.
	cmd := binCmd(t, "exec", "--grace", "1s", id[:6], "--", "echo started; s=sleep; $s "+strings.TrimPrefix(m, "sleep ")+" & $s "+strings.TrimPrefix(m, "sleep "))
	out := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 2 }); n != 2 {
		t.Fatalf("%d processes with %q; want 2", n, m)
	}
	signalled(t, cmd, syscall.SIGINT)
	code, _ := waitExit(t, cmd, hangBound)
	if code != 143 || !strings.Contains(stderr.String(), "cancelled") || out.String() != "started\n" {
		t.Errorf("delegated exec after Ctrl-C: exit %d, stdout %q, stderr %q; want 143 (the command's status), cancelled", code, out.String(), stderr.String())
	}
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Errorf("%d processes of the exec alive after Ctrl-C of the delegated exec", n)
	}
	if s := spied(t, log); !strings.HasPrefix(s, "exec --grace 1s "+id[:6]) {
		t.Errorf("runbox-full got %q; want the exec handed over", s)
	}
}

// TestDelegatedDockerExecInterrupt: the same through a docker sandbox:
// up goes to runbox-full, which links the docker provider; the exec the
// front runs itself through the sandbox's socket (TestFrontDockerExec),
// and Ctrl-C stops the command in the container.
func TestDelegatedDockerExecInterrupt(t *testing.T) {
	setHome(t)
	engine := dockerNeeded(t)
	t.Setenv("DOCKER_HOST", engine)
	image := os.Getenv("RUNBOX_TEST_IMAGE")
	if image == "" {
		image = "runbox-test:busybox"
	}
	id := up(t, "--provider", "docker", "--image", image)
	// Before DOCKER_HOST is restored for setHome's cleanup, which would
	// not see the container.
	t.Cleanup(func() { rb(t, "rm", "-f", id) })
	m := marker(t)
	// Only the sleep carries the marker, not runbox's command line.
	cmd := binCmd(t, "exec", "--grace", "1s", id, "--", "echo started; s=sleep; $s "+strings.TrimPrefix(m, "sleep "))
	out := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 1 }); n != 1 {
		t.Fatalf("%d processes with %q; want 1 (stderr %q)", n, m, stderr.String())
	}
	signalled(t, cmd, syscall.SIGINT)
	code, _ := waitExit(t, cmd, hangBound)
	if code != 143 || !strings.Contains(stderr.String(), "cancelled") {
		t.Errorf("docker exec after Ctrl-C: exit %d, stderr %q; want 143, cancelled", code, stderr.String())
	}
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Errorf("%d processes of the docker exec alive after Ctrl-C", n)
	}
}

// TestFrontDockerExec: runbox runs an exec on a docker sandbox this
// machine made itself, by id and by name, through the runboxd socket in
// the sandbox's state directory (no engine call, no runbox-full); once the
// container is stopped (nothing listens on the socket) it hands the exec to
// runbox-full, whose message and status are what runbox-full alone gives.
func TestFrontDockerExec(t *testing.T) {
	setHome(t)
	engine := dockerNeeded(t)
	t.Setenv("DOCKER_HOST", engine)
	image := os.Getenv("RUNBOX_TEST_IMAGE")
	if image == "" {
		image = "runbox-test:busybox"
	}
	id := up(t, "--provider", "docker", "--image", image, "--name", "dfront")
	t.Cleanup(func() { rb(t, "rm", "-f", id) })
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	for _, key := range []string{id, "dfront"} {
		o := runBin(t, "exec", key, "--", "echo out; echo err >&2; exit 7")
		if o.code != 7 || o.stdout != "out\n" || o.stderr != "err\n" {
			t.Errorf("exec %s on docker: %+v; want exit 7, out, err", key, o)
		}
	}
	if s := spied(t, log); s != "" {
		t.Errorf("exec on a docker sandbox went to runbox-full (%q); want it run by runbox itself", s)
	}
	var ctr string
	for _, sb := range lsJSON(t) {
		if sb.ID == id {
			ctr = sb.Detail["container"]
		}
	}
	if ctr == "" {
		t.Fatalf("no container for %s in runbox ls", id)
	}
	cmd := exec.Command("docker", "stop", "-t", "0", ctr)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+engine)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker stop: %v\n%s", err, out)
	}
	for _, key := range []string{id, "dfront"} {
		full := rb(t, "exec", key, "--", "true")
		o := runBin(t, "exec", key, "--", "true")
		if o.code != 125 || o != full || !strings.Contains(o.stderr, "lost") {
			t.Errorf("exec %s on a stopped docker sandbox: %+v; want runbox-full's %+v (125, lost)", key, o, full)
		}
	}
}

// TestMissingFullBinary: a runbox with no runbox-full beside it or on PATH
// still runs an exec by id, and fails what it would hand over with exit
// 125 and one line saying what was needed and how to build it; a
// $RUNBOX_FULL naming runbox itself is refused, not looped on.
func TestMissingFullBinary(t *testing.T) {
	setHome(t)
	id := up(t)
	alone := filepath.Join(t.TempDir(), "runbox")
	b, err := os.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) outcome {
		cmd := exec.Command(alone, args...)
		cmd.Env = append(os.Environ(), append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RUNBOX_FULL="}, env...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return outcome{code, stdout.String(), stderr.String()}
	}
	if o := run(nil, "exec", id, "--", "echo alone"); o.code != 0 || o.stdout != "alone\n" {
		t.Errorf("exec by id without runbox-full: %+v; want it run", o)
	}
	for _, args := range [][]string{{"inspect", id}, {"ls"}, {"exec", id[:4], "--", "true"}, {"up", "--provider", "docker"}} {
		o := run(nil, args...)
		if o.code != 125 || strings.Count(o.stderr, "\n") != 1 || !strings.Contains(o.stderr, "runbox-full not found") ||
			!strings.Contains(o.stderr, "go build -o bin/ ./cmd/...") || !strings.Contains(o.stderr, "RUNBOX_FULL") {
			t.Errorf("runbox %q without runbox-full: %+v; want 125 and one line naming runbox-full and how to build it", args, o)
		}
	}
	o := run([]string{"RUNBOX_FULL=" + binary(t)}, "ls")
	if o.code != 125 || !strings.Contains(o.stderr, "handed it back") {
		t.Errorf("RUNBOX_FULL naming the light runbox: %+v; want 125 saying so", o)
	}
}

// TestMissingServerBinary: a runbox and a runbox-full with no
// runbox-server beside them or on PATH run everything but the server
// commands, which fail, handed by the front or by runbox-full, with exit
// 125 and one line naming runbox-server and how to build it; a
// $RUNBOX_SERVER naming runbox-full or the front is refused, not looped on.
func TestMissingServerBinary(t *testing.T) {
	setHome(t)
	dir := t.TempDir()
	for _, name := range []string{"runbox", "runbox-full"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(binary(t)), name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(env []string, args ...string) outcome {
		cmd := exec.Command(filepath.Join(dir, "runbox"), args...)
		cmd.Env = append(os.Environ(), append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "RUNBOX_FULL=", "RUNBOX_SERVER="}, env...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return outcome{code, stdout.String(), stderr.String()}
	}
	if o := run(nil, "ls"); o.code != 0 {
		t.Errorf("ls without runbox-server: %+v; want it run by runbox-full", o)
	}
	for _, args := range [][]string{{"serve"}, {"token", "list"}, {"--host", "http://127.0.0.1:1", "mcp"}, {"help", "man"}} {
		o := run(nil, args...)
		if o.code != 125 || strings.Count(o.stderr, "\n") != 1 || !strings.Contains(o.stderr, "runbox-server not found") ||
			!strings.Contains(o.stderr, "go build -o bin/ ./cmd/...") || !strings.Contains(o.stderr, "RUNBOX_SERVER") || o.stdout != "" {
			t.Errorf("runbox %q without runbox-server: %+v; want 125 and one line naming runbox-server and how to build it", args, o)
		}
	}
	if o := run([]string{"RUNBOX_SERVER=" + filepath.Join(dir, "runbox-full")}, "--host", "http://127.0.0.1:1", "audit"); o.code != 125 || !strings.Contains(o.stderr, "is this binary") {
		t.Errorf("RUNBOX_SERVER naming runbox-full: %+v; want 125 saying so", o)
	}
	front := []string{"RUNBOX_SERVER=" + filepath.Join(dir, "runbox")}
	if o := run(front, "serve"); o.code != 125 || !strings.Contains(o.stderr, "is this binary") {
		t.Errorf("RUNBOX_SERVER naming the front, serve: %+v; want 125 saying so", o)
	}
	if o := run(front, "--host", "http://127.0.0.1:1", "serve"); o.code != 125 || !strings.Contains(o.stderr, "handed it back") {
		t.Errorf("RUNBOX_SERVER naming the front, handed on by runbox-full: %+v; want 125 saying so", o)
	}
}
