// Package frontrpc speaks the part of runboxd's API that `runbox exec`
// uses, for the runbox front (internal/front), without the protobuf
// runtime, connect or net/http, whose package inits and start-up cost the
// front would pay on every command: the Run, Attach, Cancel and Info
// calls, with the Connect protocol over HTTP/1.1 (which runboxd serves on
// its socket beside HTTP/2). The messages are the plain types generated
// from proto/ into gen/runbox/v1/runboxv1wire (by
// internal/tools/protoc-gen-runbox-wire, standard-library code only); this
// file converts them as package wire does for the Go client, and its tests
// compare the two, field by field, both ways.
package frontrpc

import (
	"fmt"
	"slices"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1wire"
	"github.com/runbox/runbox/internal/textfield"
	"github.com/runbox/runbox/internal/wiretime"
)

// specToWire converts spec as the Go client does (wire.SpecToProto): the
// _raw alternatives carry what is not valid UTF-8.
func specToWire(s runbox.ExecSpec) *runboxv1wire.ExecSpec {
	p := &runboxv1wire.ExecSpec{
		Id:                 s.ID,
		Login:              s.Login,
		Stdin:              s.Stdin,
		StdinStream:        s.StdinStream,
		TimeoutMs:          wiretime.DurationToMs(s.Timeout),
		IdleTimeoutMs:      wiretime.DurationToMs(s.IdleTimeout),
		GraceMs:            wiretime.GraceToMs(s.Grace),
		HeadBytes:          int64(s.HeadBytes),
		TailBytes:          int64(s.TailBytes),
		Session:            s.Session,
		Spill:              runboxv1wire.SpillMode_SPILL_MODE_AUTO,
		CancelOnDisconnect: s.CancelOnDisconnect,
		KillLeftovers:      s.KillLeftovers,
	}
	switch s.Spill {
	case runbox.SpillAlways:
		p.Spill = runboxv1wire.SpillMode_SPILL_MODE_ALWAYS
	case runbox.SpillNever:
		p.Spill = runboxv1wire.SpillMode_SPILL_MODE_NEVER
	case runbox.SpillUnsent:
		p.Spill = runboxv1wire.SpillMode_SPILL_MODE_UNSENT
	}
	if s.PTY != nil {
		p.Pty = &runboxv1wire.PtySize{Rows: uint32(s.PTY.Rows), Cols: uint32(s.PTY.Cols)}
	}
	p.Command, p.CommandRaw = textfield.Split(s.Command)
	p.Cwd, p.CwdRaw = textfield.Split(s.Cwd)
	p.Argv, p.ArgvRaw = textfield.SplitList(s.Argv)
	p.Env, p.EnvRaw = textfield.SplitEnv(s.Env, func(name, value []byte) *runboxv1wire.EnvVar {
		return &runboxv1wire.EnvVar{Name: name, Value: value}
	})
	return p
}

// unencodable marks a request the front cannot send (an exec id or session
// name that is not valid UTF-8, which proto3 refuses), as the Go client
// refuses it before sending.
func unencodable(err error) error {
	return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
}

// AppendRunRequest appends the API's RunRequest for spec, as the Go client
// sends it.
func AppendRunRequest(b []byte, spec runbox.ExecSpec, streamOutput bool) ([]byte, error) {
	b, err := (&runboxv1wire.RunRequest{Spec: specToWire(spec), StreamOutput: streamOutput}).MarshalAppend(b)
	if err != nil {
		return nil, unencodable(err)
	}
	return b, nil
}

// AppendCancelRequest appends the API's CancelRequest for the exec id,
// with grace as Client.Cancel takes it (0: the exec's own).
func AppendCancelRequest(b []byte, id string, grace time.Duration) ([]byte, error) {
	b, err := (&runboxv1wire.CancelRequest{Id: id, GraceMs: wiretime.GraceToMs(grace)}).MarshalAppend(b)
	if err != nil {
		return nil, unencodable(err)
	}
	return b, nil
}

// AppendAttachRequest appends the API's AttachRequest for the exec id,
// replaying output from sequence number fromSeq.
func AppendAttachRequest(b []byte, id string, streamOutput bool, fromSeq uint64) ([]byte, error) {
	b, err := (&runboxv1wire.AttachRequest{Id: id, StreamOutput: streamOutput, FromSeq: fromSeq}).MarshalAppend(b)
	if err != nil {
		return nil, unencodable(err)
	}
	return b, nil
}

