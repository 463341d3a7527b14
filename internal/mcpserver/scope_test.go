package mcpserver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// These tests drive `runbox mcp` with the local provider, as an attacker
// model would: each asks for what the operator did not give it.

// startLocal runs `runbox mcp --provider local` (no --allow-host) in a
// fresh home, skipping where no local sandbox can run (failing with
// RUNBOX_REQUIRE_LOCAL=1). At the end, no local sandbox may be left but the
// ones the test lists in keep.
func startLocal(t *testing.T, args ...string) *stdio {
	t.Helper()
	home, workdir := testHome(t)
	t.Cleanup(func() {
		p := &local.Provider{Home: home}
		sbs, _ := p.List(context.Background())
		for _, sb := range sbs {
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	s := startStdioHome(t, home, workdir, append([]string{"--provider", "local"}, args...)...)
	res := s.call(t, "sandbox_list", nil)
	if res.IsError {
		t.Fatalf("sandbox_list: %s", mcptest.ResultText(res))
	}
	probe := s.call(t, "exec", map[string]any{"command": "true"})
	if probe.IsError {
		why := mcptest.ResultText(probe)
		if os.Getenv("RUNBOX_REQUIRE_LOCAL") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_LOCAL=1 but: %s", why)
		}
		t.Skipf("no local sandbox here: %s (set RUNBOX_REQUIRE_LOCAL=1 to make this a failure)", why)
	}
	return s
}

// runboxUp makes a local sandbox named name in home with `runbox up`, as
// the operator would, with a file holding secret in its workspace, and
// returns its id.
func runboxUp(t *testing.T, home, name, secret string) (id, workdir string) {
	t.Helper()
	workdir = t.TempDir()
	if err := os.WriteFile(filepath.Join(workdir, "secret.txt"), []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(runboxBin, "up", "--provider", "local", "--name", name, "--workdir", workdir)
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("runbox up: %v", err)
	}
	return strings.TrimSpace(string(out)), workdir
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// A model cannot choose the provider: sandbox_create does not offer one
// when the server has one, and naming host (a shell on the host with no
// isolation) is a tool error naming what is offered; no host sandbox is
// made. runbox mcp --provider host itself needs --allow-host.
func TestMCPModelCannotChooseHost(t *testing.T) {
	s := startLocal(t)
	tools, err := s.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name != "sandbox_create" {
			continue
		}
		b, _ := tool.InputSchema.(map[string]any)
		if props, _ := b["properties"].(map[string]any); props["provider"] != nil {
			t.Errorf("sandbox_create offers a provider: %v", props["provider"])
		}
	}
	for _, p := range []string{"host", "docker", "nonesuch"} {
		msg := failing(t, s.cs, "sandbox_create", map[string]any{"provider": p})
		if !strings.Contains(msg, "offers only local") {
			t.Errorf("provider %s: %q", p, msg)
		}
	}
	if sbs := hostSandboxes(t, s.home); len(sbs) != 0 {
		t.Errorf("host sandboxes made: %v", sbs)
	}

	// The operator's side: host needs --allow-host, also through a bound
	// host sandbox.
	cmd := exec.Command(runboxBin, "mcp", "--provider", "host")
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+s.home)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--allow-host") {
		t.Errorf("runbox mcp --provider host without --allow-host: %v %s", err, out)
	}
}

