// Package providertest is the provider conformance suite: the behaviour every
// [runbox.Provider] must show, written once and run against each provider.
//
// A provider's test is a few lines: it calls [Run] with a constructor for a
// [Fixture], which says how to create sandboxes and how to look at a
// sandbox's processes from outside runboxd's own bookkeeping. Every case
// creates its own sandbox, runs real processes in it through the real client
// and daemon, and removes it when the case ends.
//
// Survivor checks count processes by a marker unique to each case (a
// `sleep 3134NNNNNN` command line), because the packages' tests run in
// parallel and share the machine's process table.
//
// The suite asserts no wall-clock limits: it waits for effects against
// generous deadlines (a hang fails, slowness on a loaded machine does not),
// logs how long things took, and looks for survivors shortly after a result
// (the stop protocol confirms the tree is dead before it reports). It does
// not measure speed; benchmarks live beside each provider.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Fixture is what a provider supplies to the suite.
type Fixture struct {
	// Provider creates the sandboxes under test.
	Provider runbox.Provider
	// Spec is the base spec of every sandbox the suite creates; cases add
	// their own DaemonArgs to it.
	Spec runbox.SandboxSpec
	// CountProcesses counts live, non-zombie processes in sb whose command
	// line (arguments joined by spaces) contains marker, as seen from outside
	// runboxd's bookkeeping (for the host provider: the host's /proc).
	CountProcesses func(t testing.TB, sb runbox.Sandbox, marker string) int
	// Zombies counts processes in state Z that descend from sb's runboxd.
	Zombies func(t testing.TB, sb runbox.Sandbox) int
	// KillDaemon kills sb's runboxd with SIGKILL.
	KillDaemon func(t testing.TB, sb runbox.Sandbox)
	// DaemonRSS returns the resident set size of sb's runboxd in bytes. Nil
	// skips the memory bound of the large-output case.
	DaemonRSS func(t testing.TB, sb runbox.Sandbox) int64
	// RequireCgroup2 makes runboxd's falling back to /proc tracking (no
	// writable cgroup v2 hierarchy in the sandbox) a failure of the cgroup
	// case instead of a skip. A provider sets it where the machine is known
	// to give its sandboxes one (the host provider in CI sets
	// RUNBOX_REQUIRE_CGROUP2=1).
	RequireCgroup2 bool
	// PidsLimit says the provider enforces SandboxSpec.Pids; without it the
	// fork bomb case skips.
	PidsLimit bool
	// MemoryLimit says the provider enforces SandboxSpec.Memory; without it
	// the OOM case skips.
	MemoryLimit bool
	// ToolsSpec, when set, is the spec of the sandboxes of the cases that
	// need git and python3 inside (GitNoPrompt, LoopbackListener), for a
	// provider whose Spec lacks them (docker's busybox image); nil uses
	// Spec. ToolsMissing says why the provider has no such spec here, and
	// how to make one.
	ToolsSpec    *runbox.SandboxSpec
	ToolsMissing string
	// NoLimitsReason says why PidsLimit or MemoryLimit is false where the
	// provider has such limits but cannot enforce them here, and how to make
	// the cases run; the skip says it.
	NoLimitsReason string
	// DialMarker, where the provider's Dialer starts a process in the
	// sandbox for each stream (docker's and kubernetes' exec of runboxd
	// proxy), is text of that process's command line, which CountProcesses
	// sees only in this sandbox: the forward case checks that the streams
	// it opened end with it. Empty where dialing starts no process there.
	DialMarker string
	// Load runs the load cases, Stress and Soak (minutes of mixed commands
	// on one sandbox each); without it they skip. CI runs them on host,
	// local and docker.
	Load bool
}

// Liveness bounds and settle times named by the acceptance list. They bound
// how long the suite waits for something that must happen; none is a speed
// target.
const (
	// survivorDelay is how long after a result the suite looks for survivors:
	// the stop protocol confirms the tree is dead before it reports.
	survivorDelay = 100 * time.Millisecond
	// backgroundBound is how soon `sleep & echo started` must return. The
	// drain cap makes it about 200 ms; an exec held by the background
	// sleep's inherited pipe would take the sleep's 52 minutes, so a bound
	// this loose still tells the two apart on a loaded machine.
	backgroundBound = 10 * time.Second
	// settleBound is how long the suite polls for the daemon's counters to
	// return to their baseline after a workload.
	settleBound = 5 * time.Second
	// caseTimeout bounds any single case's context, so a hung daemon fails
	// the case instead of the whole test binary.
	caseTimeout = 3 * time.Minute
)

