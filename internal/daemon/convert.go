package daemon

import (
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/supervisor"
)

// Event constructors for the Run and Attach streams. Field conversions live
// in package wire (shared with the client); these only wrap them in the
// ExecEvent oneof.

func startedEvent(e *supervisor.Exec, attached bool) *runboxv1.ExecEvent {
	return &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Started{Started: &runboxv1.Started{
		Id: e.ID(), Pid: int64(e.Pid()), Attached: attached,
	}}}
}

// outputEvent converts one OutputReader event: a chunk or a gap.
func outputEvent(ev supervisor.OutputEvent) *runboxv1.ExecEvent {
	if ev.Gap != nil {
		return &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Gap{Gap: wire.GapToProto(*ev.Gap)}}
	}
	return &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Output{Output: wire.ChunkToProto(*ev.Chunk)}}
}

func exitedEvent(e *supervisor.Exec) *runboxv1.ExecEvent {
	return &runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Exited{Exited: &runboxv1.Exited{
		Result: wire.ResultToProto(e.Result()),
	}}}
}
