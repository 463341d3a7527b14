package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/host"
)

// runboxBin is the runbox binary TestMain built: the tests drive the real
// `runbox mcp` over stdio.
var runboxBin string

// TestMain builds runboxd (exported as $RUNBOX_RUNBOXD) and runbox, runs
// the tests, and fails the binary if goroutines leaked.
func TestMain(m *testing.M) { os.Exit(mainCode(m)) }

func mainCode(m *testing.M) int {
	defer providertest.RemoveBuild()
	rbd, err := providertest.BuildRunboxd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Setenv(providertest.RunboxdEnv, rbd)
	dir, err := os.MkdirTemp("", "runbox-mcp-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	runboxBin = filepath.Join(dir, "runbox")
	// runbox hands mcp, serve, token and audit to runbox-server beside it,
	// and the rest to runbox-full: build all three.
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/runbox/runbox/cmd/runbox", "github.com/runbox/runbox/cmd/runbox-full", "github.com/runbox/runbox/cmd/runbox-server")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build runbox: %v\n%s", err, out)
		return 2
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// testHome makes a fresh short RUNBOX_HOME (unix socket paths are limited
// to 107 bytes) and a workspace, and at the end fails the test if a sandbox
// is left in the home, then removes what is left.
func testHome(t *testing.T) (home, workdir string) {
	t.Helper()
	home, err := os.MkdirTemp("", "rbm")
	if err != nil {
		t.Fatal(err)
	}
	// The workspace must not be inside the home (a sandbox must not see
	// runbox's records).
	workdir, err = os.MkdirTemp("", "rbw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer os.RemoveAll(home)
		defer os.RemoveAll(workdir)
		p := &host.Provider{Home: home}
		sbs, err := p.List(context.Background())
		if err != nil {
			t.Errorf("list sandboxes left: %v", err)
		}
		for _, sb := range sbs {
			if !t.Failed() && !keptOnPurpose[sb.Name] {
				t.Errorf("sandbox %s (%s) left behind after its MCP session ended", sb.ID, sb.Name)
			}
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	return home, workdir
}

// keptOnPurpose names sandboxes tests make with keep, which outlive their
// sessions by design.
var keptOnPurpose = map[string]bool{"kept-on-purpose": true}

// stdio is a `runbox mcp` process and an SDK client session to it.
type stdio struct {
	cs      *mcp.ClientSession
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	home    string
	workdir string
	stderr  *lockedBuffer

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
}

// startStdio runs `runbox mcp --provider host --allow-host --workdir WS
// args...` with a fresh home and connects the Go SDK's client to it over
// stdio.
func startStdio(t *testing.T, args ...string) *stdio {
	t.Helper()
	home, workdir := testHome(t)
	return startStdioHome(t, home, workdir, args...)
}

// startStdioHome is startStdio with a given home and workspace.
func startStdioHome(t *testing.T, home, workdir string, args ...string) *stdio {
	t.Helper()
	s := &stdio{home: home, workdir: workdir, stderr: &lockedBuffer{}}
	s.cmd = exec.Command(runboxBin, append([]string{"mcp", "--provider", "host", "--allow-host", "--workdir", workdir}, args...)...)
	s.cmd.Env = append(os.Environ(), "RUNBOX_HOME="+home, "DOCKER_HOST=unix://"+home+"/no-docker.sock", "KUBECONFIG="+home+"/no-kubeconfig")
	s.cmd.Stderr = s.stderr
	c := mcp.NewClient(&mcp.Implementation{Name: "runbox-test", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress = append(s.progress, req.Params)
			s.mu.Unlock()
		},
	})
	// The pipes are the test's, so that a test can close runbox mcp's
	// stdin as a client that goes away does (the SDK's Close waits for the
	// calls in progress first).
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.stdin = stdin
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatalf("connect to runbox mcp: %v\nstderr: %s", err, s.stderr)
	}
	s.cs = cs
	t.Cleanup(func() { s.close(t) })
	return s
}

// close ends the session as a client that goes away does: it closes
// runbox mcp's stdin (whatever calls are in progress) and waits for the
// process to exit; runbox mcp cleans up before exiting.
func (s *stdio) close(t *testing.T) {
	t.Helper()
	if s.cs == nil {
		return
	}
	s.stdin.Close()
	var err error
	if s.cmd != nil { // nil: a test waited for it already
		err = s.cmd.Wait()
	}
	_ = s.cs.Close()
	s.cs = nil
	if err != nil {
		t.Errorf("runbox mcp: %v; stderr: %s", err, s.stderr)
	}
}

// call calls a tool and returns its result; a protocol error fails the test.
func (s *stdio) call(t *testing.T, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	return callTool(t, s.cs, tool, args)
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result.
func ok[T any](t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) T {
	t.Helper()
	res := callTool(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, mcptest.ResultText(res))
	}
	return decode[T](t, res)
}

// failing calls a tool that must fail as a tool error (isError) and
// returns its message.
func failing(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res := callTool(t, cs, tool, args)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded, want a tool error: %s", tool, args, mcptest.ResultText(res))
	}
	return mcptest.ResultText(res)
}

func decode[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	var out T
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode structured result %s: %v", b, err)
	}
	return out
}

// execResult is the exec tool's structured result, as a client reads it.
type execResult struct {
	ID          string  `json:"id"`
	Sandbox     string  `json:"sandbox"`
	State       string  `json:"state"`
	ExitCode    int     `json:"exit_code"`
	TimedOut    bool    `json:"timed_out"`
	Cancelled   bool    `json:"cancelled"`
	DurationMS  int64   `json:"duration_ms"`
	TimeoutSecs float64 `json:"timeout_seconds"`
	Stdout      string  `json:"stdout"`
	Stderr      string  `json:"stderr"`
	StdoutDrop  int64   `json:"stdout_dropped"`
	StdoutSpill string  `json:"stdout_spill"`
	StdoutBytes int64   `json:"stdout_bytes"`
	Cwd         string  `json:"cwd"`
	Killed      int     `json:"killed"`
}

// marker returns a sleep argument no other process on the machine uses,
// so processes can be counted on the host by their command line.
func marker() string {
	return fmt.Sprintf("1000.%06d", rand.IntN(1_000_000))
}

// procs counts live processes on this machine whose command line holds m.
func procs(t *testing.T, m string) int {
	t.Helper()
	n, err := providertest.ProcCount(m)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond every 20 ms until it holds or a generous deadline
// passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// hostSandboxes lists the host sandboxes recorded in home.
func hostSandboxes(t *testing.T, home string) []runbox.Sandbox {
	t.Helper()
	sbs, err := (&host.Provider{Home: home}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return sbs
}
