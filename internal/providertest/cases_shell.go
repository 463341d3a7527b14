package providertest

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Cases of the agent shell semantics issue's acceptance list that need a
// real sandbox: a background listener reached on loopback, replay of a
// detached exec's output, git failing instead of prompting, and the spill
// file read back through the client.

// readyBound is how long a case waits, inside the sandbox, for a server it
// started to answer. Python starts in well under a second on an idle
// machine; the bound only tells "slow on a loaded machine" from "never".
const readyBound = 30 * time.Second

// randPort returns a TCP port for one case's listener, random in
// 20000–29999, so parallel cases and parallel test binaries sharing a
// network namespace (the host and ssh providers) do not clash. The range
// is below Linux's ephemeral ports (32768–60999 by default), which every
// outgoing connection on the machine takes its local port from: a port
// drawn there could be in use by one (CI saw the ssh listener case's
// server fail to bind while the suite ran beside it), and below
// Kubernetes' NodePort range (30000–32767).
func randPort() int { return 20000 + mrand.IntN(10000) }

// RequireToolsEnv names the variable that makes a sandbox without git and
// python3 a failure of the cases needing them, instead of a skip (CI sets
// it: its machine and images have both).
const RequireToolsEnv = "RUNBOX_REQUIRE_TOOLS"

// newToolsSandbox creates a sandbox for a case that needs git and python3
// inside: with the fixture's ToolsSpec when it has one. Where the provider
// has none, or the sandbox lacks either tool, the case skips saying what is
// missing and how to get it, or fails when RUNBOX_REQUIRE_TOOLS=1.
func newToolsSandbox(t *testing.T, fx Fixture) *sandbox {
	t.Helper()
	if fx.ToolsMissing != "" {
		noTools(t, fx.ToolsMissing)
	}
	spec := fx.Spec
	if fx.ToolsSpec != nil {
		spec = *fx.ToolsSpec
	}
	s := newSandboxSpec(t, fx, spec)
	if m := s.missing(t, "git", "python3"); len(m) > 0 {
		noTools(t, fmt.Sprintf("the sandbox (image %q) has no %s", spec.Image, strings.Join(m, " or ")))
	}
	return s
}

// noTools skips (or, with RUNBOX_REQUIRE_TOOLS=1, fails) a case that needs
// git and python3 in its sandbox, saying why they are missing.
func noTools(t *testing.T, why string) {
	t.Helper()
	const how = "install git and python3 on this machine (host, local), build runbox-test:tools with scripts/build-test-image.sh (docker)"
	if os.Getenv(RequireToolsEnv) == "1" {
		t.Fatalf("%s=1 but %s: %s", RequireToolsEnv, why, how)
	}
	t.Skipf("%s: %s; %s=1 makes this a failure", why, how, RequireToolsEnv)
}

// missing returns the tools among names that the sandbox has no command
// for, as its own shell sees them (command -v), so a case can skip where the
// sandbox's image lacks them and must run where it has them.
func (s *sandbox) missing(t *testing.T, names ...string) []string {
	t.Helper()
	var cmd strings.Builder
	for _, n := range names {
		fmt.Fprintf(&cmd, "command -v %[1]s >/dev/null 2>&1 || echo %[1]s; ", n)
	}
	res := s.exec(t, cmd.String())
	if !res.OK() {
		t.Fatalf("looking for %q in the sandbox: %s", names, describe(res))
	}
	return strings.Fields(string(res.Stdout))
}

// noProxy is a shell prefix that keeps HTTP clients from sending loopback
// requests to a proxy named in the environment the sandbox inherited.
const noProxy = `unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY; export no_proxy=127.0.0.1 NO_PROXY=127.0.0.1; `

// fetchFunc defines a shell function fetch URL that prints the body of URL
// with whichever HTTP client the sandbox has (wget, curl, python3), and
// fails on any error.
const fetchFunc = `fetch() {
	if command -v wget >/dev/null 2>&1; then wget -qO- "$1"
	elif command -v curl >/dev/null 2>&1; then curl -fsS "$1"
	else python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"
	fi
}
`

