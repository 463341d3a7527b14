package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// These tests are issue 13's attacks on a docker sandbox from its own
// commands: each runs the attack as a command, then checks that the real
// runboxd (PID 1) still serves and that Remove, without force, stops the
// sandbox.

// serving checks that the sandbox's own runboxd (PID 1, not a stand-in a
// command started) answers and runs argv, then that Remove without force
// succeeds: it needs runboxd to answer the Shutdown call.
func serving(t *testing.T, p *docker.Provider, sb runbox.Sandbox, argv ...string) {
	t.Helper()
	c := dial(t, p, sb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("after the attack runboxd does not answer: %v", err)
	}
	if info.Pid != 1 {
		t.Fatalf("after the attack the answer comes from pid %d, not the sandbox's runboxd (PID 1)", info.Pid)
	}
	res, err := c.ExecArgv(ctx, argv)
	if err != nil || !res.OK() || string(res.Stdout) != "next\n" {
		t.Fatalf("after the attack %q: %+v, %v; want it to print next", argv, res, err)
	}
	if err := p.Remove(ctx, sb, false); err != nil {
		t.Fatalf("after the attack, remove without force: %v", err)
	}
}

// TestCommandsCannotLoseSandbox: `rm -rf /.runbox`, `kill -9 1`, `mv
// /.runbox` and a mv of every top-level entry of / leave the sandbox
// serving its next exec, and Remove without force working.
func TestCommandsCannotLoseSandbox(t *testing.T) {
	attacks := []struct {
		name, command string
		// argv is the next exec: a mv of /bin leaves no shell where the
		// sandbox had one, so that case runs a copy of busybox.
		argv []string
	}{
		{"rm -rf /.runbox", "rm -rf /.runbox; rm -rf /.runbox/*", []string{"echo", "next"}},
		{"kill -9 1", "kill -9 1; sleep 0.1", []string{"echo", "next"}},
		{"mv /.runbox", "mv /.runbox /.runbox.x; mv /.runbox/run /.runbox/run.x; mv /.runbox/runboxd /.runbox/r.x", []string{"echo", "next"}},
		{"mv every top-level entry", `cp /bin/busybox /busybox
			for f in /* /.[!.]*; do
				[ "$f" = /busybox ] || /busybox mv "$f" "$f.x" 2>/dev/null
			done
			/busybox ls -a /`, []string{"/busybox", "echo", "next"}},
	}
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		for _, a := range attacks {
			t.Run(a.name, func(t *testing.T) {
				sb := create(t, p, runbox.SandboxSpec{})
				res := run(t, dial(t, p, sb), a.command)
				t.Logf("%s: exit %d, stdout %q, stderr %q", a.name, res.ExitCode, res.Stdout, res.Stderr)
				serving(t, p, sb, a.argv...)
			})
		}
	})
}

// TestCommandsSeeNothingOfRunbox: a command finds no runboxd socket or
// binary anywhere in its view: not by name, not in /.runbox (an empty
// read-only directory), not through runboxd's /proc entries; the state it
// reads (spill files, session functions) it cannot change.
func TestCommandsSeeNothingOfRunbox(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		sb := create(t, p, runbox.SandboxSpec{})
		c := dial(t, p, sb)
		// A spill file and a session are state runboxd keeps: commands read
		// them (a spill file's path is returned to be read back; a
		// session's shell sources its functions), but cannot change them.
		spilled := run(t, c, "seq 100000", rbclient.WithSpill(runbox.SpillAlways))
		if spilled.StdoutSpill == "" {
			t.Fatal("no spill file")
		}
		run(t, c, "f() { echo from-f; }; cd /tmp", rbclient.WithSession("s"))
		wantStdout(t, run(t, c, "f", rbclient.WithSession("s")), "from-f\n")
		if res := run(t, c, "tail -n1 "+spilled.StdoutSpill); strings.TrimSpace(string(res.Stdout)) != "100000" {
			t.Errorf("reading the spill file %s: %q %q", spilled.StdoutSpill, res.Stdout, res.Stderr)
		}
		if res := run(t, c, "rm -f "+spilled.StdoutSpill+" || ln -s /.runbox "+filepath.Dir(spilled.StdoutSpill)+"/x"); res.OK() {
			t.Errorf("a command changed the spill directory %s", filepath.Dir(spilled.StdoutSpill))
		}

		res := run(t, c, `find / \( -name '*.sock' -o -name 'runbox*' -o -path '*/.runbox/*' \) 2>/dev/null`)
		if out := strings.TrimSpace(string(res.Stdout)); out != "" {
			t.Errorf("find shows runbox's files to a command:\n%s", out)
		}
		res = run(t, c, "ls -A /.runbox; touch /.runbox/x || mkdir -p /.runbox/run")
		if out := strings.TrimSpace(string(res.Stdout)); out != "" || res.OK() {
			t.Errorf("/.runbox: lists %q and writing it exits %d (stderr %q); want empty and read-only", out, res.ExitCode, res.Stderr)
		}
		for _, probe := range []string{"ls /proc/1/root/", "ls /proc/1/cwd/", "readlink /proc/1/exe", "cat /proc/1/environ", "readlink /proc/1/fd/0", "ls /proc/1/task/*/root/"} {
			if res := run(t, c, probe); res.OK() {
				t.Errorf("%s: exit 0, stdout %q; want runboxd's /proc entries closed to commands", probe, res.Stdout)
			}
		}
	})
}

