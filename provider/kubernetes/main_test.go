package kubernetes_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/kubernetes"
)

// The test image: scripts/build-test-image.sh builds it for Docker, and
// `scripts/k8s/cluster.sh import-docker runbox-test:busybox` loads it into
// the test cluster's node.
var testImage = envOr("RUNBOX_TEST_IMAGE", "runbox-test:busybox")

// toolsImage has git and python3, for the conformance cases that need them
// (scripts/build-test-image.sh builds it, `cluster.sh import-docker
// runbox-test:tools` loads it); toolsMissing says why no node has it.
var (
	toolsImage   = envOr("RUNBOX_TEST_IMAGE_TOOLS", "runbox-test:tools")
	toolsMissing string
)

// cluster says whether a Kubernetes cluster answers here, with the images
// the tests need; RUNBOX_REQUIRE_KUBERNETES=1 (CI) makes "none does" a
// failure of the whole test binary.
var cluster *providertest.Requirement

// runboxdImage is the runboxd image the tests' pods use: one built from
// this tree and loaded into the harness's node by TestMain, or
// $RUNBOX_KUBE_RUNBOXD_IMAGE.
var runboxdImage string

// TestMain finds the cluster (KUBECONFIG), builds runboxd and its image
// from this tree and loads it into the node when the cluster is the
// project's harness (scripts/k8s), then runs the tests.
func TestMain(m *testing.M) {
	if os.Getenv("RUNBOX_PROVIDERTEST_ATTACKER") == "" {
		cluster = providertest.CheckRequirement("provider/kubernetes", "RUNBOX_REQUIRE_KUBERNETES", checkCluster)
	}
	// client-go keeps, for the life of the process, a goroutine that
	// reloads a kubeconfig's client certificate files (with its poller and
	// work queue),
	// klog's flusher, and its cached transports' pooled HTTP/2 connections
	// to the API server (golang.org/x/net/http2; runbox's own client uses
	// net/http's).
	providertest.MainIgnoring(m,
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).run"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/transport.(*dynamicClientCert).processNextWorkItem"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntil"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
		goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
		// An exec stream's WebSocket heartbeat notices its connection is
		// gone at its next tick, up to 5 s after the stream closed.
		goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
		goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.PollImmediateUntilWithContext.poller.func1.1"),
	)
}

// checkCluster returns why the tests cannot run here, or "".
func checkCluster() string {
	if os.Getenv("KUBECONFIG") == "" {
		if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".kube", "config")); err != nil {
			return "no kubeconfig (set KUBECONFIG; scripts/k8s/cluster.sh start makes a cluster and `cluster.sh env` prints it)"
		}
	}
	cs, err := clientset()
	if err != nil {
		return fmt.Sprintf("no kubernetes client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Sprintf("no kubernetes API server answers: %v", err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("kubernetes %s: list nodes: %v", v.GitVersion, err)
	}
	if !hasImage(nodes.Items, testImage) {
		return fmt.Sprintf("kubernetes %s: no node has the test image %s (scripts/build-test-image.sh, then scripts/k8s/cluster.sh import-docker %s)", v.GitVersion, testImage, testImage)
	}
	if !hasImage(nodes.Items, toolsImage) {
		toolsMissing = fmt.Sprintf("no node has the test image %s (scripts/build-test-image.sh, then scripts/k8s/cluster.sh import-docker %s)", toolsImage, toolsImage)
	}
	img, why := loadRunboxdImage()
	if why != "" {
		return why
	}
	runboxdImage = img
	return ""
}

// hasImage reports whether a node lists image (a reference as a pod names
// it) among its images.
func hasImage(nodes []corev1.Node, image string) bool {
	want := []string{image, "docker.io/library/" + image, "docker.io/" + image}
	for _, n := range nodes {
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				if slices.Contains(want, name) {
					return true
				}
			}
		}
	}
	return false
}

// loadRunboxdImage returns the runboxd image the tests use: the one named
// by $RUNBOX_KUBE_RUNBOXD_IMAGE, else an image of runboxd built from this
// tree, tagged with its digest and imported into the node of the project's
// harness (scripts/k8s/cluster.sh import; root on this machine).
func loadRunboxdImage() (string, string) {
	if img := os.Getenv(kubernetes.RunboxdImageEnv); img != "" {
		return img, ""
	}
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		return "", err.Error()
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err.Error()
	}
	sum := sha256.Sum256(b)
	ref := "runbox.local/runboxd:test-" + hex.EncodeToString(sum[:6])
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err.Error()
	}
	tar := filepath.Join(os.TempDir(), "runboxd-image-"+hex.EncodeToString(sum[:6])+".tar")
	defer os.Remove(tar)
	mk := exec.Command(filepath.Join(root, "scripts/runboxd-image.sh"), tar, ref)
	mk.Env = append(os.Environ(), "RUNBOXD="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("build the runboxd image: %v\n%s", err, out)
	}
	imp := exec.Command(filepath.Join(root, "scripts/k8s/cluster.sh"), "import", tar)
	if out, err := imp.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("load the runboxd image into the test cluster's node (scripts/k8s/cluster.sh import, as root; or set %s to an image the cluster has): %v\n%s",
			kubernetes.RunboxdImageEnv, err, out)
	}
	return ref, ""
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// needCluster skips t when no cluster answers here.
func needCluster(t testing.TB) {
	t.Helper()
	cluster.Need(t)
}

