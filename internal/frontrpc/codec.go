// Package frontrpc speaks the part of runboxd's API that `runbox exec`
// uses, for the runbox front (internal/front), without the generated
// protobuf code, connect or net/http, whose package inits and start-up
// cost the front would pay on every command: the Run, Attach, Cancel and
// Info calls, with the Connect protocol over HTTP/1.1 (which runboxd
// serves on its socket beside HTTP/2), and hand-written protobuf encoding
// of exactly the messages they carry (RunRequest, ExecSpec, AttachRequest,
// CancelRequest out; ExecEvent and what it holds in, and InfoResponse's
// start time).
//
// The codec follows proto/runbox/v1/runbox.proto; its tests compare it,
// field by field, with the generated code both ways, and fail when the
// proto gains a field this package does not know.
package frontrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/wiretime"
)

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// errMalformed says a message from the daemon could not be decoded.
var errMalformed = errors.New("malformed protobuf message from runboxd")

func appendTag(b []byte, num, typ int) []byte {
	return binary.AppendUvarint(b, uint64(num)<<3|uint64(typ))
}

func appendUint(b []byte, num int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, num, wireVarint), v)
}

func appendInt(b []byte, num int, v int64) []byte { return appendUint(b, num, uint64(v)) }

func appendBool(b []byte, num int, v bool) []byte {
	if !v {
		return b
	}
	return appendUint(b, num, 1)
}

func appendBytes(b []byte, num int, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return appendField(b, num, v)
}

// appendField appends a length-delimited field even when v is empty (a
// repeated element, a message).
func appendField(b []byte, num int, v []byte) []byte {
	b = binary.AppendUvarint(appendTag(b, num, wireBytes), uint64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, num int, s string) []byte {
	if s == "" {
		return b
	}
	b = binary.AppendUvarint(appendTag(b, num, wireBytes), uint64(len(s)))
	return append(b, s...)
}

// appendTextOrRaw appends s as the string field num when it is valid
// UTF-8, else its bytes as the raw field (the proto's _raw alternatives).
func appendTextOrRaw(b []byte, num, raw int, s string) []byte {
	if utf8.ValidString(s) {
		return appendString(b, num, s)
	}
	return appendBytes(b, raw, []byte(s))
}

// ExecSpec field numbers (proto/runbox/v1/runbox.proto).
const (
	specID = iota + 1
	specCommand
	specArgv
	specLogin
	specEnv
	specCwd
	specStdin
	specStdinStream
	specTimeoutMs
	specIdleTimeoutMs
	specGraceMs
	specHeadBytes
	specTailBytes
	specSession
	specSpill
	specPty
	specCommandRaw
	specArgvRaw
	specEnvRaw
	specCwdRaw
	specCancelOnDisconnect
	specKillLeftovers
	specFields = specKillLeftovers // ExecSpec's field count
)

// AppendExecSpec appends spec encoded as the API's ExecSpec message, as the
// Go client sends it (wire.SpecToProto).
func AppendExecSpec(b []byte, s runbox.ExecSpec) []byte {
	b = appendString(b, specID, s.ID)
	b = appendTextOrRaw(b, specCommand, specCommandRaw, s.Command)
	argvValid := true
	for _, a := range s.Argv {
		argvValid = argvValid && utf8.ValidString(a)
	}
	for _, a := range s.Argv {
		if argvValid {
			b = appendField(b, specArgv, []byte(a))
		} else {
			b = appendField(b, specArgvRaw, []byte(a))
		}
	}
	b = appendBool(b, specLogin, s.Login)
	envValid := true
	for k, v := range s.Env {
		envValid = envValid && utf8.ValidString(k) && utf8.ValidString(v)
	}
	var entry []byte
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		// A map entry and an EnvVar are both {1: name, 2: value}.
		entry = appendField(appendField(entry[:0], 1, []byte(k)), 2, []byte(s.Env[k]))
		if envValid {
			b = appendField(b, specEnv, entry)
		} else {
			b = appendField(b, specEnvRaw, entry)
		}
	}
	b = appendTextOrRaw(b, specCwd, specCwdRaw, s.Cwd)
	b = appendBytes(b, specStdin, s.Stdin)
	b = appendBool(b, specStdinStream, s.StdinStream)
	b = appendInt(b, specTimeoutMs, wiretime.DurationToMs(s.Timeout))
	b = appendInt(b, specIdleTimeoutMs, wiretime.DurationToMs(s.IdleTimeout))
	b = appendInt(b, specGraceMs, wiretime.GraceToMs(s.Grace))
	b = appendInt(b, specHeadBytes, int64(s.HeadBytes))
	b = appendInt(b, specTailBytes, int64(s.TailBytes))
	b = appendString(b, specSession, s.Session)
	spill := uint64(1) // SPILL_MODE_AUTO
	switch s.Spill {
	case runbox.SpillAlways:
		spill = 2
	case runbox.SpillNever:
		spill = 3
	case runbox.SpillUnsent:
		spill = 4
	}
	b = appendUint(b, specSpill, spill)
	if s.PTY != nil {
		pty := appendUint(appendUint(nil, 1, uint64(s.PTY.Rows)), 2, uint64(s.PTY.Cols))
		b = appendField(b, specPty, pty)
	}
	b = appendBool(b, specCancelOnDisconnect, s.CancelOnDisconnect)
	b = appendBool(b, specKillLeftovers, s.KillLeftovers)
	return b
}

