package providertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// inputCases: no input may cost a sandbox (issue 13). Any NUL-free bytes run
// and round-trip; an oversize request is refused with an error naming the
// limit, and leaves runboxd's memory and service as they were; an exec id
// reused with another spec is refused; a spill past its budget says so.
func inputCases() []testCase {
	return []testCase{
		{name: "InputBytes", run: testInputBytes},
		{name: "InputOversize", run: testInputOversize},
		{name: "InputOversizeRaw", run: testInputOversizeRaw, heavy: true},
		{name: "ExecIDConflict", run: testExecIDConflict},
		{name: "SpillTruncated", run: testSpillTruncated},
	}
}

// allBytes is every byte value but NUL, in order: invalid UTF-8 (0x80-0xff
// alone), control characters and quotes included.
func allBytes() string {
	b := make([]byte, 0, 255)
	for i := 1; i < 256; i++ {
		b = append(b, byte(i))
	}
	return string(b)
}

// shellQuote quotes s for a POSIX shell: inside single quotes every byte
// but the quote itself is literal.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// testInputBytes: a command, an argument, an environment variable (name
// and value), a working directory and a session's directory holding bytes
// that are not UTF-8 reach the command exactly and come back exactly; this
// was "sandbox lost: marshal message: string field contains invalid UTF-8".
func testInputBytes(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	all := allBytes()
	run := func(what string, spec runbox.ExecSpec, opts ...client.ExecOption) runbox.Result {
		t.Helper()
		res, err := s.c.ExecSpec(ctx, spec, opts...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("%s: %s", what, describe(res))
		}
		return res
	}

	cmdID := newID("bytes")
	res := run("command", runbox.ExecSpec{Command: "printf '%s' " + shellQuote(all)}, client.WithID(cmdID))
	sameBytes(t, "printf of a command holding every NUL-free byte", res.Stdout, []byte(all))

	res = run("argument", runbox.ExecSpec{Argv: []string{"printf", "%s", all, "\xff"}})
	sameBytes(t, "printf of an argument holding every NUL-free byte", res.Stdout, []byte(all+"\xff"))

	res = run("env value", runbox.ExecSpec{Command: `printf '%s' "$RUNBOX_BYTES"`}, client.WithEnv("RUNBOX_BYTES", all))
	sameBytes(t, "printf of an env value holding every NUL-free byte", res.Stdout, []byte(all))

	res = run("env name", runbox.ExecSpec{Argv: []string{"env"}}, client.WithEnv("RUNBOX_\xff\xfe", "v\x80"))
	if !bytes.Contains(res.Stdout, []byte("\nRUNBOX_\xff\xfe=v\x80\n")) && !bytes.HasPrefix(res.Stdout, []byte("RUNBOX_\xff\xfe=v\x80\n")) {
		t.Errorf("env does not list RUNBOX_\\xff\\xfe=v\\x80: %q", clip(res.Stdout))
	}

	dir := tempPath("cwd") + "-\xff\xfe\x80'\"$\x01"
	run("mkdir", runbox.ExecSpec{Argv: []string{"mkdir", "-p", dir}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = s.c.ExecArgv(ctx, []string{"rm", "-rf", dir})
	})
	res = run("cwd", runbox.ExecSpec{Argv: []string{"pwd"}}, client.WithCwd(dir))
	sameBytes(t, "pwd in a directory whose name is not UTF-8", res.Stdout, []byte(dir+"\n"))

	session := newID("sess")
	res = run("session cd", runbox.ExecSpec{Command: "cd " + shellQuote(dir)}, client.WithSession(session))
	if res.Cwd != dir {
		t.Errorf("session exec that cd'ed to %q reports cwd %q", dir, res.Cwd)
	}
	sessions, err := s.c.Sessions(ctx)
	if err != nil {
		t.Fatalf("sessions: %v", err)
	}
	if i := slices.IndexFunc(sessions, func(ss runbox.SessionInfo) bool { return ss.Name == session }); i < 0 || sessions[i].Cwd != dir {
		t.Errorf("sessions %+v: want %s in %q", sessions, session, dir)
	}
	res = run("session pwd", runbox.ExecSpec{Argv: []string{"pwd"}}, client.WithSession(session))
	sameBytes(t, "pwd in the session", res.Stdout, []byte(dir+"\n"))

	infos, err := s.c.List(ctx)
	if err != nil {
		t.Fatalf("list with a retained exec whose command is not UTF-8: %v", err)
	}
	if i := slices.IndexFunc(infos, func(e runbox.ExecInfo) bool { return e.ID == cmdID }); i < 0 || infos[i].Command != "printf '%s' "+shellQuote(all) {
		t.Errorf("list does not give exec %s its command back byte for byte", cmdID)
	}

	// A NUL byte cannot reach a command: refused before sending, as the
	// caller's mistake.
	for what, spec := range map[string]runbox.ExecSpec{
		"command":   {Command: "echo a\x00b"},
		"argument":  {Argv: []string{"echo", "a\x00b"}},
		"env value": {Command: "true", Env: map[string]string{"A": "a\x00b"}},
	} {
		_, err := s.c.ExecSpec(ctx, spec)
		if !errors.Is(err, runbox.ErrInvalidSpec) || errors.Is(err, runbox.ErrSandboxLost) {
			t.Errorf("NUL byte in the %s: %v; want ErrInvalidSpec", what, err)
		}
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
}

// testInputOversize: a command, argv, environment or stdin over its limit
// is refused by the client before sending, with an error naming the limit
// and the size, never ErrSandboxLost; stdin written in one large call is
// split into messages within the limit; the sandbox serves the next exec.
func testInputOversize(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	big := strings.Repeat("x", runbox.MaxCommandBytes+1)
	for _, c := range []struct {
		what, limit string
		spec        runbox.ExecSpec
	}{
		{"command", "runbox.MaxCommandBytes", runbox.ExecSpec{Command: "echo " + big}},
		{"argv", "runbox.MaxArgvBytes", runbox.ExecSpec{Argv: []string{"echo", big}}},
		{"env", "runbox.MaxEnvBytes", runbox.ExecSpec{Command: "true", Env: map[string]string{"BIG": big}}},
		{"stdin", "runbox.MaxStdinBytes", runbox.ExecSpec{Command: "cat", Stdin: bytes.Repeat([]byte("y"), runbox.MaxStdinBytes+1)}},
	} {
		_, err := s.c.ExecSpec(ctx, c.spec)
		se, ok := errors.AsType[*runbox.SizeError](err)
		switch {
		case errors.Is(err, runbox.ErrSandboxLost):
			t.Errorf("oversize %s: %v: a healthy sandbox reported lost", c.what, err)
		case !errors.Is(err, runbox.ErrTooLarge) || !ok:
			t.Errorf("oversize %s: %v; want a *runbox.SizeError (ErrTooLarge)", c.what, err)
		case !strings.Contains(err.Error(), c.limit) || se.Size <= se.Limit:
			t.Errorf("oversize %s: %q does not name %s and the size", c.what, err, c.limit)
		}
	}
	// Stdin streamed in one write larger than a message may carry.
	p, err := s.c.Start(ctx, "wc -c", client.WithStdinStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(ctx, bytes.Repeat([]byte("z"), 3*runbox.MaxStdinChunkBytes+5)); err != nil {
		t.Fatalf("write stdin of 3 MiB: %v", err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "3145733" {
		t.Errorf("wc -c of 3 MiB+5 written in one call: %q", got)
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
}

// rawClient is a connect client to the sandbox's runboxd without the
// client package's checks: what a buggy or hostile caller could send.
func rawClient(t *testing.T, s *sandbox) runboxv1connect.RunboxServiceClient {
	t.Helper()
	dial := s.fx.Provider.Dialer(s.sb)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:   &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
	}
	t.Cleanup(tr.CloseIdleConnections)
	return runboxv1connect.NewRunboxServiceClient(&http.Client{Transport: tr}, "http://runboxd")
}

// rawRun sends spec as a Run and returns the error the stream ends with.
func rawRun(ctx context.Context, rc runboxv1connect.RunboxServiceClient, spec *runboxv1.ExecSpec) error {
	stream, err := rc.Run(ctx, connect.NewRequest(&runboxv1.RunRequest{Spec: spec}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
	}
	return stream.Err()
}

// testInputOversizeRaw: requests the client would refuse, sent anyway. A
// 100 MB message is refused from its length prefix (it was read into
// runboxd's memory, which stayed at 459 MB); one within the message bound
// but over a field's limit gets the same size error the client gives; both
// alternatives of a field set is an invalid spec. runboxd's resident memory
// returns under twice its idle size and it serves the next exec.
func testInputOversizeRaw(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	wantOK(t, s.exec(t, "echo warm"), "warm\n")
	var idle int64
	if fx.DaemonRSS != nil {
		idle = fx.DaemonRSS(t, s.sb)
	}
	rc := rawClient(t, s)

	huge := strings.Repeat("h", 100<<20)
	err := rawRun(ctx, rc, &runboxv1.ExecSpec{Id: newID("huge"), Command: huge})
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("100 MB command: %v; want ResourceExhausted", err)
	}
	huge = ""

	err = rawRun(ctx, rc, &runboxv1.ExecSpec{Id: newID("big"), Command: strings.Repeat("b", runbox.MaxCommandBytes+1)})
	if sentinel, msg, _ := wire.FromConnectError(err); sentinel != runbox.ErrTooLarge || !strings.Contains(msg, "runbox.MaxCommandBytes") {
		t.Errorf("command over MaxCommandBytes: %v; want too-large naming runbox.MaxCommandBytes", err)
	}
	err = rawRun(ctx, rc, &runboxv1.ExecSpec{Id: newID("both"), Command: "true", CommandRaw: []byte("false")})
	if sentinel, _, _ := wire.FromConnectError(err); sentinel != runbox.ErrInvalidSpec {
		t.Errorf("command and command_raw both set: %v; want invalid-spec", err)
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
	if fx.DaemonRSS == nil {
		t.Log("fixture has no DaemonRSS: memory not checked")
		return
	}
	var rss int64
	if !poll(settleBound, func() bool { rss = fx.DaemonRSS(t, s.sb); return rss < 2*idle }) {
		t.Errorf("runboxd resident %d MB after the oversize requests, idle %d MB: want under twice idle", rss>>20, idle>>20)
	}
	t.Logf("runboxd resident: idle %d KiB, after %d KiB", idle>>10, rss>>10)
}

// testExecIDConflict: an exec id is an idempotency key. The same id with the
// same spec attaches (the command runs once); with another command, or
// another environment, it is refused with ErrExecIDConflict naming the id,
// where it used to return the first exec's output as if it were the second's.
func testExecIDConflict(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	id := newID("idem")
	file := tempPath("idem")
	command := "echo run >> " + file + "; cat " + file
	first, err := s.c.Exec(ctx, command, client.WithID(id), client.WithEnv("A", "1"))
	if err != nil || string(first.Stdout) != "run\n" {
		t.Fatalf("first exec: %v %s", err, describe(first))
	}
	for what, opts := range map[string][]client.ExecOption{
		"command": {client.WithID(id), client.WithEnv("A", "1")},
		"env":     {client.WithID(id), client.WithEnv("A", "2")},
	} {
		c := command
		if what == "command" {
			c = "echo other"
		}
		res, err := s.c.Exec(ctx, c, opts...)
		switch {
		case errors.Is(err, runbox.ErrSandboxLost):
			t.Errorf("same id, different %s: %v: a healthy sandbox reported lost", what, err)
		case !errors.Is(err, runbox.ErrExecIDConflict) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), what):
			t.Errorf("same id, different %s: %v (%s); want ErrExecIDConflict naming %s and what differs", what, err, describe(res), id)
		}
	}
	again, err := s.c.Exec(ctx, command, client.WithID(id), client.WithEnv("A", "1"))
	if err != nil || string(again.Stdout) != "run\n" || again.Pid != first.Pid {
		t.Errorf("same id, same spec: %v %s (pid %d, first %d); want the first exec's result", err, describe(again), again.Pid, first.Pid)
	}
	res := s.exec(t, "cat "+file+"; rm -f "+file)
	wantOK(t, res, "run\n") // the command ran once
}

// testSpillTruncated: with a spill budget of 1 MiB, a 3 MiB stream's spill
// file holds exactly its first MiB and the result says SpillTruncated.
func testSpillTruncated(t *testing.T, fx Fixture) {
	const budget = 1 << 20
	s := newSandbox(t, fx, "--spill-bytes=1048576")
	cmd, seed, want := binaryOutput(3 << 20)
	res := s.exec(t, cmd, client.WithStdin(seed))
	if res.ExitCode != 0 || res.StdoutBytes != int64(len(want)) {
		t.Fatalf("flood: %s, %d bytes", describe(res), res.StdoutBytes)
	}
	if !res.SpillTruncated || res.StdoutSpill == "" {
		t.Fatalf("3 MiB past a 1 MiB spill budget: spill %q truncated %v; want a truncated spill file", res.StdoutSpill, res.SpillTruncated)
	}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	r, _, err := s.c.ReadFile(ctx, res.StdoutSpill)
	if err != nil {
		t.Fatalf("read spill file %s: %v", res.StdoutSpill, err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, "the truncated spill file", got, want[:budget])

	small := s.exec(t, "echo hi", client.WithSpill(runbox.SpillAlways))
	if small.SpillTruncated {
		t.Errorf("a small spill reports truncated")
	}
}