// testLoopbackListener: a command that starts a listener in the background
// (`python3 -m http.server PORT & sleep 0.5; echo up`, or busybox httpd where
// the sandbox has no python3) returns promptly with its own output, the
// listener keeps serving, a later exec in the same sandbox connects to it on
// loopback and gets the page it serves, and removing the sandbox kills the
// listener.
func testLoopbackListener(t *testing.T, fx Fixture) {
	s := newToolsSandbox(t, fx)
	// The served directory's path is unique and on the listener's command
	// line, so it is the marker that finds the listener.
	dir := tempPath("listener")
	token := "runbox-listener-" + randDigits(12)
	port := randPort()
	start := fmt.Sprintf(`mkdir -p %[1]s && echo %[2]s > %[1]s/index.html || exit 1
if command -v python3 >/dev/null 2>&1; then
	python3 -m http.server %[3]d --bind 127.0.0.1 --directory %[1]s >/dev/null 2>&1 &
elif command -v httpd >/dev/null 2>&1; then
	httpd -f -p 127.0.0.1:%[3]d -h %[1]s >/dev/null 2>&1 &
else
	echo "no python3 and no httpd in this sandbox" >&2; exit 3
fi
sleep 0.5; echo up`, dir, token, port)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.Info(ctx); err != nil { // time the exec, not the first dial
		t.Fatalf("info: %v", err)
	}
	begin := time.Now()
	res, err := s.c.Exec(ctx, start)
	elapsed := time.Since(begin)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.ExitCode == 3 {
		noTools(t, fmt.Sprintf("the sandbox has no listener to start: %s", res.Stderr))
	}
	wantOK(t, res, "up\n")
	// The listener runs until the sandbox goes: an exec held by it would
	// never return, so backgroundBound tells the two apart.
	if elapsed > backgroundBound {
		t.Errorf("listener exec returned after %v, want within %v", elapsed, backgroundBound)
	}
	// At least one: a launcher on the way to the listener (a pyenv shim is
	// a shell script whose subshells share its command line) may count too.
	if n := s.count(t, dir); n < 1 {
		t.Errorf("no process with %q right after the exec returned, want the listener", dir)
	}

	// The listener may still be starting on a loaded machine: retry for up
	// to readyBound, a liveness bound.
	tries := int(readyBound / (100 * time.Millisecond))
	res = s.exec(t, fmt.Sprintf(noProxy+fetchFunc+`i=0
while [ $i -lt %[2]d ]; do fetch http://127.0.0.1:%[1]d/index.html && exit 0; i=$((i+1)); sleep 0.1; done
exit 1`, port, tries))
	wantOK(t, res, token+"\n")
	// The listener answered, so it alone is left.
	if n := s.count(t, dir); n != 1 {
		t.Errorf("%d processes with %q after a later exec connected, want the listener", n, dir)
	}

	wantOK(t, s.exec(t, "rm -rf "+dir), "")
	s.remove(t)
	if n := s.count(t, dir); n != 0 {
		t.Errorf("%d processes with %q after the sandbox was removed", n, dir)
	}
}

// replayCommand returns a command that prints lines line1..line<lines> on
// stdout (and err<i> on stderr for every 250th), stops after line<gateAt>
// until the file gate exists, and pauses briefly every 100 lines so its
// output arrives in many chunks; and the stdout and stderr it writes.
func replayCommand(lines, gateAt int, gate string) (command, stdout, stderr string) {
	command = fmt.Sprintf(`i=1
while [ $i -le %[1]d ]; do
	echo line$i
	if [ $((i %% 250)) -eq 0 ]; then echo err$i >&2; fi
	if [ $i -eq %[2]d ]; then while [ ! -e %[3]s ]; do sleep 0.02; done; fi
	if [ $((i %% 100)) -eq 0 ]; then sleep 0.02; fi
	i=$((i+1))
done
rm -f %[3]s`, lines, gateAt, gate)
	var out, errOut strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&out, "line%d\n", i)
		if i%250 == 0 {
			fmt.Fprintf(&errOut, "err%d\n", i)
		}
	}
	return command, out.String(), errOut.String()
}

