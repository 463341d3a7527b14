package docker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/docker"
)

// TestEngineDetail: a sandbox says which engine it runs on (inspect's
// "engine"), Docker or Podman, rootless or not, as the engine does; a
// provider whose process is not the rootless engine's user reaches runboxd
// through docker exec and says why.
func TestEngineDetail(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := p.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, runbox.SandboxSpec{})
	kind := "docker"
	if isPodman(t, engine(t)) {
		kind = "podman"
	}
	got := sb.Detail["engine"]
	if !strings.HasPrefix(got, kind+" ") || strings.Contains(got, "rootless") != eng.Rootless || got != eng.String() {
		t.Errorf("detail engine %q, want %s's (%s)", got, kind, eng)
	}
	if os.Getenv(podmanChildEnv) != "" && kind != "podman" {
		t.Errorf("TestPodman's child talks to %s, not Podman (DOCKER_HOST=%q)", got, os.Getenv("DOCKER_HOST"))
	}
	wantSocket := !eng.Rootless || eng.UID < 0 || eng.UID == os.Geteuid()
	if (sb.Detail["stream"] == "socket") != wantSocket || (sb.Detail["stream_why"] == "") != wantSocket {
		t.Errorf("stream %q (%q) on %s as uid %d", sb.Detail["stream"], sb.Detail["stream_why"], eng, os.Geteuid())
	}
}

// TestLimitUnsupportedRefused: on an engine that cannot enforce a limit
// (rootless Podman on cgroup v1 drops every limit with a warning), a spec
// that asks for it is refused with ErrLimitUnsupported (and
// errors.ErrUnsupported), and no container is left; it is never made
// without the limit.
func TestLimitUnsupportedRefused(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := p.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]runbox.SandboxSpec{}
	if !eng.Memory {
		specs["memory"] = runbox.SandboxSpec{Image: testImage, Memory: 64 << 20}
	}
	if !eng.Pids {
		specs["pids"] = runbox.SandboxSpec{Image: testImage, Pids: 50}
	}
	if !eng.CPU {
		specs["cpus"] = runbox.SandboxSpec{Image: testImage, CPUs: 0.5}
	}
	if len(specs) == 0 {
		t.Skipf("%s enforces every limit: nothing to refuse", eng)
	}
	before, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for limit, spec := range specs {
		sb, err := p.Create(ctx, spec)
		if err == nil {
			p.Remove(ctx, sb, true)
			t.Errorf("%s limit on %s: created %s, want ErrLimitUnsupported", limit, eng, sb.ID)
			continue
		}
		if !errors.Is(err, docker.ErrLimitUnsupported) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s limit on %s: %v, want ErrLimitUnsupported naming it", limit, eng, err)
		}
	}
	after, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) > len(before) {
		t.Errorf("%d sandboxes before the refused creates, %d after", len(before), len(after))
	}
}
