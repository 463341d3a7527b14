package docker_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// BenchmarkDockerExecTrue measures running `true` in one container four
// ways, in the same run so their ratios mean something:
//
//   - runbox-socket: Client.Exec through runboxd's bind-mounted socket;
//   - runbox-exec-stream: Client.Exec through one long-lived docker exec of
//     runboxd proxy (the remote-engine path);
//   - runbox-cli: one `runbox exec SANDBOX -- true` process per command;
//   - engine-api: one docker exec per command through the Engine API
//     (ExecCreate, ExecAttach, read to EOF, ExecInspect for the status), what
//     agent frameworks' Docker backends do today;
//   - docker-cli: one `docker exec CONTAINER true` process per command
//     (skipped without the docker CLI).
func BenchmarkDockerExecTrue(b *testing.B) {
	needEngine(b)
	p := newProvider(b, false)
	cli := engine(b)
	sb := create(b, p, runbox.SandboxSpec{})
	ctr := sb.Detail["container"]
	ctx := context.Background()

	runbox := func(b *testing.B, dial runbox.Dialer) {
		c := rbclient.New(dial, rbclient.WithSandboxName(sb.ID))
		defer c.Close()
		if res, err := c.Exec(ctx, "true"); err != nil || !res.OK() { // warm the connection
			b.Fatalf("warm-up: %+v %v", res, err)
		}
		for b.Loop() {
			res, err := c.Exec(ctx, "true")
			if err != nil || !res.OK() {
				b.Fatalf("exec true: %+v %v", res, err)
			}
		}
	}
	b.Run("runbox-socket", func(b *testing.B) { runbox(b, p.Dialer(sb)) })
	b.Run("runbox-exec-stream", func(b *testing.B) { runbox(b, newProvider(b, true).Dialer(sb)) })
	b.Run("runbox-cli", func(b *testing.B) {
		// A fresh `runbox exec` process per command, as a shell script or
		// an agent shelling out would run it: it finds the sandbox through
		// the engine's labels and connects to runboxd's socket.
		runboxCLI := filepath.Join(providertest.BuildForAnyUser(b), "runbox")
		env := append(os.Environ(), "RUNBOX_HOME="+p.Home, "RUNBOX_PROVIDER=docker")
		for b.Loop() {
			cmd := exec.Command(runboxCLI, "exec", sb.ID, "--", "true")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runbox exec true: %v: %s", err, out)
			}
		}
	})
	b.Run("engine-api", func(b *testing.B) {
		for b.Loop() {
			if code := engineExec(b, cli, ctr, "true"); code != 0 {
				b.Fatalf("docker exec true: exit %d", code)
			}
		}
	})
	b.Run("docker-cli", func(b *testing.B) {
		docker, err := exec.LookPath("docker")
		if err != nil {
			b.Skip("no docker CLI in PATH")
		}
		for b.Loop() {
			if out, err := exec.Command(docker, "exec", ctr, "true").CombinedOutput(); err != nil {
				b.Fatalf("docker exec true: %v: %s", err, out)
			}
		}
	})
}

// engineExec runs argv in the container the way a docker exec per command
// does, and returns its exit code.
func engineExec(b *testing.B, cli *moby.Client, ctr string, argv ...string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ec, err := cli.ExecCreate(ctx, ctr, moby.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatal(err)
	}
	ar, err := cli.ExecAttach(ctx, ec.ID, moby.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, err = stdcopy.StdCopy(io.Discard, io.Discard, ar.Reader)
	ar.Close()
	if err != nil {
		b.Fatal(err)
	}
	ei, err := cli.ExecInspect(ctx, ec.ID, moby.ExecInspectOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return ei.ExitCode
}
