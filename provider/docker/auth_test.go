package docker

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/providertest"
)

// A docker sandbox's secret is in its container's label, its runboxd is
// given only the hash, and over the exec stream (runboxd proxy, the remote
// engine's way in) a wrong secret gets runbox.ErrUnauthenticated while the
// label's secret works. (The socket stream is covered by the conformance
// case AuthWrongSecret.)
func TestSecretOverExecStream(t *testing.T) {
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbxa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	p := &Provider{Home: home, Runboxd: bin, ForceExecStream: true}
	defer p.Close()
	image := os.Getenv("RUNBOX_TEST_IMAGE")
	if image == "" {
		image = "runbox-test:busybox"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, runbox.SandboxSpec{Image: image})
	if errors.Is(err, runbox.ErrProviderUnavailable) {
		if os.Getenv("RUNBOX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_DOCKER=1 but no docker engine answers: %v", err)
		}
		t.Skipf("no docker engine: %v (start one: dockerd --bridge=none --iptables=false --ip6tables=false; RUNBOX_REQUIRE_DOCKER=1 makes this a failure)", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer p.Remove(context.WithoutCancel(ctx), sb, true)

	cli, err := p.engine()
	if err != nil {
		t.Fatal(err)
	}
	ir, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secretHex := ir.Container.Config.Labels[LabelSecret]
	secret, err := hex.DecodeString(secretHex)
	if err != nil || len(secret) != daemonauth.SecretSize {
		t.Fatalf("label %s = %q; want %d bytes in hex", LabelSecret, secretHex, daemonauth.SecretSize)
	}
	argv := strings.Join(slices.Concat(ir.Container.Config.Entrypoint, ir.Container.Config.Cmd), " ")
	if strings.Contains(argv, secretHex) || !strings.Contains(argv, daemonauth.Sum(secret)) {
		t.Errorf("runboxd's command line %q: want the secret's hash, never the secret", argv)
	}
	for _, e := range ir.Container.Config.Env {
		if strings.Contains(e, secretHex) {
			t.Errorf("the container's environment holds the secret: %q", e)
		}
	}

	raw := p.dialer(sb.Detail["container"], "")
	wrong, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	bad := rbclient.New(daemonauth.Dialer(raw, wrong), rbclient.WithSandboxName(sb.ID))
	defer bad.Close()
	if _, err := bad.Exec(ctx, "echo should not run"); !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("exec over the exec stream with a wrong secret: %v; want runbox.ErrUnauthenticated", err)
	}
	good := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
	defer good.Close()
	if res, err := good.Exec(ctx, "echo ok"); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec over the exec stream with the label's secret: %+v, %v", res, err)
	}
}
