// Package wire converts between the generated runbox.v1 API types and the
// root package's vocabulary, and carries runbox's sentinel errors across the
// wire. Both ends of the API use it — internal/daemon to answer, package
// client to read the answers — so each field is converted in exactly one
// place and a round-trip test covers all of them.
//
// It deliberately imports neither the supervisor nor anything Linux-only, so
// the client stays portable.
package wire

import (
	"fmt"
	"time"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/textfield"
	"github.com/runbox/runbox/internal/wiretime"
)

// MsToDuration converts milliseconds from the wire to a Duration. Check
// the value first (CheckSpecMs, runbox.CheckMs): one above about 292
// years wraps.
func MsToDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// GraceFromMs converts a grace period from the wire, checked to be at most
// runbox.MaxGrace: any negative one is runbox.NoGrace.
func GraceFromMs(ms int64) time.Duration {
	if ms < 0 {
		return runbox.NoGrace
	}
	return MsToDuration(ms)
}

// CheckSpecMs refuses (a *runbox.DurationError) a wire spec's durations
// out of range, before they become time.Durations.
func CheckSpecMs(p *runboxv1.ExecSpec) error {
	if err := runbox.CheckMs("timeout", p.GetTimeoutMs(), runbox.MaxTimeout, "runbox.MaxTimeout", false); err != nil {
		return err
	}
	if err := runbox.CheckMs("idle timeout", p.GetIdleTimeoutMs(), runbox.MaxIdleTimeout, "runbox.MaxIdleTimeout", false); err != nil {
		return err
	}
	return runbox.CheckMs("grace", p.GetGraceMs(), runbox.MaxGrace, "runbox.MaxGrace", true)
}

// timeToMs converts t to Unix milliseconds; the zero time is 0.
func timeToMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// msToTime converts Unix milliseconds to a time; 0 is the zero time.
func msToTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// StreamToProto converts a runbox.Stream.
func StreamToProto(s runbox.Stream) runboxv1.Stream {
	switch s {
	case runbox.Stdout:
		return runboxv1.Stream_STREAM_STDOUT
	case runbox.Stderr:
		return runboxv1.Stream_STREAM_STDERR
	}
	return runboxv1.Stream_STREAM_UNSPECIFIED
}

// StreamFromProto converts a wire stream.
func StreamFromProto(s runboxv1.Stream) runbox.Stream {
	switch s {
	case runboxv1.Stream_STREAM_STDOUT:
		return runbox.Stdout
	case runboxv1.Stream_STREAM_STDERR:
		return runbox.Stderr
	}
	return runbox.StreamUnspecified
}

// StateToProto converts a runbox.ExecState.
func StateToProto(s runbox.ExecState) runboxv1.ExecState {
	switch s {
	case runbox.ExecStarting:
		return runboxv1.ExecState_EXEC_STATE_STARTING
	case runbox.ExecRunning:
		return runboxv1.ExecState_EXEC_STATE_RUNNING
	case runbox.ExecStopping:
		return runboxv1.ExecState_EXEC_STATE_STOPPING
	case runbox.ExecExited:
		return runboxv1.ExecState_EXEC_STATE_EXITED
	}
	return runboxv1.ExecState_EXEC_STATE_UNSPECIFIED
}

// StateFromProto converts a wire exec state.
func StateFromProto(s runboxv1.ExecState) runbox.ExecState {
	switch s {
	case runboxv1.ExecState_EXEC_STATE_STARTING:
		return runbox.ExecStarting
	case runboxv1.ExecState_EXEC_STATE_RUNNING:
		return runbox.ExecRunning
	case runboxv1.ExecState_EXEC_STATE_STOPPING:
		return runbox.ExecStopping
	case runboxv1.ExecState_EXEC_STATE_EXITED:
		return runbox.ExecExited
	}
	return runbox.ExecStateUnspecified
}

// SpillToProto converts a runbox.SpillMode.
func SpillToProto(m runbox.SpillMode) runboxv1.SpillMode {
	switch m {
	case runbox.SpillAlways:
		return runboxv1.SpillMode_SPILL_MODE_ALWAYS
	case runbox.SpillNever:
		return runboxv1.SpillMode_SPILL_MODE_NEVER
	case runbox.SpillUnsent:
		return runboxv1.SpillMode_SPILL_MODE_UNSENT
	}
	return runboxv1.SpillMode_SPILL_MODE_AUTO
}