// clientset is the tests' own client, from KUBECONFIG.
func clientset() (k8s.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return k8s.NewForConfig(cfg)
}

// testClient returns the tests' client or fails t.
func testClient(t testing.TB) k8s.Interface {
	t.Helper()
	cs, err := clientset()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// newProvider returns a provider using the tests' runboxd image.
func newProvider(t testing.TB) *kubernetes.Provider {
	t.Helper()
	return &kubernetes.Provider{RunboxdImage: runboxdImage}
}

// create makes a sandbox removed (with force) when the test ends.
func create(t testing.TB, p *kubernetes.Provider, spec runbox.SandboxSpec) runbox.Sandbox {
	t.Helper()
	if spec.Image == "" {
		spec.Image = testImage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("remove %s: %v", sb.ID, err)
		}
	})
	return sb
}

// The pods' processes are looked at from this machine (the node of the
// project's harness), through the pod's cgroup in the pids hierarchy and
// /proc: the view from outside runboxd that survivor checks need, as
// `docker top` is for the docker provider.

// podCgroups caches each pod's cgroup directory, by pod UID.
var podCgroups sync.Map

// podCgroup finds the directory of the pod's cgroup in the pids hierarchy.
func podCgroup(t testing.TB, uid string) string {
	t.Helper()
	if v, ok := podCgroups.Load(uid); ok {
		return v.(string)
	}
	var found string
	want := "pod" + uid
	root := "/sys/fs/cgroup/pids"
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, root), "/") > 4 {
			return filepath.SkipDir
		}
		if d.Name() == want {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found != "" {
		podCgroups.Store(uid, found)
	}
	return found
}

// hostProc is a process of the pod as this machine sees it.
type hostProc struct {
	pid   int
	state byte
	args  string
}

// podProcs lists the live processes in the pod's cgroups (every container
// of the pod); a pod whose cgroup is gone has none.
func podProcs(t testing.TB, sb runbox.Sandbox) []hostProc {
	t.Helper()
	dir := podCgroup(t, sb.Detail["uid"])
	if dir == "" {
		// No cgroup: the pod is gone (then it has no processes), or it
		// does not run on this machine (then the tests cannot look).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pod, err := testClient(t).CoreV1().Pods(sb.Detail["namespace"]).Get(ctx, sb.Detail["pod"], metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && (string(pod.UID) != sb.Detail["uid"] || pod.DeletionTimestamp != nil ||
			pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) {
			return nil
		}
		t.Fatalf("no cgroup pod%s under /sys/fs/cgroup/pids (pod %v): is the pod on this machine's node (the scripts/k8s harness)?", sb.Detail["uid"], err)
	}
	var out []hostProc
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			pid, err := strconv.Atoi(sc.Text())
			if err != nil {
				continue
			}
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				continue
			}
			i := strings.LastIndexByte(string(stat), ')')
			if i < 0 || i+2 >= len(stat) {
				continue
			}
			out = append(out, hostProc{pid: pid, state: stat[i+2],
				args: strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")})
		}
		return nil
	})
	return out
}

// daemonPid is the host pid of the pod's runboxd (0 when it is gone).
func daemonPid(t testing.TB, sb runbox.Sandbox) int {
	t.Helper()
	for _, p := range podProcs(t, sb) {
		if strings.HasPrefix(p.args, "/.runbox/runboxd serve") {
			return p.pid
		}
	}
	return 0
}

// fixture is the conformance suite's view of a kubernetes sandbox.
func fixture(p *kubernetes.Provider) providertest.Fixture {
	return providertest.Fixture{
		Provider:     p,
		Spec:         runbox.SandboxSpec{Image: testImage},
		ToolsSpec:    &runbox.SandboxSpec{Image: toolsImage},
		ToolsMissing: toolsMissing,
		MemoryLimit:  true,
		// The pod exec of runboxd proxy each dial starts (the pod's
		// cgroup holds this sandbox's processes only).
		DialMarker: "runboxd proxy --socket",
		CountProcesses: func(t testing.TB, sb runbox.Sandbox, marker string) int {
			t.Helper()
			n := 0
			for _, p := range podProcs(t, sb) {
				if strings.Contains(p.args, marker) && p.state != 'Z' && p.state != 'X' {
					n++
				}
			}
			return n
		},
		Zombies: func(t testing.TB, sb runbox.Sandbox) int {
			t.Helper()
			pid := daemonPid(t, sb)
			if pid == 0 {
				return 0
			}
			n, err := providertest.ProcZombies(pid)
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
		KillDaemon: func(t testing.TB, sb runbox.Sandbox) {
			t.Helper()
			pid := daemonPid(t, sb)
			if pid == 0 {
				t.Fatalf("no runboxd in pod %s", sb.Detail["pod"])
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatal(err)
			}
		},
		DaemonRSS: func(t testing.TB, sb runbox.Sandbox) int64 {
			t.Helper()
			n, err := providertest.ProcRSS(daemonPid(t, sb))
			if err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}
