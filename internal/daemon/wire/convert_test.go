package wire

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/wiretime"
)

// assertFilled fails the test for every field of v (recursively) that holds
// its zero value, so a field added to a type but not to the fixtures below —
// and therefore possibly not to the converters — fails loudly.
func assertFilled(t *testing.T, v any) {
	t.Helper()
	var walk func(path string, rv reflect.Value)
	walk = func(path string, rv reflect.Value) {
		if rv.IsZero() {
			t.Errorf("%s is zero: fill it in the fixture (and convert it)", path)
			return
		}
		switch rv.Kind() {
		case reflect.Pointer:
			walk(path, rv.Elem())
		case reflect.Struct:
			if rv.Type() == reflect.TypeFor[time.Time]() {
				return
			}
			for i := range rv.NumField() {
				f := rv.Type().Field(i)
				if f.IsExported() && f.Tag.Get("wire") != "-" {
					walk(path+"."+f.Name, rv.Field(i))
				}
			}
		case reflect.Slice:
			if rv.Type().Elem().Kind() != reflect.Uint8 {
				for i := range rv.Len() {
					walk(fmt.Sprintf("%s[%d]", path, i), rv.Index(i))
				}
			}
		}
	}
	rv := reflect.ValueOf(v)
	walk(rv.Type().String(), rv)
}

// assertProtoFilled fails for every field of m (recursively) left unset.
func assertProtoFilled(t *testing.T, m proto.Message) {
	t.Helper()
	var walk func(path string, m protoreflect.Message)
	walk = func(path string, m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			p := path + "." + string(fd.Name())
			if strings.HasSuffix(p, "_raw") {
				continue // the bytes alternative of a string field: TestRawFields
			}
			if !m.Has(fd) {
				t.Errorf("%s is unset: fill it in the fixture (and convert it)", p)
				continue
			}
			if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
				walk(p, m.Get(fd).Message())
			}
		}
	}
	walk(string(m.ProtoReflect().Descriptor().FullName()), m.ProtoReflect())
}

func fullResult() runbox.Result {
	return runbox.Result{
		ID:                "exec-1",
		ExitCode:          143,
		Signal:            "TERM",
		TimedOut:          true,
		Cancelled:         true,
		IdleTimedOut:      true,
		Duration:          1234567 * time.Microsecond,
		Stdout:            []byte("out\xff"),
		Stderr:            []byte("err"),
		StdoutDropped:     1,
		StderrDropped:     2,
		StdoutBytes:       3,
		StderrBytes:       4,
		Killed:            5,
		Survivors:         6,
		Pid:               7,
		StdoutSpill:       "/tmp/out",
		StderrSpill:       "/tmp/err",
		SpillTruncated:    true,
		StdoutSpillOffset: 8,
		StderrSpillOffset: 9,
		Cwd:               "/work",
		CwdFallbackFrom:   "/work/gone",
		OOMKilled:         true,
		LeftRunning:       2,
	}
}

func TestRoundTripDomain(t *testing.T) {
	spec := runbox.ExecSpec{
		ID:                 "exec-1",
		Command:            "echo hi",
		Argv:               []string{"echo", "hi"},
		Login:              true,
		Env:                map[string]string{"A": "1"},
		Cwd:                "/tmp",
		Stdin:              []byte("in"),
		StdinStream:        true,
		Timeout:            3 * time.Second,
		IdleTimeout:        4 * time.Second,
		Grace:              5 * time.Second,
		HeadBytes:          10,
		TailBytes:          20,
		Session:            "s1",
		Spill:              runbox.SpillNever,
		PTY:                &runbox.PTYSize{Rows: 24, Cols: 80},
		CancelOnDisconnect: true, KillLeftovers: true,
	}
	res := fullResult()
	info := runbox.ExecInfo{
		ID:            "exec-1",
		Pid:           42,
		State:         runbox.ExecExited,
		Command:       "echo hi",
		StartedAt:     time.UnixMilli(1700000000123),
		Result:        &res,
		LiveProcesses: 2,
	}
	dinfo := runbox.DaemonInfo{
		Version:    "v1.2.3",
		Pid:        1,
		CgroupMode: "cgroup2",
		Running:    2,
		Retained:   3,
		Total:      4,
		StartedAt:  time.UnixMilli(1700000000456),
		Goroutines: 5,
		OpenFDs:    6,
		Paused:     true,
		Holds:      2,
	}
	chunk := runbox.Chunk{Stream: runbox.Stderr, Seq: 9, Data: []byte("x")}
	gap := runbox.OutputGap{FromSeq: 3, ToSeq: 7, Bytes: 1234}

	cases := []struct {
		name string
		in   any
		out  any
	}{
		{"ExecSpec", spec, specFromProto(t, SpecToProto(spec))},
		{"Result", res, ResultFromProto(ResultToProto(res))},
		{"ExecInfo", info, ExecInfoFromProto(ExecInfoToProto(info))},
		{"DaemonInfo", dinfo, DaemonInfoFromProto(DaemonInfoToProto(dinfo))},
		{"Chunk", chunk, ChunkFromProto(ChunkToProto(chunk))},
		{"OutputGap", gap, GapFromProto(GapToProto(gap))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertFilled(t, c.in)
			if !reflect.DeepEqual(c.in, c.out) {
				t.Errorf("round trip changed it:\n in: %+v\nout: %+v", c.in, c.out)
			}
		})
	}
}

