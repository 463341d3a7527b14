package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/kubernetes"
)

// TestConformance runs the provider conformance suite against pods of the
// cluster KUBECONFIG names. Processes are counted from this machine
// through the pod's cgroup (the harness's node runs here), not through
// runboxd.
func TestConformance(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	providertest.Run(t, func(t *testing.T) providertest.Fixture { return fixture(p) })
}

// TestStreamKilledMidExec: killing the exec stream (the client's only
// connection to runboxd) while a command runs leaves the command running
// in the pod; the client opens a new stream and re-attaches, and the result
// has every byte of output exactly once and the real exit code.
func TestStreamKilledMidExec(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	var mu sync.Mutex
	var conns []net.Conn
	dial := p.Dialer(sb)
	c := client.New(func(ctx context.Context) (net.Conn, error) {
		conn, err := dial(ctx)
		if err == nil {
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
		return conn, err
	}, client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	marker := tempFile("stream-killed")
	var streamed bytes.Buffer
	var smu sync.Mutex
	done := make(chan struct{})
	var res runbox.Result
	var err error
	go func() {
		defer close(done)
		res, err = c.Exec(ctx, `for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; touch `+marker+`; exit 7`,
			client.WithStdout(lockedWriter{&smu, &streamed}))
	}()
	// Kill the stream once the command has printed something.
	deadline := time.Now().Add(time.Minute)
	for {
		smu.Lock()
		n := streamed.Len()
		smu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no output within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	killed := len(conns)
	for _, conn := range conns {
		conn.Close()
	}
	mu.Unlock()
	<-done
	if err != nil {
		t.Fatalf("exec across a killed stream: %v", err)
	}
	want := "line1\nline2\nline3\nline4\nline5\nline6\n"
	if res.ExitCode != 7 || string(res.Stdout) != want {
		t.Errorf("result after a killed stream: exit %d stdout %q; want exit 7 and %q", res.ExitCode, res.Stdout, want)
	}
	smu.Lock()
	got := streamed.String()
	smu.Unlock()
	if got != want {
		t.Errorf("streamed output after a killed stream: %q; want every line exactly once: %q", got, want)
	}
	mu.Lock()
	total := len(conns)
	mu.Unlock()
	if total <= killed {
		t.Errorf("the client made no new stream after %d were killed", killed)
	}
	// The command ran to its end in the pod: the file it made exists.
	if r, err := c.Exec(ctx, "test -e "+marker); err != nil || r.ExitCode != 0 {
		t.Errorf("the command did not finish in the pod (no %s): %v %+v", marker, err, r)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// tempFile is a path under the pod's /tmp unique to this call.
func tempFile(name string) string {
	return "/tmp/runbox-k8stest-" + name + "-" + time.Now().Format("150405.000000000")
}

// TestPodDeletedMidExec: deleting the pod from outside (as `kubectl delete
// pod` does, with the pod's grace period) while a command runs makes the
// exec fail with ErrSandboxLost naming the cause as soon as the deletion
// begins (the stream watches its pod), not when the kubelet kills the pod
// at the end of its grace period, and the CLI exits 125 saying so.
func TestPodDeletedMidExec(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	// A long grace period tells "lost because the deletion began" from
	// "lost because the kubelet killed the pod at the end of its grace".
	const grace = 60 * time.Second
	p.PodTemplate = filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(p.PodTemplate, []byte("apiVersion: v1\nkind: Pod\nspec:\n  terminationGracePeriodSeconds: 60\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, runbox.SandboxSpec{})
	bin := buildCLI(t)
	home := shortHome(t)
	cmd := exec.Command(filepath.Join(bin, "runbox"), "exec", sb.ID, "--", "echo started; sleep 600")
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+home, kubernetes.RunboxdImageEnv+"="+runboxdImage)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = lockedWriter{&outMu, &stdout}, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(syncString(&stdout), "started") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the command did not start: stderr %q", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cs := testClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deleted := time.Now()
	if err := cs.CoreV1().Pods(sb.Detail["namespace"]).Delete(ctx, sb.Detail["pod"], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-waitDone:
	case <-time.After(2 * grace):
		cmd.Process.Kill()
		t.Fatalf("runbox exec still running %v after the pod was deleted", 2*grace)
	}
	took := time.Since(deleted)
	if took >= grace {
		t.Errorf("runbox exec ended %v after the pod's deletion began: only when the kubelet killed the pod (grace %v), not when the deletion began", took, grace)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 125 {
		t.Fatalf("runbox exec after the pod was deleted: %v (stderr %q); want exit status 125", err, stderr.String())
	}
	msg := stderr.String()
	if !strings.Contains(msg, "sandbox lost") || !(strings.Contains(msg, "being deleted") || strings.Contains(msg, "is gone") || strings.Contains(msg, "terminated")) {
		t.Errorf("stderr %q: want sandbox lost naming the pod's deletion", msg)
	}
	t.Logf("pod deleted mid-exec: runbox exec exited 125 after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(msg))
}

var outMu sync.Mutex

func syncString(b *bytes.Buffer) string {
	outMu.Lock()
	defer outMu.Unlock()
	return b.String()
}

// buildCLI builds the runbox and runboxd binaries once.
func buildCLI(t testing.TB) string {
	t.Helper()
	cliOnce.Do(func() {
		cliDir, cliErr = os.MkdirTemp("", "rbk-bin")
		if cliErr != nil {
			return
		}
		for _, pkg := range []string{"runbox", "runbox-full", "runboxd"} {
			c := exec.Command("go", "build", "-o", filepath.Join(cliDir, pkg), "github.com/runbox/runbox/cmd/"+pkg)
			c.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := c.CombinedOutput(); err != nil {
				cliErr = errors.New(string(out))
				return
			}
		}
	})
	if cliErr != nil {
		t.Fatalf("build the CLI: %v", cliErr)
	}
	return cliDir
}

var (
	cliOnce sync.Once
	cliDir  string
	cliErr  error
)

// shortHome is a RUNBOX_HOME short enough for unix socket paths.
func shortHome(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "rbk.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestPodHardening: what the default template promises, seen by a command
// in the pod: no capabilities, no service account token, runboxd's binary
// neither removable nor replaceable, no socket file to remove, RuntimeDefault
// seccomp, and runboxd is PID 1.
func TestPodHardening(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(cmd string) runbox.Result {
		t.Helper()
		r, err := c.Exec(ctx, cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return r
	}
	for _, tc := range []struct {
		cmd, want string
	}{
		{"grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status | tr -s '\\t ' ' '", "CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n"},
		{"grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\\t ' ' '", "NoNewPrivs: 1\nSeccomp: 2\n"},
		{"test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token", "no-token\n"},
		{"rm -f /.runbox/runboxd 2>/dev/null; cp /bin/busybox /.runbox/runboxd 2>/dev/null; test -x /.runbox/runboxd && cmp -s /bin/busybox /.runbox/runboxd && echo replaced || echo intact", "intact\n"},
		{"ls -A /.runbox", "runboxd\n"},
		{"tr '\\0' ' ' < /proc/1/cmdline | cut -d' ' -f1,2", "/.runbox/runboxd serve\n"},
	} {
		if r := run(tc.cmd); string(r.Stdout) != tc.want {
			t.Errorf("%s: %q (stderr %q); want %q", tc.cmd, r.Stdout, r.Stderr, tc.want)
		}
	}
	// Signals a command sends runboxd (PID 1 in the pod) change nothing.
	before, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run("kill -TERM 1; kill -INT 1; kill -HUP 1; kill -KILL 1; true")
	after, err := c.Info(ctx)
	if err != nil || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("runboxd after signals from a command: %v %+v; want the same daemon", err, after)
	}
}

// TestDeadlineExceededIsLost: a pod past its activeDeadlineSeconds is
// ended by the kubelet; its sandbox is lost, and the error names
// DeadlineExceeded.
func TestDeadlineExceededIsLost(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	p.ActiveDeadline = 5 * time.Second
	sb := create(t, p, runbox.SandboxSpec{})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := c.Exec(ctx, "sleep 120")
	if !errors.Is(err, runbox.ErrSandboxLost) {
		t.Fatalf("exec in a pod past its deadline: %v; want ErrSandboxLost", err)
	}
	// The reason may reach the API a moment after the container dies.
	var got runbox.Sandbox
	deadline := time.Now().Add(time.Minute)
	for {
		got, err = p.Get(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got.Detail["lost"], "DeadlineExceeded") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got.Alive || !strings.Contains(got.Detail["lost"], "DeadlineExceeded") {
		t.Errorf("sandbox past its deadline: alive=%v lost=%q; want not alive, naming DeadlineExceeded", got.Alive, got.Detail["lost"])
	}
	t.Logf("exec error: %v; lost: %s", err, got.Detail["lost"])
}

// unreachableConfig is a client configuration no server answers at: the
// cases using it must fail before any API call.
func unreachableConfig() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }

// TestTemplateConflicts: a template that sets what runbox owns is refused
// with ErrTemplateConflict and a message naming it, before anything is
// created; one that sets what runbox only defaults keeps its values.
func TestTemplateConflicts(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, yaml, want string }{
		{"command", "spec:\n  containers:\n  - name: sandbox\n    image: x\n    command: [sleep, '1']\n", "sets command or args"},
		{"restart", "spec:\n  restartPolicy: Always\n", "restartPolicy Always"},
		{"volume", "spec:\n  volumes:\n  - name: runbox\n    emptyDir: {}\n", `volume named "runbox"`},
		{"mount", "spec:\n  containers:\n  - name: sandbox\n    image: x\n    volumeMounts:\n    - {name: v, mountPath: /.runbox}\n", "mounts something at /.runbox"},
	} {
		path := filepath.Join(dir, tc.name+".yaml")
		if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\n"+tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &kubernetes.Provider{PodTemplate: path, Config: unreachableConfig()}
		_, err := p.Create(context.Background(), runbox.SandboxSpec{Image: "busybox"})
		if !errors.Is(err, kubernetes.ErrTemplateConflict) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrTemplateConflict saying %q", tc.name, err, tc.want)
		}
	}
	// A spec the provider cannot honour is refused the same way.
	p := &kubernetes.Provider{Config: unreachableConfig()}
	for _, spec := range []runbox.SandboxSpec{
		{Image: "busybox", Pids: 64},
		{Image: "busybox", Workdir: "/tmp"},
		{Image: "busybox", Network: "bridge"},
		{},
	} {
		if _, err := p.Create(context.Background(), spec); !errors.Is(err, runbox.ErrInvalidSpec) && !errors.Is(err, kubernetes.ErrImageRequired) {
			t.Errorf("spec %+v: %v; want ErrInvalidSpec or ErrImageRequired", spec, err)
		}
	}
}
