package host_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/host"
)

// create makes a sandbox and force-removes it when the test ends.
func create(t *testing.T, p *host.Provider, spec runbox.SandboxSpec) runbox.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("cleanup: remove %s: %v", sb.ID, err)
		}
	})
	return sb
}

func pidOf(t *testing.T, sb runbox.Sandbox) int {
	t.Helper()
	pid, err := strconv.Atoi(sb.Detail["pid"])
	if err != nil || pid <= 0 {
		t.Fatalf("sandbox %s: bad pid %q", sb.ID, sb.Detail["pid"])
	}
	return pid
}

// processGone reports whether pid has exited (gone, or a zombie nobody has
// reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{Name: "web"})
	if len(sb.ID) != 12 || sb.Provider != "host" || sb.Name != "web" || !sb.Alive {
		t.Fatalf("created %+v; want a 12-digit id, provider host, name web, alive", sb)
	}
	dir := sb.Detail["dir"]
	if _, err := os.Stat(filepath.Join(dir, "sandbox.json")); err != nil {
		t.Fatalf("record: %v", err)
	}

	for _, key := range []string{sb.ID, sb.ID[:4], "web"} {
		got, err := p.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if got.ID != sb.ID || !got.Alive {
			t.Errorf("Get(%q) = %s alive=%v; want %s alive", key, got.ID, got.Alive, sb.ID)
		}
	}
	if _, err := p.Get(t.Context(), "nosuch"); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("Get(nosuch) err = %v; want ErrSandboxNotFound", err)
	}

	list, err := p.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != sb.ID || !list[0].Alive {
		t.Fatalf("List = %+v; want just %s, alive", list, sb.ID)
	}

	// A command runs, and a background child it leaves behind is stopped by
	// Remove along with the daemon.
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	// A marker no other test's processes carry (providertest uses 3134...).
	marker := fmt.Sprintf("sleep 3139%06d", rand.IntN(1e6))
	res, err := c.Exec(t.Context(), marker+" & echo started")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "started" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	if n, err := providertest.ProcCount(marker); err != nil || n != 1 {
		t.Fatalf("background child: %d alive (err %v); want 1", n, err)
	}
	c.Close()

	pid := pidOf(t, sb)
	if err := p.Remove(t.Context(), sb, false); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after remove: %v; want it gone", err)
	}
	if !processGone(pid) {
		t.Errorf("runboxd (pid %d) alive after remove", pid)
	}
	if n, err := providertest.ProcCount(marker); err != nil || n != 0 {
		t.Errorf("background child: %d alive after remove (err %v); want 0", n, err)
	}
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("Get after remove: %v; want ErrSandboxNotFound", err)
	}
	if err := p.Remove(t.Context(), sb, true); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("second remove: %v; want ErrSandboxNotFound", err)
	}
}

func TestKilledDaemon(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	pid := pidOf(t, sb)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Generous liveness bound: the kernel delivers SIGKILL at once.
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	got, err := p.Get(t.Context(), sb.ID)
	if err != nil || got.Alive {
		t.Fatalf("Get after SIGKILL: alive=%v err=%v; want alive=false, no error", got.Alive, err)
	}
	list, err := p.List(t.Context())
	if err != nil || len(list) != 1 || list[0].Alive {
		t.Fatalf("List after SIGKILL: %+v, %v; want one dead sandbox", list, err)
	}

	err = p.Remove(t.Context(), sb, false)
	var rerr *runbox.Error
	if !errors.Is(err, runbox.ErrSandboxLost) || !errors.As(err, &rerr) || rerr.Sandbox != sb.ID {
		t.Fatalf("Remove without force of a dead sandbox: %v; want ErrSandboxLost naming %s", err, sb.ID)
	}
	if err := p.Remove(t.Context(), sb, true); err != nil {
		t.Fatalf("Remove with force: %v", err)
	}
	if _, err := os.Stat(sb.Detail["dir"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after remove: %v; want it gone", err)
	}
}

func TestMissingRunboxd(t *testing.T) {
	home, err := os.MkdirTemp("", "rb")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)

	p := &host.Provider{Home: home, Runboxd: filepath.Join(home, "nosuch", "runboxd")}
	_, err = p.Create(t.Context(), runbox.SandboxSpec{})
	if !errors.Is(err, host.ErrNoRunboxd) || !strings.Contains(err.Error(), p.Runboxd) {
		t.Errorf("Create with a missing Provider.Runboxd: %v; want ErrNoRunboxd naming the path", err)
	}

	// Nothing configured, nothing beside the test binary, nothing in PATH.
	t.Setenv("RUNBOX_RUNBOXD", "")
	t.Setenv("PATH", "")
	p = &host.Provider{Home: home}
	_, err = p.Create(t.Context(), runbox.SandboxSpec{})
	if !errors.Is(err, host.ErrNoRunboxd) || !strings.Contains(err.Error(), "RUNBOX_RUNBOXD") {
		t.Errorf("Create without runboxd: %v; want ErrNoRunboxd saying how to fix it", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "sandboxes")); len(ents) != 0 {
		t.Errorf("failed Create left %d entries under sandboxes/", len(ents))
	}
}