func TestRoundTripProto(t *testing.T) {
	spec := &runboxv1.ExecSpec{
		Id: "exec-1", Command: "echo hi", Argv: []string{"echo"}, Login: true,
		Env: map[string]string{"A": "1"}, Cwd: "/", Stdin: []byte("in"), StdinStream: true,
		TimeoutMs: 1, IdleTimeoutMs: 2, GraceMs: 3, HeadBytes: 4, TailBytes: 5,
		Session: "s1", Spill: runboxv1.SpillMode_SPILL_MODE_ALWAYS,
		Pty:                &runboxv1.PtySize{Rows: 30, Cols: 100},
		CancelOnDisconnect: true, KillLeftovers: true,
	}
	res := &runboxv1.Result{
		Id: "exec-1", ExitCode: 137, Signal: "KILL", TimedOut: true, Cancelled: true,
		IdleTimedOut: true, DurationUs: 99, Stdout: []byte("o"), Stderr: []byte("e"),
		StdoutDropped: 1, StderrDropped: 2, StdoutBytes: 3, StderrBytes: 4, Killed: 5,
		Survivors: 6, Pid: 7, StdoutSpill: "/o", StderrSpill: "/e", SpillTruncated: true,
		Cwd: "/w", CwdFallbackFrom: "/w/x", OomKilled: true, LeftRunning: 2,
		StdoutSpillOffset: 8, StderrSpillOffset: 9,
	}
	info := &runboxv1.ExecInfo{
		Id: "exec-1", Pid: 7, State: runboxv1.ExecState_EXEC_STATE_STOPPING,
		Command: "c", StartedAtUnixMs: 1700000000123, Result: res, LiveProcesses: 3,
	}
	dinfo := &runboxv1.InfoResponse{
		Version: "v", Pid: 1, CgroupMode: "proc", Running: 2, Retained: 3, Total: 4,
		StartedAtUnixMs: 1700000000456, Goroutines: 5, OpenFds: 6, Paused: true, Holds: 2,
	}
	out := &runboxv1.Output{Stream: runboxv1.Stream_STREAM_STDOUT, Seq: 3, Data: []byte("d")}

	cases := []struct {
		name    string
		in, out proto.Message
	}{
		{"ExecSpec", spec, SpecToProto(specFromProto(t, spec))},
		{"Result", res, ResultToProto(ResultFromProto(res))},
		{"ExecInfo", info, ExecInfoToProto(ExecInfoFromProto(info))},
		{"InfoResponse", dinfo, DaemonInfoToProto(DaemonInfoFromProto(dinfo))},
		{"Output", out, ChunkToProto(ChunkFromProto(out))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assertProtoFilled(t, c.in)
			if !proto.Equal(c.in, c.out) {
				t.Errorf("round trip changed it:\n in: %v\nout: %v", c.in, c.out)
			}
		})
	}
}