// chunkLog collects the chunks an attach delivers, safe to read while the
// attach runs.
type chunkLog struct {
	mu     sync.Mutex
	chunks []runbox.Chunk
	stdout bytes.Buffer
	// reached is closed when stdout first contains want.
	want    string
	reached chan struct{}
}

func newChunkLog(want string) *chunkLog {
	return &chunkLog{want: want, reached: make(chan struct{})}
}

func (l *chunkLog) add(c runbox.Chunk) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.Data = append([]byte(nil), c.Data...)
	l.chunks = append(l.chunks, c)
	if c.Stream == runbox.Stdout {
		l.stdout.Write(c.Data)
		if l.want != "" && bytes.Contains(l.stdout.Bytes(), []byte(l.want)) {
			l.want = ""
			close(l.reached)
		}
	}
}

func (l *chunkLog) snapshot() []runbox.Chunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]runbox.Chunk(nil), l.chunks...)
}

// joinChunks concatenates, per stream, the data of the chunks with Seq at
// least from.
func joinChunks(chunks []runbox.Chunk, from uint64) (stdout, stderr string) {
	var out, errOut strings.Builder
	for _, c := range chunks {
		if c.Seq < from {
			continue
		}
		if c.Stream == runbox.Stderr {
			errOut.Write(c.Data)
		} else {
			out.Write(c.Data)
		}
	}
	return out.String(), errOut.String()
}

// checkSeqs reports chunks whose sequence numbers do not increase.
func checkSeqs(t *testing.T, what string, chunks []runbox.Chunk) {
	t.Helper()
	var last uint64
	for _, c := range chunks {
		if c.Seq <= last {
			t.Errorf("%s: chunk seq %d after %d: sequence numbers must increase", what, c.Seq, last)
			return
		}
		last = c.Seq
	}
}