// DecodeInfoStartedAt decodes when the daemon started from an
// InfoResponse message.
func DecodeInfoStartedAt(msg []byte) (time.Time, error) {
	var info runboxv1wire.InfoResponse
	if err := info.Unmarshal(msg); err != nil {
		return time.Time{}, fmt.Errorf("decode info: %w", err)
	}
	return time.UnixMilli(info.StartedAtUnixMs), nil
}

// EventKind says which event an ExecEvent carries.
type EventKind int

// The events of an exec's stream (ExecEvent's oneof).
const (
	EventNone EventKind = iota // an event this package does not know
	EventStarted
	EventOutput
	EventExited
	EventGap
)

// Event is one ExecEvent. Decode fills only what its Kind uses.
type Event struct {
	Kind EventKind

	// Started: the exec's id, its leader's pid, and whether this stream
	// attached to an exec that existed.
	ID       string
	Pid      int64
	Attached bool

	// Output: a chunk; Data aliases the decoded message (valid until the
	// stream's next event).
	Stream runbox.Stream
	Seq    uint64
	Data   []byte

	// Gap: output the stream missed.
	Gap runbox.OutputGap

	// Exited: the exec's result as the daemon made it.
	Result runbox.Result

	msg runboxv1wire.ExecEvent // the decoded message, reused
}

// DecodeEvent decodes an ExecEvent into ev, reusing it.
func DecodeEvent(msg []byte, ev *Event) error {
	m := &ev.msg
	if err := m.Unmarshal(msg); err != nil {
		return fmt.Errorf("decode exec event: %w", err)
	}
	ev.Kind, ev.Data = EventNone, nil
	switch {
	case m.Started != nil:
		ev.Kind, ev.ID, ev.Pid, ev.Attached = EventStarted, m.Started.Id, m.Started.Pid, m.Started.Attached
	case m.Output != nil:
		ev.Kind, ev.Stream, ev.Seq, ev.Data = EventOutput, runbox.Stdout, m.Output.Seq, m.Output.Data
		if m.Output.Stream == runboxv1wire.Stream_STREAM_STDERR {
			ev.Stream = runbox.Stderr
		}
	case m.Gap != nil:
		ev.Kind = EventGap
		ev.Gap = runbox.OutputGap{FromSeq: m.Gap.FromSeq, ToSeq: m.Gap.ToSeq, Bytes: m.Gap.Bytes}
	case m.Exited != nil:
		ev.Kind, ev.Result = EventExited, resultFromWire(m.Exited.Result)
	}
	return nil
}

// resultFromWire converts a Result as wire.ResultFromProto does
// (StreamGaps and StreamLost are the client's to fill); its bytes are
// copied out of the message, which aliases the read buffer.
func resultFromWire(p *runboxv1wire.Result) runbox.Result {
	if p == nil {
		return runbox.Result{}
	}
	return runbox.Result{
		ID:                p.Id,
		ExitCode:          int(p.ExitCode),
		Signal:            p.Signal,
		TimedOut:          p.TimedOut,
		Cancelled:         p.Cancelled,
		IdleTimedOut:      p.IdleTimedOut,
		Duration:          time.Duration(p.DurationUs) * time.Microsecond,
		Stdout:            slices.Clone(p.Stdout),
		Stderr:            slices.Clone(p.Stderr),
		StdoutDropped:     p.StdoutDropped,
		StderrDropped:     p.StderrDropped,
		StdoutBytes:       p.StdoutBytes,
		StderrBytes:       p.StderrBytes,
		Killed:            int(p.Killed),
		Survivors:         int(p.Survivors),
		Pid:               int(p.Pid),
		StdoutSpill:       p.StdoutSpill,
		StderrSpill:       p.StderrSpill,
		SpillTruncated:    p.SpillTruncated,
		Cwd:               textfield.Join(p.Cwd, p.CwdRaw),
		CwdFallbackFrom:   textfield.Join(p.CwdFallbackFrom, p.CwdFallbackFromRaw),
		OOMKilled:         p.OomKilled,
		LeftRunning:       int(p.LeftRunning),
		StdoutSpillOffset: p.StdoutSpillOffset,
		StderrSpillOffset: p.StderrSpillOffset,
	}
}
