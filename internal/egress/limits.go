package egress

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Bounds of a sandbox's egress: how many of its connections may be in
// flight through the proxy at once, at every stage. Each connection costs
// outside the sandbox's memory and pids limits (in runboxd, which the OOM
// killer spares, and in the host side, which may be serve's own process):
// a goroutine, buffers, descriptors, a DNS lookup. So both runboxd and the
// host side count their own, neither trusting the other's count, and a
// connection past a bound is refused at once with an answer naming the
// limit (RuleTooManyConnections), never queued.
const (
	// MaxConns bounds the connections a sandbox has carried at once
	// (tunnels and plain requests, allowed and spliced): more than a
	// package manager's or a browser's parallel downloads (tens), far
	// below a host's descriptor limits (two descriptors each on the host
	// side), so a hundred sandboxes at their bound stay within a default
	// host.
	MaxConns = 512
	// MaxPending bounds the connections not yet decided: accepted by
	// runboxd and still sending their proxy request (each has
	// headerTimeout), offered and waiting for the host side, or being
	// resolved and dialled there. A client sends its request at once, and
	// a decision takes a DNS answer and a dial, so few are ever pending;
	// a command that holds more is stalling on purpose (slowloris, names
	// with slow answers).
	MaxPending = 64
)

// RuleTooManyConnections starts the rule of a refusal past MaxConns or
// MaxPending, in the command's answer, the logs and the refusal log.
const RuleTooManyConnections = "too-many-connections"

// Timing of the bounds.
const (
	// requestTimeout bounds how long a command may take to send its proxy
	// request (CONNECT line, HTTP head, SOCKS5 greeting and request): a
	// silent client holds one of MaxPending slots for at most this long.
	requestTimeout = 10 * time.Second
	// lookupTimeout bounds the host side's lookup of a name, so a name
	// whose DNS answer does not come holds one of MaxPending slots that
	// long at most (Go's resolver alone may retry for longer).
	lookupTimeout = 10 * time.Second
	// refuseWriteTimeout bounds the write of a refusal's answer done by
	// the loop that accepts (runboxd) or receives (the host side)
	// connections: a fresh socket's buffer takes it at once, and one that
	// does not (a hostile peer's) stalls only that loop, briefly.
	refuseWriteTimeout = time.Second
	// refusalLogGap is the least time between two of runboxd's log lines
	// about connections it refused past a bound: a flood costs a counter,
	// not a line each.
	refusalLogGap = time.Second
)

// gate counts the connections at one stage against a bound.
type gate struct {
	mu sync.Mutex
	n  int
}

// enter counts one more connection unless max are in; false says the
// connection must be refused.
func (g *gate) enter(max int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n >= max {
		return false
	}
	g.n++
	return true
}

// leave counts one connection out.
func (g *gate) leave() {
	g.mu.Lock()
	g.n--
	g.mu.Unlock()
}

// count returns how many are in.
func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// sparseLog lets a flood of like events cost a counter each and a log
// line at most once a refusalLogGap, with the count since the last line.
type sparseLog struct {
	mu   sync.Mutex
	last time.Time
	n    int64
}

// note counts n events and returns how many to log now (0: none yet).
func (s *sparseLog) note(n int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += n
	now := time.Now()
	if now.Sub(s.last) < refusalLogGap {
		return 0
	}
	out := s.n
	s.n, s.last = 0, now
	return out
}

// tooManyCarried and tooManyPending are the rules of refusals past
// MaxConns and MaxPending (max: the bound in force).
func tooManyCarried(max int) string {
	return fmt.Sprintf("%s: the sandbox has %d connections open through the egress proxy, the most it may have at once", RuleTooManyConnections, max)
}

func tooManyPending(max int) string {
	return fmt.Sprintf("%s: the sandbox has %d connections waiting for a decision (their proxy request, the name's lookup, the dial), the most it may have at once", RuleTooManyConnections, max)
}

// refusalStatus is the HTTP status that answers a refusal by rule: 503
// for a bound (try again later), 403 for the policy.
func refusalStatus(rule string) int {
	if strings.Contains(rule, RuleTooManyConnections+":") {
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}

// answerNow answers a connection refused past a bound by a loop that must
// not wait on it, and closes it.
func answerNow(c net.Conn, via string, rule string) {
	c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	answerRefusal(c, via, http.StatusServiceUnavailable, "runbox egress: refused: "+rule)
	c.Close()
}
