package supervisor

// retainedRings is an exited exec whose replay rings count against
// Config.RetainedOutputBytes, with the bytes they held when it ended.
type retainedRings struct {
	e     *Exec
	bytes int
}

// retainedResult is an exited exec whose Result (and the exec itself)
// counts against Config.RetainedResultBytes.
type retainedResult struct {
	e     *Exec
	bytes int
}

// retain counts e's rings and Result (e has just ended) against the
// budgets of retained output and retained results: past the first the
// oldest exited execs' rings are let go, past the second the oldest exited
// execs are forgotten (as if their retention had passed). Execs the sweep
// has forgotten leave both counts.
func (s *Supervisor) retain(e *Exec) {
	n := e.out.ringBytes()
	rn := e.resultBytes()
	var drop, forget []*Exec
	s.mu.Lock()
	s.retained = append(s.retained, retainedRings{e, n})
	s.retainedB += n
	for len(s.retained) > 1 && (s.retainedB > s.cfg.RetainedOutputBytes || s.execs[s.retained[0].e.id] != s.retained[0].e) {
		old := s.retained[0]
		s.retained[0] = retainedRings{}
		s.retained = s.retained[1:]
		s.retainedB -= old.bytes
		if s.execs[old.e.id] == old.e {
			drop = append(drop, old.e)
		}
	}
	s.results = append(s.results, retainedResult{e, rn})
	s.resultsB += rn
	for len(s.results) > 1 && (s.resultsB > s.cfg.RetainedResultBytes || s.execs[s.results[0].e.id] != s.results[0].e) {
		old := s.results[0]
		s.results[0] = retainedResult{}
		s.results = s.results[1:]
		s.resultsB -= old.bytes
		if s.execs[old.e.id] == old.e {
			forget = append(forget, old.e)
		}
	}
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