func TestEnumsRoundTrip(t *testing.T) {
	for s := runbox.StreamUnspecified; s <= runbox.Stderr; s++ {
		if got := StreamFromProto(StreamToProto(s)); got != s {
			t.Errorf("stream %v came back as %v", s, got)
		}
	}
	if n := len(runboxv1.Stream_name); n != 3 {
		t.Errorf("runbox.v1.Stream has %d values; update StreamToProto/FromProto", n)
	}
	for s := runbox.ExecStateUnspecified; s <= runbox.ExecExited; s++ {
		if got := StateFromProto(StateToProto(s)); got != s {
			t.Errorf("state %v came back as %v", s, got)
		}
	}
	for m := runbox.SpillAuto; m <= runbox.SpillUnsent; m++ {
		if got := SpillFromProto(SpillToProto(m)); got != m {
			t.Errorf("spill mode %v came back as %v", m, got)
		}
	}
	if n := len(runboxv1.SpillMode_name); n != 5 {
		t.Errorf("runbox.v1.SpillMode has %d values; update SpillToProto/FromProto", n)
	}
	if n := len(runboxv1.ExecState_name); n != 5 {
		t.Errorf("runbox.v1.ExecState has %d values; update StateToProto/FromProto", n)
	}
}

func TestZeroValues(t *testing.T) {
	// Zero times and nil results stay zero and nil across the wire.
	if got := ExecInfoFromProto(ExecInfoToProto(runbox.ExecInfo{})); !reflect.DeepEqual(got, runbox.ExecInfo{}) {
		t.Errorf("zero ExecInfo came back as %+v", got)
	}
	if got := DaemonInfoFromProto(DaemonInfoToProto(runbox.DaemonInfo{})); !reflect.DeepEqual(got, runbox.DaemonInfo{}) {
		t.Errorf("zero DaemonInfo came back as %+v", got)
	}
	if got := specFromProto(t, nil); !reflect.DeepEqual(got, runbox.ExecSpec{}) {
		t.Errorf("nil spec came back as %+v", got)
	}
}

func TestDurationToMsRoundsUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Microsecond, 1},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{3 * time.Second, 3000},
		{-time.Millisecond, -1},
	} {
		if got := wiretime.DurationToMs(c.d); got != c.want {
			t.Errorf("DurationToMs(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestErrorsRoundTrip(t *testing.T) {
	for _, s := range sentinels {
		wrapped := fmt.Errorf("start exec x: %w", s.err)
		ce := ToConnectError(wrapped)
		if got := connect.CodeOf(ce); got != s.code {
			t.Errorf("%v: code %v, want %v", s.err, got, s.code)
		}
		got, msg, tagged := FromConnectError(ce)
		if !tagged || got != s.err {
			t.Errorf("%v came back as %v (tagged %v)", s.err, got, tagged)
		}
		if msg != wrapped.Error() {
			t.Errorf("%v: message %q, want %q", s.err, msg, wrapped.Error())
		}
	}

	got, _, tagged := FromConnectError(ToConnectError(errors.New("boom")))
	if !tagged || got != nil {
		t.Errorf("untyped error: sentinel %v tagged %v, want nil, true", got, tagged)
	}
	if _, _, tagged := FromConnectError(connect.NewError(connect.CodeUnavailable, errors.New("dial"))); tagged {
		t.Error("a transport error must not look tagged")
	}
	if _, _, tagged := FromConnectError(ToConnectError(context.Canceled)); tagged {
		t.Error("a context error must not be tagged")
	}
}

// TestEverySentinelHasATag parses the root package's errors.go so that a
// sentinel added there without a wire tag fails here, instead of reaching
// clients as an untyped internal error.
func TestEverySentinelHasATag(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "..", "errors.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Sentinels only the client or providers produce: never on the wire.
	// (ErrSandboxLost, ErrSandboxNotFound and ErrUnauthenticated are on the
	// wire from runbox serve; runboxd itself never sends them.)
	notOnWire := map[string]bool{"ErrOutputLost": true, "ErrProviderUnavailable": true}
	tagged := map[string]bool{}
	for _, s := range sentinels {
		for name, err := range map[string]error{
			"ErrCancelled": runbox.ErrCancelled, "ErrExecNotFound": runbox.ErrExecNotFound,
			"ErrInvalidSpec": runbox.ErrInvalidSpec, "ErrSpawn": runbox.ErrSpawn,
			"ErrNotRunning": runbox.ErrNotRunning, "ErrSessionNotFound": runbox.ErrSessionNotFound,
			"ErrFileNotFound": runbox.ErrFileNotFound, "ErrPermission": runbox.ErrPermission,
			"ErrIsDirectory": runbox.ErrIsDirectory, "ErrNotDirectory": runbox.ErrNotDirectory,
			"ErrEscapesRoot": runbox.ErrEscapesRoot, "ErrInvalidPath": runbox.ErrInvalidPath,
			"ErrTooLarge": runbox.ErrTooLarge, "ErrExecIDConflict": runbox.ErrExecIDConflict,
			"ErrSandboxNotFound": runbox.ErrSandboxNotFound, "ErrSandboxLost": runbox.ErrSandboxLost,
			"ErrUnauthenticated": runbox.ErrUnauthenticated, "ErrQuotaExceeded": runbox.ErrQuotaExceeded,
			"ErrSandboxPaused": runbox.ErrSandboxPaused, "ErrUnsupported": runbox.ErrUnsupported,
			"ErrNameInUse": runbox.ErrNameInUse,
		} {
			if s.err == err {
				tagged[name] = true
			}
		}
	}
	// They travel under ErrSpawn's tag, told apart by refine
	// (TestSpawnRefined).
	tagged["ErrCommandNotFound"], tagged["ErrCommandNotExecutable"] = true, true
	// It travels under ErrInvalidSpec's (TestUnsafeWorkdirRefined).
	tagged["ErrUnsafeWorkdir"] = true
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			for _, name := range spec.(*ast.ValueSpec).Names {
				if strings.HasPrefix(name.Name, "Err") && !notOnWire[name.Name] && !tagged[name.Name] {
					t.Errorf("runbox.%s has no wire tag: add it to sentinels in errors.go", name.Name)
				}
			}
		}
	}
}