// lightParallel is how many light cases run at once. A light case mostly
// waits (timeouts of a second or two, sleeps, polls, a sandbox's start), so
// the suite runs more of them at once than -test.parallel (GOMAXPROCS: 2 on
// CI's machine) would let t.Parallel subtests run. Each still has its own
// sandbox and its own markers, and every bound it checks is a liveness
// bound generous enough for a loaded machine.
const lightParallel = 4

// testCase is one named behaviour of the suite.
type testCase struct {
	name string
	run  func(t *testing.T, fx Fixture)
	// heavy cases load the machine (thousands of execs, a gigabyte of
	// output); they run one at a time before the light cases run, up to
	// lightParallel at once.
	heavy bool
}

// SkipCasesEnv, when set, is a regular expression: the suite's cases whose
// names match it are skipped, saying so. provider/docker/podmantest sets it
// for a run whose cases would take the very same path as another run's
// (runboxd alone, over the same socket stream).
const SkipCasesEnv = "RUNBOX_CONFORMANCE_SKIP"

// Run runs every case of the suite as a subtest of t: the heavy ones one at a
// time, then the rest, lightParallel at a time. newFixture is called once per
// case, so each case may get its own provider state.
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	var skip *regexp.Regexp
	if expr := os.Getenv(SkipCasesEnv); expr != "" {
		var err error
		if skip, err = regexp.Compile(expr); err != nil {
			t.Fatalf("%s=%q: %v", SkipCasesEnv, expr, err)
		}
	}
	var light []testCase
	for _, tc := range cases() {
		if skip != nil && skip.MatchString(tc.name) {
			t.Run(tc.name, func(t *testing.T) { t.Skipf("skipped by %s=%s", SkipCasesEnv, skip) })
			continue
		}
		if !tc.heavy {
			light = append(light, tc)
			continue
		}
		t.Run(tc.name, func(t *testing.T) { runCase(t, tc, newFixture) })
	}
	// t.Run may be called from several goroutines at once; the light cases
	// are not t.Parallel subtests, so -test.parallel does not bound them:
	// slots does.
	slots := make(chan struct{}, lightParallel)
	var wg sync.WaitGroup
	for _, tc := range light {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t.Run(tc.name, func(t *testing.T) { runCase(t, tc, newFixture) })
		})
	}
	wg.Wait()
}

// runCase runs one case on a fixture of its own.
func runCase(t *testing.T, tc testCase, newFixture func(t *testing.T) Fixture) {
	fx := newFixture(t)
	if fx.Provider == nil || fx.CountProcesses == nil || fx.Zombies == nil || fx.KillDaemon == nil {
		t.Fatal("providertest: fixture needs Provider, CountProcesses, Zombies and KillDaemon")
	}
	tc.run(t, fx)
}

// sandbox is a sandbox created for one case, with a client to it.
type sandbox struct {
	fx      Fixture
	sb      runbox.Sandbox
	c       *client.Client
	removed bool
	mu      sync.Mutex
	closers map[*client.Client]func()
}

// newSandbox creates a sandbox with the fixture's spec plus daemonArgs, and
// removes it when the test ends.
func newSandbox(t *testing.T, fx Fixture, daemonArgs ...string) *sandbox {
	t.Helper()
	spec := fx.Spec
	spec.DaemonArgs = append(append([]string(nil), fx.Spec.DaemonArgs...), daemonArgs...)
	return newSandboxSpec(t, fx, spec)
}