// A model sees and controls only its session's sandboxes. An operator's
// sandbox (runbox up), named by its id, an id prefix or its name, answers
// every tool exactly as a sandbox that never existed, and is still there,
// untouched, afterwards.
func TestMCPModelCannotReachOtherSandboxes(t *testing.T) {
	s := startLocal(t)
	secret := randomName("secret-")
	name := randomName("victim-")
	id, victimDir := runboxUp(t, s.home, name, secret)
	t.Cleanup(func() {
		p := &local.Provider{Home: s.home}
		if sb, err := p.Get(context.Background(), id); err == nil {
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	m := marker()
	ghost := "ghost" + m
	unknown := func(key string) map[string]string {
		return map[string]string{
			"exec":             failing(t, s.cs, "exec", map[string]any{"command": "cat secret.txt; touch pwned; sleep " + m, "timeout_seconds": 1, "sandbox": key}),
			"exec_list":        failing(t, s.cs, "exec_list", map[string]any{"sandbox": key}),
			"exec_cancel":      failing(t, s.cs, "exec_cancel", map[string]any{"id": "x", "sandbox": key}),
			"file_read":        failing(t, s.cs, "file_read", map[string]any{"path": "secret.txt", "sandbox": key}),
			"file_write":       failing(t, s.cs, "file_write", map[string]any{"path": "pwned", "content": "x", "sandbox": key}),
			"file_edit":        failing(t, s.cs, "file_edit", map[string]any{"path": "secret.txt", "old_string": secret, "new_string": "x", "sandbox": key}),
			"file_list":        failing(t, s.cs, "file_list", map[string]any{"sandbox": key}),
			"file_delete":      failing(t, s.cs, "file_delete", map[string]any{"path": "secret.txt", "sandbox": key}),
			"sandbox_remove":   failing(t, s.cs, "sandbox_remove", map[string]any{"sandbox": key, "force": true}),
			"sandbox_pause":    failing(t, s.cs, "sandbox_pause", map[string]any{"sandbox": key}),
			"sandbox_resume":   failing(t, s.cs, "sandbox_resume", map[string]any{"sandbox": key}),
			"sandbox_snapshot": failing(t, s.cs, "sandbox_snapshot", map[string]any{"sandbox": key, "name": "stolen"}),
			"sandbox_fork":     failing(t, s.cs, "sandbox_fork", map[string]any{"sandbox": key}),
			"network_set":      failing(t, s.cs, "network_set", map[string]any{"sandbox": key, "allow": []string{}}),
		}
	}
	want := unknown(ghost)
	for _, key := range []string{id, id[:8], name} {
		for tool, msg := range unknown(key) {
			if strings.ReplaceAll(msg, key, ghost) != want[tool] {
				t.Errorf("%s on %s: %q; a sandbox that never existed: %q", tool, key, msg, want[tool])
			}
			if strings.Contains(msg, secret) {
				t.Errorf("%s on %s leaked the secret: %q", tool, key, msg)
			}
		}
	}
	type list struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	for _, sb := range ok[list](t, s.cs, "sandbox_list", nil).Sandboxes {
		if sb.ID == id {
			t.Errorf("sandbox_list shows the operator's sandbox %s", id)
		}
	}
	// The victim is alive and untouched.
	sb, err := (&local.Provider{Home: s.home}).Get(context.Background(), id)
	if err != nil || !sb.Alive {
		t.Fatalf("the operator's sandbox after the attempts: %+v %v", sb, err)
	}
	if b, err := os.ReadFile(filepath.Join(victimDir, "secret.txt")); err != nil || string(b) != secret {
		t.Errorf("secret.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(victimDir, "pwned")); err == nil {
		t.Error("the model wrote into the operator's sandbox")
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes of the model's command run", n)
	}
	// The session's own sandboxes it does reach, and it removes them.
	own := ok[struct {
		ID string `json:"id"`
	}](t, s.cs, "sandbox_create", map[string]any{"name": randomName("own-")})
	ok[execResult](t, s.cs, "exec", map[string]any{"command": "true", "sandbox": own.ID})
	ok[struct{}](t, s.cs, "sandbox_remove", map[string]any{"sandbox": own.ID})
}

// A session bound with --sandbox has that sandbox alone: no sandbox_create
// or sandbox_remove, another sandbox is unknown, and the bound one outlives
// the session.
func TestMCPBoundSandbox(t *testing.T) {
	home, workdir := testHome(t)
	t.Cleanup(func() {
		p := &local.Provider{Home: home}
		sbs, _ := p.List(context.Background())
		for _, sb := range sbs {
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	boundName, otherName := randomName("bound-"), randomName("other-")
	bound, _ := runboxUp(t, home, boundName, "mine")
	other, _ := runboxUp(t, home, otherName, "theirs")
	s := startStdioHome(t, home, workdir, "--provider", "local", "--sandbox", boundName)
	tools, err := s.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "sandbox_create" || tool.Name == "sandbox_remove" || tool.Name == "sandbox_fork" {
			t.Errorf("a bound session is offered %s", tool.Name)
		}
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "cat secret.txt"}); r.Sandbox != bound || r.Stdout != "mine" {
		t.Errorf("exec in the bound sandbox: %+v", r)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "true", "sandbox": boundName}); r.Sandbox != bound {
		t.Errorf("exec naming the bound sandbox: %+v", r)
	}
	for _, key := range []string{other, otherName} {
		if msg := failing(t, s.cs, "file_read", map[string]any{"path": "secret.txt", "sandbox": key}); !strings.Contains(msg, "no such sandbox") || strings.Contains(msg, "theirs") {
			t.Errorf("file_read in another sandbox: %q", msg)
		}
	}
	s.close(t)
	p := &local.Provider{Home: home}
	for _, id := range []string{bound, other} {
		if sb, err := p.Get(context.Background(), id); err != nil || !sb.Alive {
			t.Errorf("sandbox %s after the bound session: %+v %v", id, sb, err)
		}
	}
}

// A model cannot ask for no limit, nor above the operator's ceilings, nor
// for a network mode the operator did not allow: each is a tool error
// naming the ceiling, and no sandbox is made.
func TestMCPCeilings(t *testing.T) {
	s := startLocal(t, "--max-memory", "1G", "--max-pids", "500", "--max-cpus", "1", "--max-timeout", "10s")
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"memory_mb": 0}, "ask for 1 to 1024 (the ceiling)"},
		{map[string]any{"memory_mb": -1}, "ask for 1 to 1024 (the ceiling)"},
		{map[string]any{"memory_mb": 1 << 40}, "ask for 1 to 1024 (the ceiling)"},
		{map[string]any{"pids": 0}, "ask for 1 to 500 (the ceiling)"},
		{map[string]any{"pids": 100000}, "ask for 1 to 500 (the ceiling)"},
		{map[string]any{"cpus": 0}, "at most 1 (the ceiling)"},
		{map[string]any{"cpus": 64}, "at most 1 (the ceiling)"},
		{map[string]any{"network": "host"}, "network \"host\": ask for none"},
	} {
		if msg := failing(t, s.cs, "sandbox_create", c.args); !strings.Contains(msg, c.want) {
			t.Errorf("sandbox_create %v: %q, want %q", c.args, msg, c.want)
		}
	}
	if msg := failing(t, s.cs, "exec", map[string]any{"command": "true", "timeout_seconds": 1e9}); !strings.Contains(msg, "at most 10 seconds (the ceiling)") {
		t.Errorf("exec for 1e9 s: %q", msg)
	}
	sbs, err := (&local.Provider{Home: s.home}).List(context.Background())
	if err != nil || len(sbs) != 1 { // the default sandbox startLocal's probe made
		t.Errorf("sandboxes: %v %v", sbs, err)
	}
	// Within the ceilings it works.
	ok[struct{}](t, s.cs, "sandbox_create", map[string]any{"memory_mb": 512, "pids": 100, "cpus": 0.5, "network": "none"})
}

// With several providers on offer (runbox serve passes its operator's
// list), sandbox_create lists them and refuses any other, naming them.
func TestMCPProviderList(t *testing.T) {
	home, workdir := testHome(t)
	place := &mcpserver.Providers{Providers: []runbox.Provider{&host.Provider{Home: home}}, Default: host.ProviderName}
	srv := mcpserver.New(place, mcpserver.Config{Provider: host.ProviderName, Providers: []string{"docker"},
		Spec: runbox.SandboxSpec{Workdir: workdir}})
	ct, st := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background(), st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "v0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "sandbox_create" {
			props, _ := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
			if p, _ := props["provider"].(map[string]any); fmt.Sprint(p["enum"]) != "[host docker]" {
				t.Errorf("provider's schema: %v", p)
			}
		}
	}
	if msg := failing(t, cs, "sandbox_create", map[string]any{"provider": "local"}); !strings.Contains(msg, `provider "local": this server offers only host, docker (leave provider out for host)`) {
		t.Errorf("provider local: %q", msg)
	}
	cs.Close()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// A sandbox the session made that is found lost stays the session's: it
