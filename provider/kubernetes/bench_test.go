package kubernetes_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/kubernetes"
)

// BenchmarkCreateFirstExec measures a pod sandbox from Create to the end
// of its first exec (`true`): scheduling, the init container installing
// runboxd, runboxd starting, the exec stream and the exec. Removal is not
// timed.
func BenchmarkCreateFirstExec(b *testing.B) {
	needCluster(b)
	p := newProvider(b)
	ctx := context.Background()
	for b.Loop() {
		sb, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage})
		if err != nil {
			b.Fatal(err)
		}
		c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
		if r, err := c.Exec(ctx, "true"); err != nil || r.ExitCode != 0 {
			b.Fatalf("first exec: %v %+v", err, r)
		}
		b.StopTimer()
		c.Close()
		if err := p.Remove(ctx, sb, true); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPerCommand runs `true` in one pod four ways per iteration and
// reports each one's latency and the ratios against `kubectl exec POD --
// true`, the baseline, measured in the same run:
//
//	runbox-client-ms    an Exec of the Go client over its open exec stream
//	runbox-cli-ms       a `runbox exec SANDBOX -- true` process through the
//	                    sandbox's persistent endpoint (started before the
//	                    loop: a local dial, a stream on its one exec stream)
//	runbox-cli-direct-ms  the same with endpoints off ($RUNBOX_ENDPOINT_IDLE=0):
//	                    runbox-full finds the pod, reads its Secret, opens
//	                    an exec stream of its own
//	kubectl-ms          a `kubectl exec` process
func BenchmarkPerCommand(b *testing.B) {
	needCluster(b)
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		kubectl = filepath.Join(envOr("RUNBOX_K8S_DIR", "/var/tmp/runbox-k8s"), "bin", "kubectl")
		if _, err := os.Stat(kubectl); err != nil {
			b.Skip("no kubectl in PATH or $RUNBOX_K8S_DIR/bin: the baseline cannot run")
		}
	}
	p := newProvider(b)
	sb := create(b, p, runbox.SandboxSpec{})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Exec(ctx, "true"); err != nil { // open the stream
		b.Fatal(err)
	}
	bin := buildCLI(b)
	home := shortHome(b)
	env := append(os.Environ(), "RUNBOX_HOME="+home, endpoint.IdleEnv+"=5m")
	direct := append(os.Environ(), "RUNBOX_HOME="+home, endpoint.IdleEnv+"=0")
	// The first exec (runbox-full) writes the local record; the second
	// starts the endpoint, which exits when the pod is removed.
	for range 2 {
		rc := exec.Command(filepath.Join(bin, "runbox"), "exec", sb.ID, "--", "true")
		rc.Env = env
		if out, err := rc.CombinedOutput(); err != nil {
			b.Fatalf("runbox exec: %v: %s", err, out)
		}
	}
	if sock, err := endpoint.Socket(home, kubernetes.ProviderName, sb.ID); err != nil || providertest.EndpointPid(b, sock) == 0 {
		b.Fatalf("no endpoint after two execs (%v)", err)
	}
	var lib, cli, cliDirect, kube time.Duration
	for b.Loop() {
		t0 := time.Now()
		if r, err := c.Exec(ctx, "true"); err != nil || r.ExitCode != 0 {
			b.Fatalf("client exec: %v %+v", err, r)
		}
		t1 := time.Now()
		rc := exec.Command(filepath.Join(bin, "runbox"), "exec", sb.ID, "--", "true")
		rc.Env = env
		if out, err := rc.CombinedOutput(); err != nil {
			b.Fatalf("runbox exec: %v: %s", err, out)
		}
		t2 := time.Now()
		rd := exec.Command(filepath.Join(bin, "runbox"), "exec", sb.ID, "--", "true")
		rd.Env = direct
		if out, err := rd.CombinedOutput(); err != nil {
			b.Fatalf("runbox exec (endpoints off): %v: %s", err, out)
		}
		t2b := time.Now()
		kc := exec.Command(kubectl, "exec", "-n", sb.Detail["namespace"], sb.Detail["pod"], "-c", "sandbox", "--", "true")
		if out, err := kc.CombinedOutput(); err != nil {
			b.Fatalf("kubectl exec: %v: %s", err, out)
		}
		t3 := time.Now()
		lib += t1.Sub(t0)
		cli += t2.Sub(t1)
		cliDirect += t2b.Sub(t2)
		kube += t3.Sub(t2b)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / n / 1e6 }
	b.ReportMetric(ms(lib), "runbox-client-ms")
	b.ReportMetric(ms(cli), "runbox-cli-ms")
	b.ReportMetric(ms(cliDirect), "runbox-cli-direct-ms")
	b.ReportMetric(ms(kube), "kubectl-ms")
	b.ReportMetric(float64(kube)/float64(lib), "kubectl/client")
	b.ReportMetric(float64(kube)/float64(cli), "kubectl/cli")
	b.ReportMetric(float64(kube)/float64(cliDirect), "kubectl/cli-direct")
}

// BenchmarkConnect weighs the two ways a persistent endpoint could carry a
// connection to runboxd, each on one warm client to the API server and
// each ending with runboxd's secret handshake done:
//
//	exec-stream-ms  a new pod exec stream of `runboxd proxy` per connection
//	                (Provider.Dialer): the kubelet and the container runtime
//	                start a process in the pod each time
//	mux-stream-ms   a yamux stream on the endpoint's one exec stream of
//	                `runboxd proxy --mux` (StreamDialer)
func BenchmarkConnect(b *testing.B) {
	needCluster(b)
	p := newProvider(b)
	p.Home = shortHome(b)
	sb := create(b, p, runbox.SandboxSpec{})
	secret, err := daemonauth.ReadSecretFile(filepath.Join(p.Home, "kubernetes", sb.ID, "secret"))
	if err != nil {
		b.Fatal(err)
	}
	raw, _, err := p.StreamDialer(sb.ID)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	viaExec, viaMux := p.Dialer(sb), daemonauth.Dialer(raw, secret)
	for _, d := range []runbox.Dialer{viaExec, viaMux} { // warm both
		c, err := d(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	var ex, mx time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := viaExec(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		t1 := time.Now()
		c, err = viaMux(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		ex += t1.Sub(t0)
		mx += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ex)/n/1e6, "exec-stream-ms")
	b.ReportMetric(float64(mx)/n/1e6, "mux-stream-ms")
}