// newSandboxSpec creates a sandbox with spec, and removes it when the test
// ends.
func newSandboxSpec(t *testing.T, fx Fixture, spec runbox.SandboxSpec) *sandbox {
	t.Helper()
	daemonArgs := spec.DaemonArgs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := fx.Provider.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create sandbox (daemon args %q): %v", daemonArgs, err)
	}
	s := &sandbox{fx: fx, sb: sb}
	t.Cleanup(func() {
		if s.removed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := fx.Provider.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("remove sandbox %s: %v", sb.ID, err)
		}
	})
	s.c = s.newClient(t)
	return s
}

// newClient opens another client to the sandbox, closed when the test ends.
func (s *sandbox) newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	return s.newClientDial(t, s.fx.Provider.Dialer(s.sb), opts...)
}

// newClientDial opens a client over dial, closed when the test ends.
func (s *sandbox) newClientDial(t *testing.T, dial runbox.Dialer, opts ...client.Option) *client.Client {
	t.Helper()
	c := client.New(dial, append([]client.Option{client.WithSandboxName(s.sb.ID)}, opts...)...)
	closeOnce := sync.OnceFunc(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	s.mu.Lock()
	if s.closers == nil {
		s.closers = make(map[*client.Client]func())
	}
	s.closers[c] = closeOnce
	s.mu.Unlock()
	t.Cleanup(closeOnce)
	return c
}

// closeClient closes c now (its cleanup then does nothing).
func (s *sandbox) closeClient(c *client.Client) {
	s.mu.Lock()
	closeOnce := s.closers[c]
	s.mu.Unlock()
	closeOnce()
}

// remove removes the sandbox now (the cleanup then does nothing).
func (s *sandbox) remove(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.closeClient(s.c)
	if err := s.fx.Provider.Remove(ctx, s.sb, false); err != nil {
		t.Fatalf("remove sandbox %s: %v", s.sb.ID, err)
	}
	s.removed = true
}

// info asks the daemon for its counters.
func (s *sandbox) info(t *testing.T, c *client.Client) runbox.DaemonInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	return info
}

// exec runs command and fails the test on any error (a non-zero exit is
// not an error).
func (s *sandbox) exec(t *testing.T, command string, opts ...client.ExecOption) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	res, err := s.c.Exec(ctx, command, opts...)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

// count counts the sandbox's live processes carrying marker.
func (s *sandbox) count(t *testing.T, marker string) int {
	t.Helper()
	return s.fx.CountProcesses(t, s.sb, marker)
}

// noSurvivors checks, survivorDelay after a result, that no process carrying
// marker is alive.
func (s *sandbox) noSurvivors(t *testing.T, marker string) {
	t.Helper()
	time.Sleep(survivorDelay)
	if n := s.count(t, marker); n != 0 {
		t.Errorf("%d process(es) with %q still alive %v after the result", n, marker, survivorDelay)
	}
}

// randDigits returns n random decimal digits.
func randDigits(n int) string {
	b := make([]byte, n)
	for i := range b {
		d, err := rand.Int(rand.Reader, big.NewInt(10))
		if err != nil {
			panic(err)
		}
		b[i] = byte('0' + d.Int64())
	}
	return string(b)
}

// newMarker returns a sleep command unique to one case, e.g.
// "sleep 3134123456": it sleeps for about a century, so anything carrying it
// that is still alive after a stop is a survivor. All markers have the same
// length, so none is a prefix of another, and none starts with 31337, the
// marker other packages' tests may use.
func newMarker() string {
	return "sleep 3134" + randDigits(6)
}

// newID returns a random exec id.
func newID(prefix string) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// tempPath returns a path under the sandbox's /tmp unique to this call.
func tempPath(name string) string {
	return "/tmp/runbox-providertest-" + name + "-" + randDigits(10)
}

// poll calls cond every 20 ms until it returns true or bound passes, and
// reports whether it did.
func poll(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe formats the parts of a result that identify how it ended.
func describe(r runbox.Result) string {
	return fmt.Sprintf("exit=%d signal=%q timed_out=%v cancelled=%v idle=%v stdout=%q stderr=%q",
		r.ExitCode, r.Signal, r.TimedOut, r.Cancelled, r.IdleTimedOut, clip(r.Stdout), clip(r.Stderr))
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	if len(b) > 200 {
		return append(append([]byte(nil), b[:200]...), "..."...)
	}
	return b
}