// is listed as lost, and removed when the session ends (before, it was
// forgotten and left behind).
func TestMCPLostSandboxRemovedAtEnd(t *testing.T) {
	s := startStdio(t)
	made := ok[struct {
		ID string `json:"id"`
	}](t, s.cs, "sandbox_create", nil)
	sb, err := (&host.Provider{Home: s.home}).Get(context.Background(), made.ID)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(sb.Detail["pid"])
	if err != nil {
		t.Fatalf("runboxd's pid %q: %v", sb.Detail["pid"], err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "exec finds the sandbox lost", func() bool {
		res := s.call(t, "exec", map[string]any{"command": "true", "sandbox": made.ID})
		return res.IsError && strings.Contains(mcptest.ResultText(res), "lost")
	})
	type list struct {
		Sandboxes []struct {
			ID    string `json:"id"`
			Alive bool   `json:"alive"`
		} `json:"sandboxes"`
	}
	if l := ok[list](t, s.cs, "sandbox_list", nil); len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != made.ID || l.Sandboxes[0].Alive {
		t.Errorf("sandbox_list after the loss: %+v", l)
	}
	s.close(t)
	if sbs := hostSandboxes(t, s.home); len(sbs) != 0 {
		t.Errorf("sandboxes left after the session: %v", sbs)
	}
}
