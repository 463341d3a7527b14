package supervisor

// retainedRings is an exited exec whose replay rings count against
// Config.RetainedOutputBytes, with the bytes they held when it ended.
type retainedRings struct {
	e     *Exec
	bytes int
}

// retain counts e's rings (e has just ended) against the budget of
// retained output, and lets go of the oldest exited execs' rings past it.
// Execs the sweep has forgotten leave the count.
func (s *Supervisor) retain(e *Exec) {
	n := e.out.ringBytes()
	var drop []*Exec
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
	s.mu.Unlock()
	for _, old := range drop {
		old.out.dropRings()
	}
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
