package server_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/host"
)

// recorder is a host provider that records the spec serve asked for and
// creates the sandbox without the limits (which host cannot apply): it
// stands for a provider that takes limits.
type recorder struct {
	*host.Provider
	mu    sync.Mutex
	specs []runbox.SandboxSpec
}

func (r *recorder) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	spec.Memory, spec.Pids, spec.CPUs, spec.Network = 0, 0, 0, ""
	return r.Provider.Create(ctx, spec)
}

// TestOperatorLimits: through the API, a sandbox that asks for no limits
// gets the operator's defaults; anything above a ceiling, or "no limit"
// under a ceiling without a default, is invalid_argument naming the
// ceiling; an exec with no timeout gets the default one; docker's host and
// container: networks are refused.
func TestOperatorLimits(t *testing.T) {
	rec := &recorder{}
	ts := startServer(t, func(c *serverConfig) {
		rec.Provider = &host.Provider{Home: c.Providers["host"].(*host.Provider).Home}
		c.Providers = map[string]runbox.Provider{"local": rec, "docker": rec}
		c.DefaultProvider = "local"
		c.Limits = server.Limits{MaxMemory: 4 << 30, DefaultMemory: 1 << 30, MaxPids: 500, DefaultPids: 100,
			MaxCPUs: 2, MaxExecTimeout: time.Hour, DefaultExecTimeout: 300 * time.Millisecond}
	})
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err == nil || !strings.Contains(err.Error(), "--max-cpus") {
		t.Fatalf("no cpus asked, a ceiling and no default: want a refusal naming --max-cpus, got %v %v", sb, err)
	}
	sb, err = srv.Create(ctx, runbox.SandboxSpec{CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	got := rec.specs[len(rec.specs)-1]
	rec.mu.Unlock()
	if got.Memory != 1<<30 || got.Pids != 100 || got.CPUs != 1 {
		t.Errorf("the provider was asked for %+v, want the defaults (1 GiB, 100 pids)", got)
	}
	for _, c := range []struct {
		spec     runbox.SandboxSpec
		says     string
		provider string
	}{
		{runbox.SandboxSpec{CPUs: 1, Memory: 5 << 30}, "--max-memory", ""},
		{runbox.SandboxSpec{CPUs: 1, Pids: 501}, "--max-pids", ""},
		{runbox.SandboxSpec{CPUs: 2.5}, "--max-cpus", ""},
		{runbox.SandboxSpec{CPUs: 1, Memory: -1}, "memory", ""},
		{runbox.SandboxSpec{CPUs: 1, Network: "host"}, "--allow-shared-networks", "docker"},
		{runbox.SandboxSpec{CPUs: 1, Network: "container:abc"}, "--allow-shared-networks", "docker"},
		{runbox.SandboxSpec{CPUs: 1, Network: "bridge"}, "network", ""},
	} {
		if _, err := srv.CreateSandbox(ctx, c.spec, client.SandboxOptions{Provider: c.provider}); !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: want invalid_argument naming %s, got %v", c.spec, c.says, err)
		}
	}
	// Exec timeouts: above the ceiling refused, none gets the default.
	if _, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true", Timeout: 2 * time.Hour}); !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "--max-exec-timeout") {
		t.Errorf("timeout above the ceiling: %v", err)
	}
	for _, run := range []func() (runbox.Result, error){
		func() (runbox.Result, error) {
			r, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "sleep 30"})
			return r, err
		},
		func() (runbox.Result, error) {
			return srv.Sandbox(sb.ID).ExecSpec(ctx, runbox.ExecSpec{Command: "sleep 30"})
		},
	} {
		r, err := run()
		if err != nil || !r.TimedOut {
			t.Errorf("no timeout asked: want the 300ms default to stop it, got %+v %v", r, err)
		}
	}
}
