package frontrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// TestFieldCountsMatchTheProto: every message this package converts has
// as many fields in the proto as convert.go handles. The generated types
// gain a new field by themselves; this fails until convert.go (and the
// front) handle it too.
func TestFieldCountsMatchTheProto(t *testing.T) {
	for _, c := range []struct {
		msg  proto.Message
		want int
	}{
		{&runboxv1.ExecSpec{}, 22},
		{&runboxv1.RunRequest{}, 2},
		{&runboxv1.CancelRequest{}, 2},
		{&runboxv1.AttachRequest{}, 3},
		{&runboxv1.ExecEvent{}, 4},
		{&runboxv1.Started{}, 3},
		{&runboxv1.Output{}, 3},
		{&runboxv1.Gap{}, 3},
		{&runboxv1.Exited{}, 1},
		{&runboxv1.Result{}, 27},
	} {
		d := c.msg.ProtoReflect().Descriptor()
		if n := d.Fields().Len(); n != c.want {
			t.Errorf("%s has %d fields in the proto, convert.go handles %d: teach internal/frontrpc (and internal/front) the new ones", d.FullName(), n, c.want)
		}
		for i := range d.Fields().Len() {
			if f := d.Fields().Get(i); int(f.Number()) > c.want {
				t.Errorf("%s.%s is field %d, beyond the %d convert.go handles", d.FullName(), f.Name(), f.Number(), c.want)
			}
		}
	}
}

// randString returns a random string, sometimes empty, sometimes not valid
// UTF-8.
func randString(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return ""
	}
	b := make([]byte, r.IntN(20))
	for i := range b {
		b[i] = byte(' ' + r.IntN(95))
	}
	if r.IntN(5) == 0 {
		b = append(b, 0xff, 'x')
	}
	return string(b)
}

// validString is randString always valid UTF-8 (an exec id, a session
// name: the Go client refuses others before sending).
func validString(r *rand.Rand) string { return strings.ToValidUTF8(randString(r), "") }

func randDuration(r *rand.Rand) time.Duration {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return runbox.NoGrace
	}
	return time.Duration(r.Int64N(int64(10 * time.Minute)))
}

// randSpec fills every field of an ExecSpec at random.
func randSpec(r *rand.Rand) runbox.ExecSpec {
	s := runbox.ExecSpec{
		ID: validString(r), Command: randString(r), Login: r.IntN(2) == 0, Cwd: randString(r),
		StdinStream: r.IntN(2) == 0, Timeout: randDuration(r), IdleTimeout: randDuration(r),
		Grace: randDuration(r), HeadBytes: r.IntN(1 << 20), TailBytes: r.IntN(1 << 20),
		Session: validString(r), Spill: runbox.SpillMode(r.IntN(4)),
		CancelOnDisconnect: r.IntN(2) == 0, KillLeftovers: r.IntN(2) == 0,
	}
	for range r.IntN(4) {
		s.Argv = append(s.Argv, randString(r))
	}
	if n := r.IntN(4); n > 0 {
		s.Env = map[string]string{}
		for range n {
			s.Env[randString(r)] = randString(r)
		}
	}
	if r.IntN(2) == 0 {
		s.Stdin = []byte(randString(r))
	}
	if r.IntN(2) == 0 {
		s.PTY = &runbox.PTYSize{Rows: uint16(r.IntN(1 << 16)), Cols: uint16(r.IntN(1 << 16))}
	}
	return s
}

