package kubernetes_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/kubernetes"
)

// TestServeHoldsKubernetes: runbox serve holds the kubernetes provider like
// any other. A tenant creates a pod sandbox through the API, runs a command
// with the unary Run call (exit status and output exact), and removing the
// sandbox through the API deletes its pod in the cluster.
func TestServeHoldsKubernetes(t *testing.T) {
	needCluster(t)
	store, err := registry.Open(context.Background(), filepath.Join(t.TempDir(), "runbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := server.New(server.Config{
		Store:           store,
		Providers:       map[string]runbox.Provider{"kubernetes": newProvider(t)},
		DefaultProvider: "kubernetes",
		WorkspaceDir:    t.TempDir(),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln, server.ServeOptions{ShutdownTimeout: 5 * time.Second}) }()
	defer func() {
		stopServer()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()

	_, token, err := store.CreateToken(context.Background(), "team-a")
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.NewServer("http://"+ln.Addr().String(), token)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	sb, err := api.CreateSandbox(ctx, runbox.SandboxSpec{Image: testImage}, client.SandboxOptions{Provider: "kubernetes"})
	if err != nil {
		t.Fatalf("create through serve: %v", err)
	}
	removed := false
	defer func() {
		if !removed {
			api.Remove(context.Background(), sb, true)
		}
	}()
	res, _, err := api.Run(ctx, sb.ID, runbox.ExecSpec{Command: "echo out; echo err >&2; exit 7"})
	if err != nil {
		t.Fatalf("run through serve: %v", err)
	}
	if res.ExitCode != 7 || strings.TrimSpace(string(res.Stdout)) != "out" || strings.TrimSpace(string(res.Stderr)) != "err" {
		t.Fatalf("run through serve: exit %d, stdout %q, stderr %q; want 7, out, err", res.ExitCode, res.Stdout, res.Stderr)
	}

	// The pod behind the sandbox: the registry's provider id is the value
	// of runbox's sandbox label on it.
	rec, err := store.GetSandbox(ctx, "team-a", sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	cs := testClient(t)
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelSandbox + "=" + rec.ProviderID})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods labelled %s=%s after a create through serve, want 1", len(pods.Items), kubernetes.LabelSandbox, rec.ProviderID)
	}
	ns, pod := pods.Items[0].Namespace, pods.Items[0].Name
	if err := api.Remove(ctx, sb, false); err != nil {
		t.Fatalf("remove through serve: %v", err)
	}
	removed = true
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s/%s still there after the sandbox was removed through serve (%v)", ns, pod, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := api.Get(ctx, sb.ID); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("get after remove: %v, want ErrSandboxNotFound", err)
	}
}