// TestCommandCannotReplaceSocket: a command that deletes runboxd's socket
// and serves a runboxd of its own at the same path does not get the
// client's next call: the path is not in its view. The stand-in runs for
// the rest of the test (a background process), so a client that reached it
// would see its pid.
func TestCommandCannotReplaceSocket(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		bin, err := providertest.BuildRunboxd()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		work := t.TempDir()
		if err := os.WriteFile(filepath.Join(work, "fake"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		sb := create(t, p, runbox.SandboxSpec{Workdir: work})
		c := dial(t, p, sb)
		s := "/.runbox/run/runboxd.sock"
		res := run(t, c, `rm -f `+s+`; mkdir -p /.runbox/run
			serve() { setsid /workspace/fake serve --socket `+s+` --socket-mode 0666 --cgroup off "$@" >/workspace/fake.log 2>&1 & }
			serve --insecure-no-auth; sleep 0.2; [ -S `+s+` ] || serve
			for i in $(seq 100); do [ -S `+s+` ] && break; sleep 0.05; done
			ls -l `+s)
		t.Logf("attack: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		serving(t, p, sb, "echo", "next")
	})
}

// TestCommandsHaveDockerDefaults: the capability runboxd was given to build
// the commands' view (CAP_SYS_ADMIN) is nowhere in a command's sets, which
// are Docker's default ones, and what Docker's default seccomp profile
// refuses a container without it (a new user namespace, mount) stays
// refused.
func TestCommandsHaveDockerDefaults(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	sb := create(t, p, runbox.SandboxSpec{})
	c := dial(t, p, sb)
	res := run(t, c, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status")
	const dockerDefault = "00000000280425fb" // Docker's default less CAP_SETFCAP (rule 4)
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		name, val, _ := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		want := dockerDefault
		if name == "CapInh" || name == "CapAmb" {
			want = "0000000000000000"
		}
		if val != want {
			t.Errorf("a root command's %s is %s, want %s", name, val, want)
		}
	}
	for _, probe := range []string{"unshare -U -r true", "unshare -m true", "mount -t tmpfs none /mnt"} {
		if res := run(t, c, probe); res.OK() {
			t.Errorf("%s: exit 0; want it refused", probe)
		}
	}
}

// TestPrivateViewFailureStopsCreate: when runboxd cannot build its
// commands' view (here: a second --private names /, which cannot be
// hidden), it does not start, and Create fails with its reason instead of
// leaving a sandbox that serves without the view. (A kernel refusal, such
// as a missing CAP_SYS_ADMIN, takes the same path: see internal/commandview's
// and internal/supervisor's tests.)
func TestPrivateViewFailureStopsCreate(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage, DaemonArgs: []string{"--private", "/"}})
	if err == nil {
		p.Remove(ctx, sb, true)
		t.Fatal("create succeeded though runboxd could not build the view")
	}
	if !strings.Contains(err.Error(), `cannot hide "/"`) {
		t.Errorf("create: %v; want runboxd's reason quoted", err)
	}
}

// TestNonRootImageSharedView: an image whose user is not root gets no
// private view (runboxd runs as that user, without the capabilities to
// build one): the sandbox works, runs commands as that user, and says so
// in its detail; a root image's sandbox says "private".
func TestNonRootImageSharedView(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	if v := create(t, p, runbox.SandboxSpec{}).Detail["view"]; v != "private" {
		t.Errorf("root image: view %q, want private", v)
	}
	cli := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cr, err := cli.ContainerCreate(ctx, moby.ContainerCreateOptions{Config: &container.Config{Image: testImage}})
	if err != nil {
		t.Fatal(err)
	}
	ref := "runbox-test:nobody-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	_, err = cli.ContainerCommit(ctx, cr.ID, moby.ContainerCommitOptions{Reference: ref, Changes: []string{"USER nobody"}})
	cli.ContainerRemove(ctx, cr.ID, moby.ContainerRemoveOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ImageRemove(ctx, ref, moby.ImageRemoveOptions{Force: true})
	})
	sb := create(t, p, runbox.SandboxSpec{Image: ref})
	if v := sb.Detail["view"]; !strings.HasPrefix(v, "shared") {
		t.Errorf("image with USER nobody: view %q, want shared with the reason", v)
	}
	wantStdout(t, run(t, dial(t, p, sb), "id -u"), "65534\n")
}