// TestRunRequestAsTheGoClientSendsIt: the front's RunRequest decodes,
// with the generated code, to what the Go client sends for the same spec
// (wire.SpecToProto), for random specs with every field set.
func TestRunRequestAsTheGoClientSendsIt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range 2000 {
		spec, stream := randSpec(r), r.IntN(2) == 0
		want := &runboxv1.RunRequest{Spec: wire.SpecToProto(spec), StreamOutput: stream}
		var got runboxv1.RunRequest
		msg, err := AppendRunRequest(nil, spec, stream)
		if err != nil {
			t.Fatalf("case %d: spec %+v: %v", i, spec, err)
		}
		if err := proto.Unmarshal(msg, &got); err != nil {
			t.Fatalf("case %d: the generated code cannot decode the front's RunRequest: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("case %d: spec %+v\nfront sends %v\nGo client sends %v", i, spec, &got, want)
		}
	}
	var got runboxv1.CancelRequest
	msg, err := AppendCancelRequest(nil, "abc", runbox.NoGrace)
	if err == nil {
		err = proto.Unmarshal(msg, &got)
	}
	if err != nil || got.GetId() != "abc" || got.GetGraceMs() != -1 {
		t.Errorf("CancelRequest: %v, %v; want id abc, grace -1", &got, err)
	}
	// An id or session that is not valid UTF-8 cannot travel (proto3
	// refuses it): an invalid spec, before anything is sent, as the Go
	// client refuses it.
	for _, spec := range []runbox.ExecSpec{{ID: "a\xff", Command: "true"}, {Command: "true", Session: "\xfe"}} {
		if _, err := AppendRunRequest(nil, spec, true); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("spec %+v: %v; want ErrInvalidSpec", spec, err)
		}
	}
	if _, err := AppendCancelRequest(nil, "\xff", 0); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("cancel of an invalid id: %v; want ErrInvalidSpec", err)
	}
}

// randResult sets every field of a Result message at random (through
// reflection, so a field added later is set too).
func randResult(r *rand.Rand) *runboxv1.Result {
	m := &runboxv1.Result{}
	fs := m.ProtoReflect().Descriptor().Fields()
	for i := range fs.Len() {
		f := fs.Get(i)
		if r.IntN(4) == 0 {
			continue
		}
		var v protoreflect.Value
		switch f.Kind() {
		case protoreflect.StringKind:
			v = protoreflect.ValueOfString(randString(r))
			if !m.ProtoReflect().Has(f) && v.String() == "" {
				continue
			}
		case protoreflect.BytesKind:
			v = protoreflect.ValueOfBytes([]byte(randString(r) + "\xfe"))
		case protoreflect.BoolKind:
			v = protoreflect.ValueOfBool(true)
		case protoreflect.Int32Kind:
			v = protoreflect.ValueOfInt32(int32(r.Uint32()))
		case protoreflect.Int64Kind:
			v = protoreflect.ValueOfInt64(int64(r.Uint64()) >> r.IntN(64))
		default:
			t := f.Kind()
			panic("randResult: field kind " + t.String())
		}
		m.ProtoReflect().Set(f, v)
	}
	// Only valid UTF-8 in string fields: the generated code refuses others.
	m.Id, m.Signal, m.StdoutSpill, m.StderrSpill = "id-"+m.Id[:0], "TERM", "/spill/out", ""
	m.Cwd, m.CwdFallbackFrom = "/w", "/gone"
	return m
}

