package server

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/registry"
)

// execKey names an exec: exec ids are unique within a sandbox.
type execKey struct{ sandbox, exec string }

// execTrack is an exec the server started (or found unfinished in the
// audit log at start) and has not yet seen end. Each has an open audit row
// that its result completes: a call streaming the exec records it when it
// sees the exit event; when the last such call ends first (the client left,
// the server stopped), a watcher attaches to the exec to wait for it.
//
// The track is published (for the quota) before its row is opened; ready
// is closed once the row is open (or failed to open). Every reader of row
// waits for ready first, and a Run joining the track waits too, so no call
// runs the exec before its row exists: a result is never skipped for a row
// still at 0 (and later closed as lost). Fields other than ready and row
// are guarded by s.mu; row is written under s.mu before ready is closed.
type execTrack struct {
	tenant   string
	ready    chan struct{}
	row      int64 // the audit row, 0 when there is none
	timeout  time.Duration
	streams  int  // calls following the exec now
	watching bool // a watcher follows it
	// shared is set when another Run joined the track: an exec that Run
	// started is this row's exec, so an "attached" start is no reuse.
	shared bool
}

// rowOf waits until t's row is open and returns it (0: none).
func (s *Server) rowOf(t *execTrack) int64 {
	<-t.ready
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.row
}

// beginExec registers an exec about to be run through r: counted against
// the tenant's quota, with an audit row. A Run re-issued for an exec the
// server already tracks (a client reconnecting) joins it instead. newRow is
// set when this call opened the row.
func (s *Server) beginExec(ctx context.Context, r *routed, spec *runboxv1.ExecSpec) (*execTrack, bool, error) {
	key := execKey{r.rec.ID, spec.Id}
	tenant := tenantOf(ctx)
	s.mu.Lock()
	if t := s.execs[key]; t != nil {
		t.streams++
		t.shared = true
		s.mu.Unlock()
		select { // the exec runs only once its row exists
		case <-t.ready:
		case <-ctx.Done(): // the caller's leaveExec counts this call out
			return nil, false, apiError(ctx.Err())
		}
		return t, false, nil
	}
	if max := s.quotas(tenant).MaxExecs; max > 0 {
		if n := s.runningOf(tenant.Name); n >= max {
			s.mu.Unlock()
			return nil, false, quota(tenant.Name, "max_execs (concurrent execs)", n, max)
		}
	}
	t := &execTrack{tenant: tenant.Name, ready: make(chan struct{}), timeout: time.Duration(spec.TimeoutMs) * time.Millisecond, streams: 1}
	s.execs[key] = t
	s.mu.Unlock()

	row, created, err := s.store.OpenExec(ctx, tenant.Name, r.rec.ID, spec.Id, commandText(spec))
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(t.ready)
	if err != nil {
		if s.execs[key] == t {
			delete(s.execs, key)
		}
		return nil, false, apiError(err)
	}
	t.row = row
	return t, created, nil
}

// commandText is an exec's command as the audit log shows it.
func commandText(spec *runboxv1.ExecSpec) string {
	switch {
	case spec.Command != "":
		return spec.Command
	case len(spec.CommandRaw) > 0:
		return strings.ToValidUTF8(string(spec.CommandRaw), "\uFFFD")
	case len(spec.Argv) > 0:
		return strings.Join(spec.Argv, " ")
	}
	parts := make([]string, len(spec.ArgvRaw))
	for i, a := range spec.ArgvRaw {
		parts[i] = strings.ToValidUTF8(string(a), "\uFFFD")
	}
	return strings.Join(parts, " ")
}

// runningOf counts tenant's running execs; s.mu is held.
func (s *Server) runningOf(tenant string) int {
	n := 0
	for _, t := range s.execs {
		if t.tenant == tenant {
			n++
		}
	}
	return n
}

// runningIn counts the running execs of sandbox id; s.mu is held.
func (s *Server) runningIn(id string) int {
	n := 0
	for k := range s.execs {
		if k.sandbox == id {
			n++
		}
	}
	return n
}

// joinExec counts one more call following key, if the server tracks it.
func (s *Server) joinExec(key execKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.execs[key]; t != nil {
		t.streams++
		return true
	}
	return false
}

// finishExec records an exec's result (the first one wins) and stops
// tracking it.
func (s *Server) finishExec(key execKey, res *runboxv1.Result) {
	s.mu.Lock()
	t := s.execs[key]
	delete(s.execs, key)
	if t != nil {
		// A sandbox is in use until its exec ends: its idle TTL starts
		// now, not when the exec was started or last followed (an agent
		// that reads the result of a long command must find the sandbox).
		s.usageOf(key.sandbox).lastUsed = s.now()
	}
	s.mu.Unlock()
	if t == nil {
		return
	}
	outcome := registry.OutcomeExited
	switch {
	case res.GetTimedOut():
		outcome = registry.OutcomeTimedOut
	case res.GetCancelled():
		outcome = registry.OutcomeCancelled
	}
	s.metrics.execDone(t.tenant, outcome, res, t.timeout)
	row := s.rowOf(t)
	if row == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.store.FinishExec(ctx, row, registry.ExecResult{
		ExitCode: int(res.GetExitCode()), Signal: res.GetSignal(), TimedOut: res.GetTimedOut(),
		Cancelled: res.GetCancelled(), Killed: int(res.GetKilled()),
		StdoutBytes: res.GetStdoutBytes(), StderrBytes: res.GetStderrBytes(), Outcome: outcome,
	})
	if err != nil {
		s.log.Error("audit exec result", "sandbox", key.sandbox, "exec", key.exec, "err", err)
	}
}