// testAttachReplay: a detached exec (Start) is attached while it runs, from
// the start and from a sequence number N seen earlier, and again after it
// ended: the attach from the start replays from line 1 with every line
// exactly once, in order, and an attach from N delivers exactly the chunks
// from N on, the same bytes a full attach got from N, with nothing doubled
// or lost.
func testAttachReplay(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const lines, gateAt = 2000, 1000
	gate := tempPath("attach-gate")
	cmd, wantOut, wantErr := replayCommand(lines, gateAt, gate)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()

	id := newID("replay")
	// The command waits for the gate: if the case fails before opening it,
	// the timeout ends the exec.
	p, err := s.c.Start(ctx, cmd, client.WithID(id), client.WithTimeout(2*time.Minute))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	attach := func(l *chunkLog, opts ...client.ExecOption) <-chan outcome {
		done := make(chan outcome, 1)
		go func() {
			res, err := s.c.Attach(ctx, id, append(opts, client.WithOnChunk(l.add))...)
			done <- outcome{res, err}
		}()
		return done
	}

	// Attach from the start while the exec runs; it stops at the gate, so
	// it is still running when the attach has seen line1000.
	full := newChunkLog(fmt.Sprintf("\nline%d\n", gateAt))
	fullDone := attach(full)
	select {
	case <-full.reached:
	case o := <-fullDone:
		t.Fatalf("attach ended before the exec reached its gate: %s, %v", describe(o.res), o.err)
	case <-time.After(time.Minute):
		t.Fatalf("attach did not see line%d within a minute", gateAt)
	}

	// Attach from a sequence number seen so far, while the exec still runs.
	seen := full.snapshot()
	n1 := seen[len(seen)/2].Seq
	fromN1 := newChunkLog("")
	fromN1Done := attach(fromN1, client.WithFromSeq(n1))

	wantOK(t, s.exec(t, "touch "+gate), "")
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if !res.OK() || string(res.Stdout) != wantOut || string(res.Stderr) != wantErr {
		t.Errorf("detached exec's result: %s; want exit 0 and every line", describe(res))
	}

	check := func(what string, l *chunkLog, done <-chan outcome, from uint64) {
		t.Helper()
		o := <-done
		if o.err != nil {
			t.Errorf("%s: %v", what, o.err)
			return
		}
		if !o.res.OK() || o.res.StreamGaps != 0 {
			t.Errorf("%s: %s, %d gaps; want exit 0 and no gap", what, describe(o.res), o.res.StreamGaps)
		}
		chunks := l.snapshot()
		checkSeqs(t, what, chunks)
		if len(chunks) == 0 || chunks[0].Seq != max(from, 1) {
			t.Errorf("%s: first chunk %v; want seq %d", what, chunks[:min(len(chunks), 1)], max(from, 1))
		}
		gotOut, gotErr := joinChunks(chunks, 0)
		wantOut, wantErr := joinChunks(full.snapshot(), from)
		if gotOut != wantOut || gotErr != wantErr {
			t.Errorf("%s: %d stdout and %d stderr bytes, want the %d and %d a full attach got from seq %d",
				what, len(gotOut), len(gotErr), len(wantOut), len(wantErr), from)
		}
	}
	check("attach from the start, while running", full, fullDone, 0)
	gotOut, gotErr := joinChunks(full.snapshot(), 0)
	if gotOut != wantOut || gotErr != wantErr {
		t.Fatalf("attach from the start replayed stdout %q... (%d bytes), stderr %q; want line1..line%d once each (%d bytes), %q",
			clip([]byte(gotOut)), len(gotOut), gotErr, lines, len(wantOut), wantErr)
	}
	all := full.snapshot()
	t.Logf("output came in %d chunks (seq %d..%d); attached from seq %d while running",
		len(all), all[0].Seq, all[len(all)-1].Seq, n1)
	if len(all) < 3 {
		t.Fatalf("the output came in %d chunk(s): the case cannot pick a sequence number in the middle", len(all))
	}
	check(fmt.Sprintf("attach from seq %d (of %d), while running", n1, all[len(all)-1].Seq), fromN1, fromN1Done, n1)

	// After the end: from a chunk past the gate, and with the output also
	// written to a writer.
	n2 := all[len(all)*3/4].Seq
	fromN2 := newChunkLog("")
	var streamed bytes.Buffer
	check(fmt.Sprintf("attach from seq %d (of %d), after the end", n2, all[len(all)-1].Seq),
		fromN2, attach(fromN2, client.WithFromSeq(n2), client.WithStdout(&streamed)), n2)
	if want, _ := joinChunks(all, n2); streamed.String() != want {
		t.Errorf("attach from seq %d wrote %d bytes to its stdout writer, want %d", n2, streamed.Len(), len(want))
	}
}

// gitServer is a Python HTTP server that answers every request with 401
// and a Basic challenge, as a git host does for a private repository. It
// listens on 127.0.0.1:argv[1] and, once listening, writes its pid to the
// file argv[2].
const gitServer = `import http.server, os, sys

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="runbox"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
`