// SpillFromProto converts a wire spill mode; unspecified means auto.
func SpillFromProto(m runboxv1.SpillMode) runbox.SpillMode {
	switch m {
	case runboxv1.SpillMode_SPILL_MODE_ALWAYS:
		return runbox.SpillAlways
	case runboxv1.SpillMode_SPILL_MODE_NEVER:
		return runbox.SpillNever
	case runboxv1.SpillMode_SPILL_MODE_UNSENT:
		return runbox.SpillUnsent
	}
	return runbox.SpillAuto
}

// SpecToProto converts an ExecSpec for the wire. A command, argv,
// environment or working directory that is not valid UTF-8 goes in the
// spec's _raw field instead of its string field, as the exact bytes (proto3
// strings must be UTF-8); the rest stays in the string fields, which JSON
// callers use.
func SpecToProto(s runbox.ExecSpec) *runboxv1.ExecSpec {
	p := &runboxv1.ExecSpec{
		Id:            s.ID,
		Login:         s.Login,
		Stdin:         s.Stdin,
		StdinStream:   s.StdinStream,
		TimeoutMs:     wiretime.DurationToMs(s.Timeout),
		IdleTimeoutMs: wiretime.DurationToMs(s.IdleTimeout),
		GraceMs:       wiretime.GraceToMs(s.Grace),
		HeadBytes:     int64(s.HeadBytes),
		TailBytes:     int64(s.TailBytes),
		Session:       s.Session,
		Spill:         SpillToProto(s.Spill),
		Pty:           PTYToProto(s.PTY),

		CancelOnDisconnect: s.CancelOnDisconnect,
		KillLeftovers:      s.KillLeftovers,
	}
	p.Command, p.CommandRaw = textfield.Split(s.Command)
	p.Cwd, p.CwdRaw = textfield.Split(s.Cwd)
	p.Argv, p.ArgvRaw = textfield.SplitList(s.Argv)
	p.Env, p.EnvRaw = textfield.SplitEnv(s.Env, func(name, value []byte) *runboxv1.EnvVar {
		return &runboxv1.EnvVar{Name: name, Value: value}
	})
	return p
}

// PTYToProto converts a terminal size; nil (no pty) stays nil.
func PTYToProto(p *runbox.PTYSize) *runboxv1.PtySize {
	if p == nil {
		return nil
	}
	return &runboxv1.PtySize{Rows: uint32(p.Rows), Cols: uint32(p.Cols)}
}

// PTYFromProto converts a wire terminal size; nil (no pty) stays nil.
// Dimensions beyond 65535 are clamped.
func PTYFromProto(p *runboxv1.PtySize) *runbox.PTYSize {
	if p == nil {
		return nil
	}
	return &runbox.PTYSize{Rows: ClampSize(p.GetRows()), Cols: ClampSize(p.GetCols())}
}

// ClampSize fits a wire terminal dimension into a uint16.
func ClampSize(n uint32) uint16 { return uint16(min(n, 0xffff)) }

// SpecFromProto converts a wire ExecSpec; nil gives the zero spec. A
// string field and its _raw alternative both set is runbox.ErrInvalidSpec.
func SpecFromProto(p *runboxv1.ExecSpec) (runbox.ExecSpec, error) {
	if p == nil {
		return runbox.ExecSpec{}, nil
	}
	for _, f := range []struct {
		name     string
		text, ra bool
	}{
		{"command", p.GetCommand() != "", len(p.GetCommandRaw()) > 0},
		{"argv", len(p.GetArgv()) > 0, len(p.GetArgvRaw()) > 0},
		{"env", len(p.GetEnv()) > 0, len(p.GetEnvRaw()) > 0},
		{"cwd", p.GetCwd() != "", len(p.GetCwdRaw()) > 0},
	} {
		if f.text && f.ra {
			return runbox.ExecSpec{}, fmt.Errorf("%w: both %s and %s_raw are set: set one", runbox.ErrInvalidSpec, f.name, f.name)
		}
	}
	if err := CheckSpecMs(p); err != nil {
		return runbox.ExecSpec{}, err
	}
	s := runbox.ExecSpec{
		ID:          p.GetId(),
		Command:     textfield.Join(p.GetCommand(), p.GetCommandRaw()),
		Argv:        p.GetArgv(),
		Login:       p.GetLogin(),
		Env:         p.GetEnv(),
		Cwd:         textfield.Join(p.GetCwd(), p.GetCwdRaw()),
		Stdin:       p.GetStdin(),
		StdinStream: p.GetStdinStream(),
		Timeout:     MsToDuration(p.GetTimeoutMs()),
		IdleTimeout: MsToDuration(p.GetIdleTimeoutMs()),
		Grace:       GraceFromMs(p.GetGraceMs()),
		HeadBytes:   int(p.GetHeadBytes()),
		TailBytes:   int(p.GetTailBytes()),
		Session:     p.GetSession(),
		Spill:       SpillFromProto(p.GetSpill()),
		PTY:         PTYFromProto(p.GetPty()),

		CancelOnDisconnect: p.GetCancelOnDisconnect(),
		KillLeftovers:      p.GetKillLeftovers(),
	}
	if raw := p.GetArgvRaw(); len(raw) > 0 {
		s.Argv = make([]string, len(raw))
		for i, a := range raw {
			s.Argv[i] = string(a)
		}
	}
	if raw := p.GetEnvRaw(); len(raw) > 0 {
		s.Env = make(map[string]string, len(raw))
		for _, kv := range raw {
			s.Env[string(kv.GetName())] = string(kv.GetValue())
		}
	}
	return s, nil
}

