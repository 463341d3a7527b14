package cli_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/internal/recordfile"
)

// cuttingProxy listens beside the sandbox's runboxd socket and makes the
// record point at it: it forwards every connection to runboxd, but cuts
// each of the first cutN once it has carried cutAfter bytes from the
// daemon, and calls hold (when set) before forwarding each later one.
func cuttingProxy(t *testing.T, home, id string, cutN int32, cutAfter int64, hold func()) (cuts *atomic.Int32) {
	t.Helper()
	sbDir := filepath.Join(home, "sandboxes", id)
	rec, err := processrecord.Read(sbDir)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(home, "p.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.Remove(sock) })
	real := rec.Socket
	cuts = new(atomic.Int32)
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cut := accepted.Add(1) <= cutN
			go func() {
				defer c.Close()
				if !cut && hold != nil {
					hold()
				}
				d, err := net.Dial("unix", real)
				if err != nil {
					t.Logf("proxy: %v", err)
					return
				}
				defer d.Close()
				go func() { io.Copy(d, c); d.(*net.UnixConn).CloseWrite() }()
				if cut {
					io.CopyN(c, d, cutAfter)
					cuts.Add(1)
					return
				}
				io.Copy(c, d)
			}()
		}
	}()
	rec.Socket = sock
	if err := recordfile.Write(sbDir, rec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rec.Socket = real
		recordfile.Write(sbDir, rec)
	})
	return cuts
}

// TestFrontReattachesABrokenStream: when the front's stream to runboxd
// breaks, before the exec started (the Run sent, its answer cut short) or
// while it shows output, the front dials runboxd again and re-attaches by
// itself, never handing over to runbox-full: every line appears once, in
// order, the command ran once, and the status is the command's. Before,
// the front handed the exec to runbox-full (--from SEQ) at the first cut.
func TestFrontReattachesABrokenStream(t *testing.T) {
	home := setHome(t)
	id := up(t)
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	for _, c := range []struct {
		name     string
		cutAfter int64
	}{
		{"before the started event", 60}, // in the answer's headers, after the handshake's 16 bytes
		{"mid-output", 2000},             // each stream carries ~100 lines
	} {
		t.Run(c.name, func(t *testing.T) {
			count := filepath.Join(t.TempDir(), "count")
			cuts := cuttingProxy(t, home, id, 3, c.cutAfter, nil)
			o := runBin(t, "exec", id, "--", "echo run >> "+count+"; for i in $(seq 1 300); do echo line $i; sleep 0.002; done; echo done >&2; exit 3")
			if o.code != 3 || o.stdout != want.String() || o.stderr != "done\n" {
				t.Errorf("exec through a stream cut 3 times: exit %d, stderr %q, stdout %d bytes (want %d, each line once); want exit 3", o.code, o.stderr, len(o.stdout), want.Len())
			}
			if b, _ := os.ReadFile(count); string(b) != "run\n" {
				t.Errorf("the command ran %q; want once", b)
			}
			if cuts.Load() != 3 {
				t.Errorf("the proxy cut %d streams; want 3", cuts.Load())
			}
			if got := spied(t, log); got != "" {
				t.Errorf("runbox-full was run with %q; want the front to re-attach by itself", got)
			}
		})
	}
}

