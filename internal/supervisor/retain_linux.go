package supervisor

// retainedQueue is the exited execs counted against one budget, oldest
// first, with what each is counted for.
type retainedQueue struct {
	execs []retainedExec
	bytes int
}

// retainedExec is an exited exec and what it is counted for.
type retainedExec struct {
	e     *Exec
	bytes int
}

// push counts e for n bytes.
func (q *retainedQueue) push(e *Exec, n int) {
	q.execs = append(q.execs, retainedExec{e, n})
	q.bytes += n
}

// trim lets the oldest execs leave the count while it is past limit (the
// newest always stays), and those the supervisor has forgotten as they
// come to the front. It returns those it let go that are still known.
// Called with s.mu held.
func (q *retainedQueue) trim(s *Supervisor, limit int) []*Exec {
	var out []*Exec
	for len(q.execs) > 1 && (q.bytes > limit || s.execs[q.execs[0].e.id] != q.execs[0].e) {
		old := q.execs[0]
		q.execs[0] = retainedExec{}
		q.execs = q.execs[1:]
		q.bytes -= old.bytes
		if s.execs[old.e.id] == old.e {
			out = append(out, old.e)
		}
	}
	return out
}

// retain counts e's rings and Result (e has just ended) against the
// budgets of retained output and retained results: past the first the
// oldest exited execs' rings are let go, past the second the oldest exited
// execs are forgotten (as if their retention had passed). Execs the sweep
// has forgotten leave both counts.
func (s *Supervisor) retain(e *Exec) {
	n := e.out.ringBytes()
	rn := e.resultBytes()
	s.mu.Lock()
	s.rings.push(e, n)
	drop := s.rings.trim(s, s.cfg.RetainedOutputBytes)
	s.results.push(e, rn)
	forget := s.results.trim(s, s.cfg.RetainedResultBytes)
	s.mu.Unlock()
	for _, old := range drop {
		old.out.dropRings()
	}
	for _, old := range forget {
		// An exec whose background processes still run stays (Cancel must
		// reach them) until the sweep forgets it; it is out of the count,
		// and there are no more such execs than processes left running.
		if !old.releaseIfEmpty() {
			continue
		}
		s.mu.Lock()
		if s.execs[old.id] == old {
			delete(s.execs, old.id)
		}
		s.mu.Unlock()
	}
}

// resultBytes is what the exited exec e is counted for against
// Config.RetainedResultBytes: its Result's head and tail, the stdin its
// spec keeps, and execOverhead for the rest of it.
func (e *Exec) resultBytes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.result.Stdout) + len(e.result.Stderr) + len(e.spec.Stdin) + execOverhead
}

// ringBytes is how many bytes the replay rings hold.
func (o *outputStore) ringBytes() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.rings[0].bytes + o.rings[1].bytes
}

// dropRings lets go of every chunk of the replay rings (an exited exec's,
// past the supervisor's budget): a reader that has not read them sees a
// Gap counting them. A reader holding a chunk keeps its buffer.
func (o *outputStore) dropRings() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.rings {
		for len(o.rings[i].chunks) > 0 {
			o.rings[i].evictOldest()
		}
	}
	o.broadcastLocked()
}