// ResultToProto converts a Result for the wire. Duration travels in
// microseconds.
func ResultToProto(r runbox.Result) *runboxv1.Result {
	p := &runboxv1.Result{
		Id:                r.ID,
		ExitCode:          int32(r.ExitCode),
		Signal:            r.Signal,
		TimedOut:          r.TimedOut,
		Cancelled:         r.Cancelled,
		IdleTimedOut:      r.IdleTimedOut,
		DurationUs:        r.Duration.Microseconds(),
		Stdout:            r.Stdout,
		Stderr:            r.Stderr,
		StdoutDropped:     r.StdoutDropped,
		StderrDropped:     r.StderrDropped,
		StdoutBytes:       r.StdoutBytes,
		StderrBytes:       r.StderrBytes,
		Killed:            int32(r.Killed),
		Survivors:         int32(r.Survivors),
		Pid:               int64(r.Pid),
		StdoutSpill:       r.StdoutSpill,
		StderrSpill:       r.StderrSpill,
		SpillTruncated:    r.SpillTruncated,
		OomKilled:         r.OOMKilled,
		LeftRunning:       int32(r.LeftRunning),
		StdoutSpillOffset: r.StdoutSpillOffset,
		StderrSpillOffset: r.StderrSpillOffset,
	}
	p.Cwd, p.CwdRaw = textfield.Split(r.Cwd)
	p.CwdFallbackFrom, p.CwdFallbackFromRaw = textfield.Split(r.CwdFallbackFrom)
	return p
}

// ResultFromProto converts a wire Result; nil gives the zero Result.
func ResultFromProto(p *runboxv1.Result) runbox.Result {
	if p == nil {
		return runbox.Result{}
	}
	return runbox.Result{
		ID:                p.GetId(),
		ExitCode:          int(p.GetExitCode()),
		Signal:            p.GetSignal(),
		TimedOut:          p.GetTimedOut(),
		Cancelled:         p.GetCancelled(),
		IdleTimedOut:      p.GetIdleTimedOut(),
		Duration:          time.Duration(p.GetDurationUs()) * time.Microsecond,
		Stdout:            p.GetStdout(),
		Stderr:            p.GetStderr(),
		StdoutDropped:     p.GetStdoutDropped(),
		StderrDropped:     p.GetStderrDropped(),
		StdoutBytes:       p.GetStdoutBytes(),
		StderrBytes:       p.GetStderrBytes(),
		Killed:            int(p.GetKilled()),
		Survivors:         int(p.GetSurvivors()),
		Pid:               int(p.GetPid()),
		StdoutSpill:       p.GetStdoutSpill(),
		StderrSpill:       p.GetStderrSpill(),
		SpillTruncated:    p.GetSpillTruncated(),
		Cwd:               textfield.Join(p.GetCwd(), p.GetCwdRaw()),
		CwdFallbackFrom:   textfield.Join(p.GetCwdFallbackFrom(), p.GetCwdFallbackFromRaw()),
		OOMKilled:         p.GetOomKilled(),
		LeftRunning:       int(p.GetLeftRunning()),
		StdoutSpillOffset: p.GetStdoutSpillOffset(),
		StderrSpillOffset: p.GetStderrSpillOffset(),
	}
}

// ExecInfoToProto converts an ExecInfo for the wire.
func ExecInfoToProto(e runbox.ExecInfo) *runboxv1.ExecInfo {
	p := &runboxv1.ExecInfo{
		Id:              e.ID,
		Pid:             int64(e.Pid),
		State:           StateToProto(e.State),
		StartedAtUnixMs: timeToMs(e.StartedAt),
		LiveProcesses:   int32(e.LiveProcesses),
	}
	p.Command, p.CommandRaw = textfield.Split(e.Command)
	if e.Result != nil {
		p.Result = ResultToProto(*e.Result)
	}
	return p
}