// TestFrontReattachCountsTheGap: a stream cut while the command writes
// 3 MB, and the front's new connection held until the command is done, so
// the start of what it missed left runboxd's 1 MiB ring: the front
// re-attaches, shows the start and the end of the output, reports the
// gap, and the bytes shown plus the bytes the gap reports are exactly the
// command's output, the bytes shown exactly its start and its end; exit 0.
func TestFrontReattachCountsTheGap(t *testing.T) {
	home := setHome(t)
	id := up(t)
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	const total = 3_000_000
	var full strings.Builder
	for i := 1; full.Len() < total; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	want := full.String()[:total]
	done := filepath.Join(t.TempDir(), "done")
	cuttingProxy(t, home, id, 1, 200_000, func() {
		// Until the command wrote everything (bounded well inside the half
		// second runboxd waits for a follower before it cancels the exec).
		for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(done); err == nil {
				return
			}
		}
	})
	o := runBin(t, "exec", id, "--", fmt.Sprintf("seq 1 1000000 | head -c %d; : > %s", total, done))
	// runboxd does not know the bytes of a gap met on an Attach from a
	// sequence number; the final warning counts them.
	// (It knows them when the cut came before any output was shown: the
	// Attach is then from the first chunk.)
	gaps := regexp.MustCompile(`runbox: \[\.\.\. (?:(\d+) bytes of )?output left out here \(chunks \d+-\d+ left`).FindAllStringSubmatch(o.stderr, -1)
	lost := -1
	if m := regexp.MustCompile(`runbox: warning: (\d+) bytes of output are missing above \(1 gaps?\)`).FindStringSubmatch(o.stderr); m != nil {
		lost, _ = strconv.Atoi(m[1])
	}
	shown := len(o.stdout)
	head, tail := 0, 0
	for head < shown && o.stdout[head] == want[head] {
		head++
	}
	for tail < shown-head && o.stdout[shown-1-tail] == want[total-1-tail] {
		tail++
	}
	if o.code != 0 || len(gaps) != 1 || gaps[0][1] != "" && gaps[0][1] != strconv.Itoa(lost) || shown+lost != total || head+tail != shown || tail == 0 {
		t.Errorf("exec cut at 200 kB while writing %d bytes: exit %d, %d bytes shown (%d the output's start, %d its end), %d gap(s), %d bytes missing by the final warning; want exit 0, one gap (of the missing bytes, when it says), shown + missing = %d, the shown bytes the output's start and end\nstderr: %s",
			total, o.code, shown, head, tail, len(gaps), lost, total, o.stderr)
	}
	if got := spied(t, log); got != "" {
		t.Errorf("runbox-full was run with %q; want the front to re-attach by itself", got)
	}
}

// TestFrontSandboxLostAsFull: runboxd killed while the front follows an
// exec is the same failure as for runbox-full alone: the output shown,
// then exit 125 naming the lost sandbox.
func TestFrontSandboxLostAsFull(t *testing.T) {
	home := setHome(t)
	full := filepath.Join(filepath.Dir(binary(t)), "runbox-full")
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	for _, bin := range []string{binary(t), full} {
		id := up(t)
		rec, err := processrecord.Read(filepath.Join(home, "sandboxes", id))
		if err != nil {
			t.Fatal(err)
		}
		m := marker(t)
		cmd, out, stderr := startMarkedExec(t, bin, id, m)
		syscall.Kill(rec.Pid, syscall.SIGKILL)
		code, _ := waitExit(t, cmd, hangBound)
		if code != 125 || out.String() != "started\n" || !strings.Contains(stderr.String(), "sandbox lost") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s, runboxd killed mid-exec: exit %d, stdout %q, stderr %q; want 125, the output, one line saying the sandbox is lost", filepath.Base(bin), code, out.String(), stderr.String())
		}
		if got := spied(t, log); bin == binary(t) && got != "" {
			t.Errorf("the front handed the lost exec to runbox-full (%q): want it to report it itself", got)
		}
		// runboxd died by SIGKILL: its exec's sleep lives on until the
		// sandbox is removed, and rm -f must not return before it is gone.
		if n, err := providertest.ProcCount(m); err != nil || n != 1 {
			t.Errorf("%s: %d `%s` running after runboxd's death (%v): want the one the exec started", filepath.Base(bin), n, m, err)
		}
		must(t, "rm", "-f", id)
		if n, err := providertest.ProcCount(m); err != nil || n != 0 {
			t.Errorf("%s: %d `%s` survive `runbox rm -f` of the lost sandbox (%v): want 0", filepath.Base(bin), n, m, err)
		}
	}
}