func TestSessionRoundTrip(t *testing.T) {
	in := runbox.SessionInfo{Name: "n", Cwd: "/c", EnvVars: 3, Execs: 4}
	assertFilled(t, in)
	p := SessionToProto(in)
	assertProtoFilled(t, p)
	if out := SessionFromProto(p); out != in {
		t.Errorf("round trip: %+v != %+v", out, in)
	}
}

// TestFileInfoRoundTrip fills every field of a FileInfo of each type.
func TestFileInfoRoundTrip(t *testing.T) {
	for _, fi := range []runbox.FileInfo{
		{Path: "a/b c/\xffé", Mode: 0o4755 | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky, Size: 12,
			ModTime: time.Unix(1700000000, 123456789), SHA256: []byte{1, 2, 3}},
		{Path: "d", Mode: fs.ModeDir | 0o700, ModTime: time.Unix(1, 2)},
		{Path: "l", Mode: fs.ModeSymlink | 0o777, Size: 4, LinkTarget: "/etc", ModTime: time.Unix(3, 4)},
		{Path: "p", Mode: fs.ModeIrregular | 0o600, ModTime: time.Unix(5, 6)},
	} {
		fi.Mode &^= 0o7000 // chmod-style bits live in the fs.Mode* flags
		got := FileInfoFromProto(FileInfoToProto(fi))
		if !reflect.DeepEqual(got, fi) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, fi)
		}
	}
}

func specFromProto(t *testing.T, p *runboxv1.ExecSpec) runbox.ExecSpec {
	t.Helper()
	s, err := SpecFromProto(p)
	if err != nil {
		t.Fatalf("SpecFromProto: %v", err)
	}
	return s
}