// envelope frames msg as a Connect message.
func envelope(flags byte, msg []byte) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestEventsAsTheGoClientReadsThem: every event the daemon sends,
// marshalled by the generated code with random values (every field of
// Result among them), decodes as the Go client converts it (package wire).
func TestEventsAsTheGoClientReadsThem(t *testing.T) {
	r := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	for i := range 2000 {
		var pe *runboxv1.ExecEvent
		switch i % 4 {
		case 0:
			pe = &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Started{Started: &runboxv1.Started{Id: "x", Pid: r.Int64(), Attached: r.IntN(2) == 0}}}
		case 1:
			pe = &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{Output: &runboxv1.Output{
				Stream: runboxv1.Stream(1 + r.IntN(2)), Seq: r.Uint64(), Data: []byte(randString(r))}}}
		case 2:
			pe = &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Gap{Gap: &runboxv1.Gap{FromSeq: r.Uint64(), ToSeq: r.Uint64(), Bytes: r.Int64()}}}
		case 3:
			pe = &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Exited{Exited: &runboxv1.Exited{Result: randResult(r)}}}
		}
		b, err := proto.Marshal(pe)
		if err != nil {
			t.Fatal(err)
		}
		var ev Event
		if err := DecodeEvent(b, &ev); err != nil {
			t.Fatalf("case %d: decode %v: %v", i, pe, err)
		}
		switch e := pe.GetEvent().(type) {
		case *runboxv1.ExecEvent_Started:
			if ev.Kind != EventStarted || ev.ID != e.Started.GetId() || ev.Pid != e.Started.GetPid() || ev.Attached != e.Started.GetAttached() {
				t.Fatalf("case %d: started %v decoded as %+v", i, e.Started, ev)
			}
		case *runboxv1.ExecEvent_Output:
			c := wire.ChunkFromProto(e.Output)
			if ev.Kind != EventOutput || ev.Stream != c.Stream || ev.Seq != c.Seq || !bytes.Equal(ev.Data, c.Data) {
				t.Fatalf("case %d: output %v decoded as %+v", i, e.Output, ev)
			}
		case *runboxv1.ExecEvent_Gap:
			if ev.Kind != EventGap || ev.Gap != wire.GapFromProto(e.Gap) {
				t.Fatalf("case %d: gap %v decoded as %+v", i, e.Gap, ev)
			}
		case *runboxv1.ExecEvent_Exited:
			want := wire.ResultFromProto(e.Exited.GetResult())
			if ev.Kind != EventExited || !reflect.DeepEqual(ev.Result, want) {
				t.Fatalf("case %d: result\n%+v decoded as\n%+v", i, want, ev.Result)
			}
		}
	}
}

// TestStreamAcrossChunksAndReads: a Run answer whose messages straddle
// HTTP chunks and reads (one byte at a time, or all at once) decodes to the
// same events, and its end-of-stream error is the daemon's.
func TestStreamAcrossChunksAndReads(t *testing.T) {
	var msgs []byte
	var want [][]byte
	for i := range 50 {
		data := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*997)
		want = append(want, data)
		b, _ := proto.Marshal(&runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{Output: &runboxv1.Output{Stream: 1, Seq: uint64(i + 1), Data: data}}})
		msgs = append(msgs, envelope(0, b)...)
	}
	msgs = append(msgs, envelope(flagEndStream, []byte(`{"error":{"code":"failed_precondition","message":"exec x: cancelled"},"metadata":{"Runbox-Error":["cancelled"]}}`))...)
	for _, chunk := range []int{1, 7, 4096, len(msgs)} {
		for _, read := range []int{1, 3, 1 << 20} {
			var resp bytes.Buffer
			resp.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\nTransfer-Encoding: chunked\r\n\r\n")
			for rest := msgs; len(rest) > 0; {
				n := min(chunk, len(rest))
				resp.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
				resp.Write(rest[:n])
				resp.WriteString("\r\n")
				rest = rest[n:]
			}
			resp.WriteString("0\r\n\r\n")
			s := &Stream{body: body{conn: &slowConn{data: resp.Bytes(), max: read}, buf: make([]byte, 64<<10)}}
			if status, err := s.body.readHeader(); err != nil || status != 200 {
				t.Fatalf("header: %d, %v", status, err)
			}
			for i, w := range want {
				ev, err := s.Next()
				if err != nil || ev.Kind != EventOutput || !bytes.Equal(ev.Data, w) || ev.Seq != uint64(i+1) {
					t.Fatalf("chunks of %d, reads of %d: message %d: %v, %v", chunk, read, i, ev, err)
				}
			}
			_, err := s.Next()
			if ce, ok := err.(*CallError); !ok || ce.Tag != "cancelled" || ce.Code != "failed_precondition" {
				t.Fatalf("chunks of %d, reads of %d: end of stream %v; want the daemon's cancelled error", chunk, read, err)
			}
		}
	}
}