// TestFrontFailsAsFull: a sandbox whose record is gone, or whose secret
// runboxd refuses, gives what runbox-full alone gives, byte for byte; so
// does a Run that runboxd refuses (an exec id reused with another spec, a
// program that does not exist or cannot run, a bad session name).
func TestFrontFailsAsFull(t *testing.T) {
	home := setHome(t)
	full := filepath.Join(filepath.Dir(binary(t)), "runbox-full")
	id := up(t)
	gone := up(t)
	run := func(bin string, args ...string) outcome {
		cmd := exec.Command(bin, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
		return outcome{code, stdout.String(), stderr.String()}
	}
	must(t, "rm", gone)
	secret := filepath.Join(home, "sandboxes", id, processrecord.SecretFile)
	if err := os.WriteFile(secret, []byte(strings.Repeat("x", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"exec", gone, "--", "true"},
		{"exec", id, "--", "true"},
		{"exec", "--json", id, "--", "true"},
		{"exec", "--timeout", "-1s", id, "--", "true"},
	} {
		f, w := run(binary(t), args...), run(full, args...)
		if f != w || f.code != 125 {
			t.Errorf("runbox %q: %+v; runbox-full: %+v; want the same failure, 125", args, f, w)
		}
	}
	// runboxd's refusals of the Run, which the front now reports itself.
	ok := up(t)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"exec", "--id", "same", ok, "--", "true"}, 0},
		{[]string{"exec", "--id", "same", ok, "--", "false"}, 125}, // the id with another spec
		{[]string{"exec", ok, "no-such-program-31", "x"}, 127},
		{[]string{"exec", ok, "/etc/passwd", "x"}, 126},
		{[]string{"exec", "--session", "no/such", ok, "--", "true"}, 125},
	} {
		f := run(binary(t), c.args...)
		if c.code == 0 {
			continue // sets up the next case
		}
		w := run(full, c.args...)
		// Each run makes its own exec id.
		f.stderr, w.stderr = anyExecID.ReplaceAllString(f.stderr, "exec ID"), anyExecID.ReplaceAllString(w.stderr, "exec ID")
		if f != w || f.code != c.code {
			t.Errorf("runbox %q: %+v; runbox-full: %+v; want the same failure, %d", c.args, f, w, c.code)
		}
	}
}

// anyExecID matches an exec id execrules.NewExecID made, after "exec ".
var anyExecID = regexp.MustCompile(`exec [0-9a-f]{16}`)

// TestFrontFrozenDaemonIsLost: a runboxd that stops answering mid-exec
// without closing its socket (SIGSTOP) does not leave the front waiting
// forever: it probes runboxd after a silence and reports the sandbox lost
// (125) itself. Once runboxd runs again, the exec that
// lost its follower is stopped (cancel-on-exit), so nothing outlives it.
// Before the probe, the front waited for as long as runboxd stayed stopped.
func TestFrontFrozenDaemonIsLost(t *testing.T) {
	home := setHome(t)
	id := up(t)
	spy, log := fullSpy(t)
	t.Setenv("RUNBOX_FULL", spy)
	rec, err := processrecord.Read(filepath.Join(home, "sandboxes", id))
	if err != nil {
		t.Fatal(err)
	}
	m := marker(t)
	cmd, out, stderr := startMarkedExec(t, binary(t), id, m)
	if err := syscall.Kill(rec.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(rec.Pid, syscall.SIGCONT)
		}
	}
	defer resume()
	code, took := waitExit(t, cmd, 2*hangBound)
	resume()
	if code != 125 || out.String() != "started\n" || !strings.Contains(stderr.String(), "sandbox lost: runboxd (pid "+strconv.Itoa(rec.Pid)+") runs but does not answer") {
		t.Fatalf("runboxd stopped mid-exec: exit %d after %v, stdout %q, stderr %q; want 125 saying the sandbox is lost, runboxd running but not answering (runbox-full's words)", code, took, out.String(), stderr.String())
	}
	if got := spied(t, log); got != "" {
		t.Errorf("the front handed the exec to runbox-full (%q): want it to report the lost sandbox itself", got)
	}
	t.Logf("the front reported the stopped runboxd after %v: %s", took, strings.TrimSpace(stderr.String()))
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Errorf("%d processes of the exec still run after runboxd resumed with no one following it", n)
	}
}

// startMarkedExec starts bin exec on sandbox id printing "started" and then
// running the marker sleep m (only the sleep carries the marker, not the
// shell's command line), and returns once "started" is out.
func startMarkedExec(t *testing.T, bin, id, m string) (cmd *exec.Cmd, out, stderr *syncBuffer) {
	t.Helper()
	cmd = exec.Command(bin, "exec", id, "--", "echo started; s=sleep; $s "+strings.TrimPrefix(m, "sleep "))
	out, stderr = &syncBuffer{written: make(chan struct{})}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.written:
	case <-time.After(hangBound):
		t.Fatalf("%s exec: no output", filepath.Base(bin))
	}
	return cmd, out, stderr
}