// TestRawFields: values that are not valid UTF-8 (and some that are) cross
// the wire, through a real proto encoding, byte for byte.
func TestRawFields(t *testing.T) {
	bad := "caf\xe9 \xff\xfe\x80 \x01\x7f"
	for _, spec := range []runbox.ExecSpec{
		{Command: "printf %s " + bad, Cwd: "/tmp/" + bad, Env: map[string]string{"OK": "é", "V": bad}},
		{Argv: []string{"printf", "%s", bad, ""}, Env: map[string]string{bad: "x"}},
		{Command: "echo é", Argv: nil, Env: map[string]string{"A": "b"}, Cwd: "/é"},
	} {
		b, err := proto.Marshal(SpecToProto(spec))
		if err != nil {
			t.Fatalf("marshal %+v: %v", spec, err)
		}
		var p runboxv1.ExecSpec
		if err := proto.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if got := specFromProto(t, &p); !reflect.DeepEqual(got, spec) {
			t.Errorf("round trip:\n got %#v\nwant %#v", got, spec)
		}
	}
	res := runbox.Result{Cwd: "/w/" + bad, CwdFallbackFrom: "/w/" + bad + "/gone"}
	b, err := proto.Marshal(ResultToProto(res))
	if err != nil {
		t.Fatal(err)
	}
	var pr runboxv1.Result
	if err := proto.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	if got := ResultFromProto(&pr); got.Cwd != res.Cwd || got.CwdFallbackFrom != res.CwdFallbackFrom {
		t.Errorf("result cwd %q, %q; want %q, %q", got.Cwd, got.CwdFallbackFrom, res.Cwd, res.CwdFallbackFrom)
	}
	info := ExecInfoFromProto(ExecInfoToProto(runbox.ExecInfo{Command: bad}))
	if info.Command != bad {
		t.Errorf("exec info command %q", info.Command)
	}
	if ss := SessionFromProto(SessionToProto(runbox.SessionInfo{Cwd: bad})); ss.Cwd != bad {
		t.Errorf("session cwd %q", ss.Cwd)
	}
}

// TestRawAndTextBothSet: a request with both alternatives of a field is
// refused as an invalid spec.
func TestRawAndTextBothSet(t *testing.T) {
	for name, p := range map[string]*runboxv1.ExecSpec{
		"command": {Command: "a", CommandRaw: []byte("b")},
		"argv":    {Argv: []string{"a"}, ArgvRaw: [][]byte{[]byte("b")}},
		"env":     {Env: map[string]string{"A": "1"}, EnvRaw: []*runboxv1.EnvVar{{Name: []byte("B")}}},
		"cwd":     {Cwd: "/", CwdRaw: []byte("/x")},
	} {
		if _, err := SpecFromProto(p); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("%s and %s_raw both set: %v; want ErrInvalidSpec", name, name, err)
		}
	}
}

// TestSpawnRefined: the ErrSpawn of a program that is missing or not
// executable travels under the spawn tag every client knows, and comes
// back as runbox.ErrCommandNotFound or runbox.ErrCommandNotExecutable,
// still runbox.ErrSpawn.
// TestUnsafeWorkdirRefined: a refused workdir (internal/owndir's
// message) reaches the client as ErrUnsafeWorkdir and ErrInvalidSpec.
func TestUnsafeWorkdirRefined(t *testing.T) {
	for _, want := range []error{runbox.ErrUnsafeWorkdir, runbox.ErrInvalidSpec} {
		sent := ToConnectError(fmt.Errorf("workdir /tmp is not yours alone (mode 1777: sticky): use a directory of your own: %w: %w", want, runbox.ErrInvalidSpec))
		if ce, _ := errors.AsType[*connect.Error](sent); ce == nil || ce.Code() != connect.CodeInvalidArgument || ce.Meta().Get(ErrorKey) != TagInvalidSpec {
			t.Errorf("sent %v as %v, want invalid_argument tagged %s", want, sent, TagInvalidSpec)
		}
		got, _, tagged := FromConnectError(sent)
		if !tagged || got != want || !errors.Is(got, runbox.ErrInvalidSpec) {
			t.Errorf("sent %v: got %v (tagged %v); want %v, an ErrInvalidSpec", want, got, tagged, want)
		}
	}
}

func TestSpawnRefined(t *testing.T) {
	for _, want := range []error{runbox.ErrCommandNotFound, runbox.ErrCommandNotExecutable, runbox.ErrSpawn} {
		sent := ToConnectError(fmt.Errorf("start exec x: %w: prog: boom", want))
		got, _, tagged := FromConnectError(sent)
		if !tagged || got != want || !errors.Is(got, runbox.ErrSpawn) {
			t.Errorf("sent %v: got %v (tagged %v); want %v, an ErrSpawn", want, got, tagged, want)
		}
	}
}