// testGitNoPrompt: git asked for a password by a server (401 on clone) fails
// at once, because runboxd sets GIT_TERMINAL_PROMPT=0 when the request does
// not set it, instead of waiting for a human. The server runs inside the
// sandbox, so the case needs git and python3 there (newToolsSandbox).
func testGitNoPrompt(t *testing.T, fx Fixture) {
	s := newToolsSandbox(t, fx)
	script := tempPath("git401") + ".py"
	ready := script + ".pid"
	wantOK(t, s.exec(t, "cat > "+script, client.WithStdin([]byte(gitServer))), "")

	// Start the server; a port someone else holds makes it exit at once,
	// and then another port is tried.
	var port int
	for attempt := 0; ; attempt++ {
		port = randPort()
		res := s.exec(t, fmt.Sprintf(`python3 %[1]s %[2]d %[3]s >/dev/null 2>%[3]s.log &
i=0
while [ ! -e %[3]s ]; do
	if ! kill -0 $! 2>/dev/null; then cat %[3]s.log >&2; rm -f %[3]s.log; exit 3; fi
	i=$((i+1)); if [ $i -gt %[4]d ]; then echo "no pid file after %[5]v" >&2; exit 4; fi
	sleep 0.05
done
rm -f %[3]s.log; echo ready`, script, port, ready, int(readyBound/(50*time.Millisecond)), readyBound))
		if res.OK() {
			break
		}
		if res.ExitCode != 3 || attempt == 2 {
			t.Fatalf("start the 401 server on port %d: %s", port, describe(res))
		}
	}
	t.Cleanup(func() {
		if !s.removed {
			s.exec(t, fmt.Sprintf("kill $(cat %[1]s); rm -f %[1]s %[2]s", ready, script))
		}
	})

	// No credentials anywhere: no system or global git config (and so no
	// credential helper), no askpass program. GIT_TERMINAL_PROMPT is left
	// to runboxd's default. Git answers the 401 by asking for a user name;
	// with prompts disabled it fails at once, saying so. Without that
	// default it would prompt on the exec's terminal if it had one and wait
	// for a human (the timeout, far above the fraction of a second git
	// needs, turns that into a failure instead of a hung suite), or fail
	// for want of a terminal with another message.
	dst := tempPath("git-clone")
	const timeout = time.Minute
	res := s.exec(t, fmt.Sprintf(noProxy+`unset GIT_ASKPASS SSH_ASKPASS; export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git clone http://127.0.0.1:%[1]d/repo.git %[2]s; st=$?; rm -rf %[2]s; exit $st`, port, dst),
		client.WithTimeout(timeout))
	t.Logf("git clone against a 401 server: exit %d after %v, stderr %q", res.ExitCode, res.Duration, res.Stderr)
	if res.TimedOut || res.Cancelled {
		t.Fatalf("git clone against a 401 server did not end within %v: it waited for a password: %s", timeout, describe(res))
	}
	if res.ExitCode == 0 {
		t.Errorf("git clone against a 401 server succeeded: %s", describe(res))
	}
	if !bytes.Contains(res.Stderr, []byte("terminal prompts disabled")) {
		t.Errorf("git clone stderr %q; want git's \"terminal prompts disabled\" (GIT_TERMINAL_PROMPT=0 in effect)", res.Stderr)
	}
}

// testSpillThroughClient: 5 MiB of output with 16 KiB head and tail limits
// gives a result with the exact head and tail, the exact dropped count and
// a spill file, and that file, read back through a later exec, holds the
// whole output byte for byte.
func testSpillThroughClient(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total, head, tail = 5 << 20, 16 << 10, 16 << 10
	// seq's decimal lines: every offset is known, and a lost, doubled or
	// moved block shows as a wrong number.
	var full bytes.Buffer
	for i := 1; full.Len() < total; i++ {
		fmt.Fprintf(&full, "%d\n", i)
	}
	want := full.Bytes()[:total]

	res := s.exec(t, fmt.Sprintf("seq 1 1000000 | head -c %d", total), client.WithOutputLimits(head, tail))
	if !res.OK() {
		t.Fatalf("5 MiB of seq: %s", describe(res))
	}
	sameBytes(t, "result stdout (16 KiB head + 16 KiB tail)", res.Stdout, append(want[:head:head], want[total-tail:]...))
	if res.StdoutBytes != total || res.StdoutDropped != total-head-tail {
		t.Errorf("stdout bytes %d dropped %d; want %d, %d", res.StdoutBytes, res.StdoutDropped, total, total-head-tail)
	}
	if res.StdoutSpill == "" || res.SpillTruncated {
		t.Fatalf("stdout spill %q, truncated %v; want a spill file with the whole output", res.StdoutSpill, res.SpillTruncated)
	}
	if res.StderrSpill != "" {
		t.Errorf("stderr spilled without output: %q", res.StderrSpill)
	}

	var back bytes.Buffer
	read := s.exec(t, "cat -- '"+strings.ReplaceAll(res.StdoutSpill, "'", `'\''`)+"'",
		client.WithStdout(&back), client.WithSpill(runbox.SpillNever))
	if !read.OK() || read.StdoutBytes != total || read.StreamGaps != 0 {
		t.Fatalf("cat %s: %s, %d bytes, %d gaps; want exit 0 and %d bytes", res.StdoutSpill, describe(read), read.StdoutBytes, read.StreamGaps, total)
	}
	sameBytes(t, "spill file "+res.StdoutSpill, back.Bytes(), want)
}
