package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
)

// reapLoop runs the reaper every ReapInterval until the server closes.
func (s *Server) reapLoop() {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
			s.reap(s.bg)
		}
	}
}

// reap retries the cleanups that failed (see cleanupQueue), then makes
// one pass over every tenant's sandboxes:
//   - one past its max lifetime is removed (its execs stopped with the
//     stop protocol);
//   - one idle past its TTL (no exec running, no call in flight, and
//     runboxd itself running nothing, not even processes an ended exec
//     left in the background unless Config.IdleIgnoresBackground) is
//     removed;
//   - one whose runboxd is gone is marked lost.
//
// A paused sandbox is only checked for its max lifetime.
//
// Each removal is audited as "reap" with the reason.
func (s *Server) reap(ctx context.Context) {
	s.retryCleanups(ctx)
	recs, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		s.log.Error("reaper: list sandboxes", "err", err)
		return
	}
	now := s.now()
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		var spec runboxv1.SandboxSpec
		if err := protojson.Unmarshal([]byte(rec.Spec), &spec); err != nil {
			s.log.Error("reaper: sandbox spec", "sandbox", rec.ID, "err", err)
			continue
		}
		if life := time.Duration(spec.MaxLifetimeMs) * time.Millisecond; life > 0 && now.Sub(rec.Created) >= life {
			s.reapOne(ctx, rec, false, "max_lifetime", fmt.Sprintf("max lifetime %v reached", life))
			continue
		}
		if rec.State == registry.StateLost || rec.Paused {
			// A paused sandbox is neither idle (its clocks stop) nor
			// lost (a frozen runboxd may not answer): its resume
			// counts as a use.
			continue
		}
		if ttl := time.Duration(spec.IdleTtlMs) * time.Millisecond; ttl > 0 {
			if last, idle := s.idleSince(rec.ID, rec.LastUsed); idle && now.Sub(last) >= ttl && s.daemonIdle(ctx, rec) {
				s.reapOne(ctx, rec, true, "idle", fmt.Sprintf("idle for %v (idle TTL %v)", now.Sub(last).Round(time.Millisecond), ttl))
				continue
			}
		}
		s.checkAlive(rec)
	}
}

func (s *Server) reapOne(ctx context.Context, rec registry.Sandbox, onlyIdle bool, reason, detail string) {
	err := s.removeSandbox(ctx, rec, rec.State == registry.StateLost, registry.KindReap, detail, onlyIdle)
	if connect.CodeOf(err) == connect.CodeAborted {
		return // in use again: not idle after all
	}
	if err != nil {
		s.log.Error("reaper: remove sandbox", "sandbox", rec.ID, "err", err)
		return
	}
	s.metrics.reaped.WithLabelValues(reason).Inc()
}

// daemonIdle asks rec's runboxd whether it runs an exec: the server's own
// tracking is not the only word on "never reap a sandbox with a running
// exec". Processes an ended exec left running (a server started in the
// background) count as activity too, unless Config.IdleIgnoresBackground.
// A sandbox that does not answer is not idle (checkAlive decides whether
// it is lost).
func (s *Server) daemonIdle(ctx context.Context, rec registry.Sandbox) bool {
	up, err := s.upstreamFor(ctx, rec)
	if err != nil || up == nil {
		return false
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := up.rpc.Info(ictx, connect.NewRequest(&runboxv1.InfoRequest{}))
	if err != nil || info.Msg.GetRunning() != 0 {
		return false
	}
	if s.cfg.IdleIgnoresBackground {
		return true
	}
	list, err := up.rpc.List(ictx, connect.NewRequest(&runboxv1.ListRequest{}))
	if err != nil {
		return false
	}
	for _, e := range list.Msg.GetExecs() {
		if e.GetLiveProcesses() > 0 {
			return false
		}
	}
	return true
}

// checkAlive marks rec lost when its provider no longer has it or its
// runboxd does not answer.
func (s *Server) checkAlive(rec registry.Sandbox) { s.checkLost(rec) }