// RunRequest field numbers.
const (
	runSpec         = 1
	runStreamOutput = 2
	runFields       = 2
)

// AppendRunRequest appends the API's RunRequest for spec.
func AppendRunRequest(b []byte, spec runbox.ExecSpec, streamOutput bool) []byte {
	b = appendField(b, runSpec, AppendExecSpec(nil, spec))
	return appendBool(b, runStreamOutput, streamOutput)
}

// CancelRequest field numbers.
const (
	cancelID      = 1
	cancelGraceMs = 2
	cancelFields  = 2
)

// AppendCancelRequest appends the API's CancelRequest for the exec id,
// with grace as Client.Cancel takes it (0: the exec's own).
func AppendCancelRequest(b []byte, id string, grace time.Duration) []byte {
	return appendInt(appendString(b, cancelID, id), cancelGraceMs, wiretime.GraceToMs(grace))
}

// AttachRequest field numbers.
const (
	attachID           = 1
	attachStreamOutput = 2
	attachFromSeq      = 3
	attachFields       = 3
)

// AppendAttachRequest appends the API's AttachRequest for the exec id,
// replaying output from sequence number fromSeq.
func AppendAttachRequest(b []byte, id string, streamOutput bool, fromSeq uint64) []byte {
	b = appendString(b, attachID, id)
	b = appendBool(b, attachStreamOutput, streamOutput)
	return appendUint(b, attachFromSeq, fromSeq)
}

// infoStartedAtUnixMs is InfoResponse's started_at_unix_ms, the one field
// of it the front reads.
const infoStartedAtUnixMs = 7