// ExecInfoFromProto converts a wire ExecInfo; nil gives the zero ExecInfo.
func ExecInfoFromProto(p *runboxv1.ExecInfo) runbox.ExecInfo {
	if p == nil {
		return runbox.ExecInfo{}
	}
	e := runbox.ExecInfo{
		ID:            p.GetId(),
		Pid:           int(p.GetPid()),
		State:         StateFromProto(p.GetState()),
		Command:       textfield.Join(p.GetCommand(), p.GetCommandRaw()),
		StartedAt:     msToTime(p.GetStartedAtUnixMs()),
		LiveProcesses: int(p.GetLiveProcesses()),
	}
	if p.GetResult() != nil {
		r := ResultFromProto(p.GetResult())
		e.Result = &r
	}
	return e
}

// DaemonInfoToProto converts a DaemonInfo for the wire.
func DaemonInfoToProto(d runbox.DaemonInfo) *runboxv1.InfoResponse {
	return &runboxv1.InfoResponse{
		Version:         d.Version,
		Pid:             int64(d.Pid),
		CgroupMode:      d.CgroupMode,
		Running:         int32(d.Running),
		Retained:        int32(d.Retained),
		Total:           d.Total,
		StartedAtUnixMs: timeToMs(d.StartedAt),
		Goroutines:      int32(d.Goroutines),
		OpenFds:         int32(d.OpenFDs),
		Paused:          d.Paused,
		Holds:           int32(d.Holds),
	}
}

// DaemonInfoFromProto converts a wire InfoResponse; nil gives the zero
// DaemonInfo.
func DaemonInfoFromProto(p *runboxv1.InfoResponse) runbox.DaemonInfo {
	if p == nil {
		return runbox.DaemonInfo{}
	}
	return runbox.DaemonInfo{
		Version:    p.GetVersion(),
		Pid:        int(p.GetPid()),
		CgroupMode: p.GetCgroupMode(),
		Running:    int(p.GetRunning()),
		Retained:   int(p.GetRetained()),
		Total:      p.GetTotal(),
		StartedAt:  msToTime(p.GetStartedAtUnixMs()),
		Goroutines: int(p.GetGoroutines()),
		OpenFDs:    int(p.GetOpenFds()),
		Paused:     p.GetPaused(),
		Holds:      int(p.GetHolds()),
	}
}

// ChunkToProto converts an output Chunk for the wire.
func ChunkToProto(c runbox.Chunk) *runboxv1.Output {
	return &runboxv1.Output{Stream: StreamToProto(c.Stream), Seq: c.Seq, Data: c.Data}
}

// ChunkFromProto converts a wire Output; nil gives the zero Chunk.
func ChunkFromProto(p *runboxv1.Output) runbox.Chunk {
	if p == nil {
		return runbox.Chunk{}
	}
	return runbox.Chunk{Stream: StreamFromProto(p.GetStream()), Seq: p.GetSeq(), Data: p.GetData()}
}

// GapToProto converts an OutputGap for the wire.
func GapToProto(g runbox.OutputGap) *runboxv1.Gap {
	return &runboxv1.Gap{FromSeq: g.FromSeq, ToSeq: g.ToSeq, Bytes: g.Bytes}
}

// GapFromProto converts a wire Gap; nil gives the zero OutputGap.
func GapFromProto(p *runboxv1.Gap) runbox.OutputGap {
	return runbox.OutputGap{FromSeq: p.GetFromSeq(), ToSeq: p.GetToSeq(), Bytes: p.GetBytes()}
}

// SessionToProto converts a SessionInfo for the wire.
func SessionToProto(s runbox.SessionInfo) *runboxv1.Session {
	p := &runboxv1.Session{Name: s.Name, EnvVars: int32(s.EnvVars), Execs: int32(s.Execs)}
	p.Cwd, p.CwdRaw = textfield.Split(s.Cwd)
	return p
}

// SessionFromProto converts a wire Session; nil gives the zero SessionInfo.
func SessionFromProto(p *runboxv1.Session) runbox.SessionInfo {
	if p == nil {
		return runbox.SessionInfo{}
	}
	return runbox.SessionInfo{Name: p.GetName(), Cwd: textfield.Join(p.GetCwd(), p.GetCwdRaw()), EnvVars: int(p.GetEnvVars()), Execs: int(p.GetExecs())}
}