// TestAttachAndInfoAsTheGeneratedCode: the front's AttachRequest
// decodes, with the generated code, to the request the Go client sends,
// and the start time read from an InfoResponse with every field set is
// the generated code's.
func TestAttachAndInfoAsTheGeneratedCode(t *testing.T) {
	r := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	for i := range 500 {
		want := &runboxv1.AttachRequest{Id: validString(r), StreamOutput: r.IntN(2) == 0, FromSeq: r.Uint64() >> r.IntN(64)}
		var got runboxv1.AttachRequest
		msg, err := AppendAttachRequest(nil, want.Id, want.StreamOutput, want.FromSeq)
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(msg, &got); err != nil {
			t.Fatalf("case %d: the generated code cannot decode the front's AttachRequest: %v", i, err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("case %d: front sends %v, want %v", i, &got, want)
		}
		info := &runboxv1.InfoResponse{
			Version: randString(r), Pid: r.Int64(), CgroupMode: validString(r), Running: r.Int32(), Retained: r.Int32(),
			Total: r.Uint64(), StartedAtUnixMs: r.Int64N(1 << 45), Goroutines: r.Int32(), OpenFds: r.Int32(), Paused: r.IntN(2) == 0,
		}
		info.Version = strings.ToValidUTF8(info.Version, "")
		msg, err = proto.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		at, err := DecodeInfoStartedAt(msg)
		if err != nil || at.UnixMilli() != info.StartedAtUnixMs {
			t.Fatalf("case %d: started at %v (%v); want %d ms", i, at, err, info.StartedAtUnixMs)
		}
	}
}

// TestSentinelsAsTheGoClient: every sentinel runboxd or serve may answer
// with travels under a tag that Sentinel maps back to it (as package
// wire's FromConnectError does for the Go client), the finer spawn
// failures included.
func TestSentinelsAsTheGoClient(t *testing.T) {
	for _, s := range []error{
		runbox.ErrCancelled, runbox.ErrExecNotFound, runbox.ErrInvalidSpec, runbox.ErrSpawn, runbox.ErrNotRunning,
		runbox.ErrSessionNotFound, runbox.ErrFileNotFound, runbox.ErrPermission, runbox.ErrIsDirectory,
		runbox.ErrNotDirectory, runbox.ErrEscapesRoot, runbox.ErrInvalidPath, runbox.ErrTooLarge,
		runbox.ErrExecIDConflict, runbox.ErrSandboxNotFound, runbox.ErrSandboxLost, runbox.ErrUnauthenticated,
		runbox.ErrQuotaExceeded, runbox.ErrSandboxPaused, runbox.ErrUnsupported, runbox.ErrNameInUse,
		runbox.ErrCommandNotFound, runbox.ErrCommandNotExecutable, runbox.ErrUnsafeWorkdir,
	} {
		err := fmt.Errorf("start exec x: %w: prog", s)
		ce, ok := errors.AsType[*connect.Error](wire.ToConnectError(err))
		if !ok {
			t.Fatalf("%v: not a connect error", s)
		}
		want, _, _ := wire.FromConnectError(ce)
		got := Sentinel(ce.Meta().Get(wire.ErrorKey), ce.Message())
		if got != want || !errors.Is(err, got) {
			t.Errorf("%v: tag %q gives %v, the Go client %v", s, ce.Meta().Get(wire.ErrorKey), got, want)
		}
	}
	if len(tags) != 21 {
		t.Errorf("the table has %d tags; this test checks 21: add the new sentinel here", len(tags))
	}
	if !maps.EqualFunc(refinements, wire.Refinements, slices.Equal) {
		t.Errorf("refinements %v, package wire's %v", refinements, wire.Refinements)
	}
}