// DecodeInfoStartedAt decodes when the daemon started from an
// InfoResponse message (its other fields are skipped).
func DecodeInfoStartedAt(msg []byte) (time.Time, error) {
	var err error
	var ms int64
	for f := range fields(msg, &err) {
		if f.num == infoStartedAtUnixMs && f.typ == wireVarint {
			ms = int64(f.v)
		}
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMilli(ms), nil
}

// field is one field of a message being decoded.
type field struct {
	num, typ int
	v        uint64 // a varint's or fixed value
	data     []byte // a length-delimited field's bytes (aliasing the message)
}

// fields iterates over the fields of msg; a malformed message ends it
// with errMalformed in *err.
func fields(msg []byte, err *error) func(func(field) bool) {
	return func(yield func(field) bool) {
		for len(msg) > 0 {
			tag, n := binary.Uvarint(msg)
			if n <= 0 || tag>>3 == 0 || tag>>3 > 1<<29 {
				*err = errMalformed
				return
			}
			msg = msg[n:]
			f := field{num: int(tag >> 3), typ: int(tag & 7)}
			switch f.typ {
			case wireVarint:
				f.v, n = binary.Uvarint(msg)
				if n <= 0 {
					*err = errMalformed
					return
				}
				msg = msg[n:]
			case wireFixed64:
				if len(msg) < 8 {
					*err = errMalformed
					return
				}
				f.v, msg = binary.LittleEndian.Uint64(msg), msg[8:]
			case wireFixed32:
				if len(msg) < 4 {
					*err = errMalformed
					return
				}
				f.v, msg = uint64(binary.LittleEndian.Uint32(msg)), msg[4:]
			case wireBytes:
				l, n := binary.Uvarint(msg)
				if n <= 0 || l > uint64(len(msg)-n) {
					*err = errMalformed
					return
				}
				f.data, msg = msg[n:n+int(l)], msg[n+int(l):]
			default:
				*err = errMalformed
				return
			}
			if !yield(f) {
				return
			}
		}
	}
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
	eventFields = int(EventGap) // ExecEvent's field count
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
}

// Field counts of the messages an ExecEvent holds.
const (
	startedFields = 3
	outputFields  = 3
	gapFields     = 3
	exitedFields  = 1
	resultFields  = 27
)

// DecodeEvent decodes an ExecEvent into ev, reusing it; an Output event
// allocates nothing.
func DecodeEvent(msg []byte, ev *Event) error {
	var err error
	ev.Kind, ev.Data = EventNone, nil
	for f := range fields(msg, &err) {
		if f.typ != wireBytes {
			continue
		}
		switch EventKind(f.num) {
		case EventStarted:
			ev.Kind, ev.ID, ev.Pid, ev.Attached = EventStarted, "", 0, false
			for g := range fields(f.data, &err) {
				switch g.num {
				case 1:
					ev.ID = string(g.data)
				case 2:
					ev.Pid = int64(g.v)
				case 3:
					ev.Attached = g.v != 0
				}
			}
		case EventOutput:
			ev.Kind, ev.Stream, ev.Seq = EventOutput, runbox.Stdout, 0
			for g := range fields(f.data, &err) {
				switch g.num {
				case 1:
					if g.v == 2 { // STREAM_STDERR
						ev.Stream = runbox.Stderr
					}
				case 2:
					ev.Seq = g.v
				case 3:
					ev.Data = g.data
				}
			}
		case EventGap:
			ev.Kind, ev.Gap = EventGap, runbox.OutputGap{}
			for g := range fields(f.data, &err) {
				switch g.num {
				case 1:
					ev.Gap.FromSeq = g.v
				case 2:
					ev.Gap.ToSeq = g.v
				case 3:
					ev.Gap.Bytes = int64(g.v)
				}
			}
		case EventExited:
			ev.Kind, ev.Result = EventExited, runbox.Result{}
			for g := range fields(f.data, &err) {
				if g.num == 1 && g.typ == wireBytes {
					if e := decodeResult(g.data, &ev.Result); e != nil {
						return e
					}
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("decode exec event: %w", err)
	}
	return nil
}

// decodeResult decodes a Result message into r as wire.ResultFromProto
// converts it (StreamGaps and StreamLost are the client's to fill).
func decodeResult(msg []byte, r *runbox.Result) error {
	var err error
	var cwd, cwdRaw, from, fromRaw []byte
	for f := range fields(msg, &err) {
		switch f.num {
		case 1:
			r.ID = string(f.data)
		case 2:
			r.ExitCode = int(int32(f.v))
		case 3:
			r.Signal = string(f.data)
		case 4:
			r.TimedOut = f.v != 0
		case 5:
			r.Cancelled = f.v != 0
		case 6:
			r.IdleTimedOut = f.v != 0
		case 7:
			r.Duration = time.Duration(int64(f.v)) * time.Microsecond
		case 8:
			r.Stdout = slices.Clone(f.data)
		case 9:
			r.Stderr = slices.Clone(f.data)
		case 10:
			r.StdoutDropped = int64(f.v)
		case 11:
			r.StderrDropped = int64(f.v)
		case 12:
			r.StdoutBytes = int64(f.v)
		case 13:
			r.StderrBytes = int64(f.v)
		case 14:
			r.Killed = int(int32(f.v))
		case 15:
			r.Survivors = int(int32(f.v))
		case 16:
			r.Pid = int(int64(f.v))
		case 17:
			r.StdoutSpill = string(f.data)
		case 18:
			r.StderrSpill = string(f.data)
		case 19:
			r.SpillTruncated = f.v != 0
		case 20:
			cwd = f.data
		case 21:
			from = f.data
		case 22:
			r.OOMKilled = f.v != 0
		case 23:
			cwdRaw = f.data
		case 24:
			fromRaw = f.data
		case 25:
			r.LeftRunning = int(int32(f.v))
		case 26:
			r.StdoutSpillOffset = int64(f.v)
		case 27:
			r.StderrSpillOffset = int64(f.v)
		}
	}
	r.Cwd, r.CwdFallbackFrom = textOrRaw(cwd, cwdRaw), textOrRaw(from, fromRaw)
	if err != nil {
		return fmt.Errorf("decode result: %w", err)
	}
	return nil
}

// textOrRaw is the raw bytes when set, else the string (wire's
// fromTextOrRaw).
func textOrRaw(s, raw []byte) string {
	if len(raw) > 0 {
		return string(raw)
	}
	return string(s)
}