func TestDaemonFailsToStart(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	_, err := p.Create(t.Context(), runbox.SandboxSpec{DaemonArgs: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("Create with a bad daemon flag succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("error %q does not carry runboxd's log tail", err)
	}
	list, err := p.List(t.Context())
	if err != nil || len(list) != 0 {
		t.Errorf("List after a failed Create: %+v, %v; want nothing", list, err)
	}
}

func TestNameInUse(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	create(t, p, runbox.SandboxSpec{Name: "dup"})
	_, err := p.Create(t.Context(), runbox.SandboxSpec{Name: "dup"})
	if !errors.Is(err, host.ErrNameInUse) {
		t.Errorf("second Create named dup: %v; want ErrNameInUse", err)
	}
	_, err = p.Create(t.Context(), runbox.SandboxSpec{Name: "../x"})
	if err == nil || errors.Is(err, host.ErrNameInUse) {
		t.Errorf("Create named ../x: %v; want an invalid-name error", err)
	}
}

func TestUnsupportedSpec(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	for _, spec := range []runbox.SandboxSpec{
		{Image: "busybox"},
		{Memory: 512 << 20},
		{Network: "none"},
	} {
		if _, err := p.Create(t.Context(), spec); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Create(%+v): %v; want errors.ErrUnsupported", spec, err)
		}
	}
}

func TestSocketPathTooLong(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	p.Home = filepath.Join(p.Home, strings.Repeat("d", 100))
	_, err := p.Create(t.Context(), runbox.SandboxSpec{})
	if err == nil || !strings.Contains(err.Error(), "RUNBOX_HOME") || !strings.Contains(err.Error(), "107") {
		t.Errorf("Create under a deep home: %v; want an error about the socket path limit", err)
	}
}

func TestWorkdir(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	wd := t.TempDir()
	sb := create(t, p, runbox.SandboxSpec{Workdir: wd})
	c := client.New(p.Dialer(sb))
	defer c.Close()
	res, err := c.Exec(t.Context(), "pwd")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != wd {
		t.Errorf("pwd = %q; want the workdir %q", got, wd)
	}
}

// TestGetByID: GetByID finds a sandbox by its exact id alone (not by name
// or prefix), returns the probe's authenticated connection, which a client
// runs commands over, and says a killed daemon is not alive, with no
// connection.
func TestGetByID(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{Name: "byid"})
	ctx := t.Context()
	got, conn, err := p.GetByID(ctx, sb.ID)
	if err != nil || got.ID != sb.ID || !got.Alive || conn == nil {
		t.Fatalf("GetByID(%s) = %+v, %v, %v; want the live sandbox and a connection", sb.ID, got, conn, err)
	}
	first := true
	c := client.New(func(ctx context.Context) (net.Conn, error) {
		if first {
			first = false
			return conn, nil
		}
		return p.Dialer(sb)(ctx)
	})
	res, err := c.Exec(ctx, "echo over the probe connection")
	c.Close()
	if err != nil || string(res.Stdout) != "over the probe connection\n" {
		t.Errorf("exec over GetByID's connection: %+v, %v", res, err)
	}
	for _, key := range []string{"byid", sb.ID[:6], "000000000000"} {
		if _, conn, err := p.GetByID(ctx, key); !errors.Is(err, runbox.ErrSandboxNotFound) || conn != nil {
			t.Errorf("GetByID(%q): %v, %v; want ErrSandboxNotFound (an exact id only)", key, conn, err)
		}
	}
	if err := syscall.Kill(pidOf(t, sb), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !processGone(pidOf(t, sb)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got, conn, err := p.GetByID(ctx, sb.ID); err != nil || got.Alive || conn != nil {
		t.Errorf("GetByID of a killed sandbox: %+v, %v, %v; want it found, not alive, no connection", got, conn, err)
	}
}