// failExec ends an exec's row without a result: it never ran (refused),
// or its sandbox is gone (lost).
func (s *Server) failExec(key execKey, outcome, detail string) {
	s.mu.Lock()
	t := s.execs[key]
	delete(s.execs, key)
	s.mu.Unlock()
	if t == nil {
		return
	}
	s.metrics.execEnded(t.tenant, outcome)
	row := s.rowOf(t)
	if row == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.FinishExec(ctx, row, registry.ExecResult{ExitCode: -1, Outcome: outcome, Detail: detail}); err != nil {
		s.log.Error("audit exec", "sandbox", key.sandbox, "exec", key.exec, "err", err)
	}
}

// notNew is called when a Run this server counted as new attached to an
// exec runboxd already had (its id was reused after the exec ended and its
// row was closed): the row opened for it is dropped. When another Run
// joined the track, that Run may have started the exec: the row is its.
func (s *Server) notNew(key execKey, t *execTrack) {
	s.mu.Lock()
	row := t.row
	if t.shared || row == 0 {
		s.mu.Unlock()
		return
	}
	t.row = 0
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.DropExec(ctx, row); err != nil {
		s.log.Error("audit: drop exec row", "sandbox", key.sandbox, "exec", key.exec, "err", err)
	}
}

// leaveExec is called when a call following key ends. Unless it saw the
// exec end, and no other call follows it, a watcher takes over.
func (s *Server) leaveExec(key execKey) {
	s.mu.Lock()
	t := s.execs[key]
	if t == nil {
		s.mu.Unlock()
		return
	}
	t.streams--
	start := t.streams == 0 && !t.watching
	if start {
		t.watching = true
	}
	tenant := t.tenant
	s.mu.Unlock()
	if start {
		s.watch(key, tenant)
	}
}

// execsLost ends the rows of every exec of sandbox id (it is lost or gone).
func (s *Server) execsLost(id, why string) {
	s.mu.Lock()
	var keys []execKey
	for k := range s.execs {
		if k.sandbox == id {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	for _, k := range keys {
		s.failExec(k, registry.OutcomeLost, why)
	}
}

// watch follows the exec key to its end in the background and records its
// result. It gives up when the server stops (the next run resumes it).
func (s *Server) watch(key execKey, tenant string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		backoff := 50 * time.Millisecond
		for s.bg.Err() == nil {
			done, err := s.watchOnce(key, tenant)
			if done {
				return
			}
			s.log.Debug("watching exec", "sandbox", key.sandbox, "exec", key.exec, "err", err)
			select {
			case <-s.bg.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
}

// watchOnce attaches to the exec once; done is set once its row is closed.
func (s *Server) watchOnce(key execKey, tenant string) (done bool, err error) {
	rec, err := s.store.GetSandbox(s.bg, tenant, key.sandbox)
	if errors.Is(err, registry.ErrNotFound) {
		s.failExec(key, registry.OutcomeLost, "the sandbox was removed")
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if rec.State == registry.StateLost {
		s.failExec(key, registry.OutcomeLost, rec.LostReason)
		return true, nil
	}
	up, err := s.upstreamFor(s.bg, rec)
	if err != nil {
		return false, err
	}
	if up == nil { // marked lost, which closed the row
		return true, nil
	}
	stream, err := up.rpc.Attach(s.bg, connect.NewRequest(&runboxv1.AttachRequest{Id: key.exec}))
	if err != nil {
		return s.watchFailed(key, rec, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if ex := stream.Msg().GetExited(); ex != nil {
			s.finishExec(key, ex.GetResult())
			return true, nil
		}
	}
	if stream.Err() == nil {
		return false, errors.New("stream ended before the exec's exit event")
	}
	return s.watchFailed(key, rec, stream.Err())
}

func (s *Server) watchFailed(key execKey, rec registry.Sandbox, err error) (bool, error) {
	if s.bg.Err() != nil {
		return true, nil
	}
	if sentinel, msg, _ := wire.FromConnectError(err); sentinel == runbox.ErrExecNotFound {
		s.failExec(key, registry.OutcomeLost, "runboxd no longer has the exec (did it restart?): "+msg)
		return true, nil
	}
	if !answered(err) {
		if lost := s.checkLost(rec); lost != nil {
			return true, nil // markLost closed the row
		}
	}
	return false, err
}

// resumeExecs starts a watcher for every exec the audit log shows as
// still running (a previous server run started it).
func (s *Server) resumeExecs(ctx context.Context) error {
	rows, err := s.store.OpenExecs(ctx)
	if err != nil {
		return err
	}
	for _, row := range rows {
		key := execKey{row.Sandbox, row.ExecID}
		s.mu.Lock()
		if s.execs[key] != nil {
			s.mu.Unlock()
			continue
		}
		s.execs[key] = &execTrack{tenant: row.Tenant, ready: closedChan, row: row.ID, watching: true}
		s.mu.Unlock()
		s.log.Info("resuming exec", "sandbox", row.Sandbox, "exec", row.ExecID, "tenant", row.Tenant)
		s.watch(key, row.Tenant)
	}
	return nil
}

// closedChan is a channel that is always closed: the ready of a track
// whose row already exists.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
