package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Get finds a sandbox by exact id, exact name, or unique id prefix among
// the namespace's pods labelled by runbox. Alive comes from the pod's state
// (its workload container runs and it is not being deleted), without a
// probe: a probe is an exec stream through the API server, as costly as the
// command a `runbox exec` is about to run, and that command's own stream
// reports a runboxd that does not answer. List probes.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	fail := func(err error) (runbox.Sandbox, error) {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	api, err := p.client()
	if errors.Is(err, errNotConfigured) {
		return fail(runbox.ErrSandboxNotFound)
	}
	if err != nil {
		return fail(err)
	}
	pods, err := listPods(ctx, api, "")
	if err != nil {
		return fail(err)
	}
	pod, err := sandboxkey.Match(pods, idOrName, func(p corev1.Pod) string { return p.Labels[LabelSandbox] },
		func(p corev1.Pod) string { return p.Labels[LabelName] })
	if err != nil {
		return fail(err)
	}
	if pod.DeletionTimestamp != nil && removedByRunbox(ctx, api, pod.Labels[LabelSandbox]) {
		return fail(runbox.ErrSandboxNotFound)
	}
	return p.toSandbox(ctx, api, &pod, false), nil
}

// removedByRunbox tells, for a pod being deleted, whether runbox removed
// the sandbox: Remove deletes the sandbox's Secret right after its pod,
// while a pod deleted behind runbox's back keeps its Secret until the
// garbage collector follows the pod's actual end. So a command after
// `runbox rm` hears "no such sandbox", not "lost", while the pod still
// terminates. An error reading the Secret counts as not removed: the
// caller then reports the pod as lost, which names what it saw.
func removedByRunbox(ctx context.Context, api *kubeAPI, id string) bool {
	_, err := api.secrets.Get(ctx, secretName(id), metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// List returns every sandbox in the namespace, oldest first, each marked
// Alive when its pod runs and its runboxd answers Info.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	api, err := p.client()
	if errors.Is(err, errNotConfigured) {
		return nil, nil
	}
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	pods, err := listPods(ctx, api, "")
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	out := make([]runbox.Sandbox, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() { out[i] = p.toSandbox(ctx, api, &pods[i], true) })
	}
	wg.Wait()
	return out, nil
}

// listPods lists runbox's pods in the namespace, oldest first; with id
// set, only that sandbox's.
func listPods(ctx context.Context, api *kubeAPI, id string) ([]corev1.Pod, error) {
	sel := LabelSandbox
	if id != "" {
		sel += "=" + id
	}
	var list *corev1.PodList
	err := call(ctx, "list pods in namespace "+api.namespace, func(ctx context.Context) error {
		var err error
		list, err = api.pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]corev1.Pod, 0, len(list.Items))
	for _, pod := range list.Items {
		if sandboxkey.ValidID(pod.Labels[LabelSandbox]) {
			out = append(out, pod)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Labels[LabelSandbox], b.Labels[LabelSandbox])
	})
	return out, nil
}

// getPod reads the pod by name; nil without error when it is gone.
func getPod(ctx context.Context, api *kubeAPI, name string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := call(ctx, "get pod "+api.namespace+"/"+name, func(ctx context.Context) error {
		var err error
		pod, err = api.pods.Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pod, err
}

// toSandbox describes pod; with probe, a pod that runs is Alive only if
// its runboxd answers.
func (p *Provider) toSandbox(ctx context.Context, api *kubeAPI, pod *corev1.Pod, probe bool) runbox.Sandbox {
	id := pod.Labels[LabelSandbox]
	detail := map[string]string{
		"namespace": pod.Namespace,
		"pod":       pod.Name,
		"uid":       string(pod.UID),
		"node":      pod.Spec.NodeName,
		"phase":     string(pod.Status.Phase),
		"stream":    "exec",
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName {
			detail["image"] = c.Image
		}
	}
	var rec podSpecRecord
	if json.Unmarshal([]byte(pod.Annotations[AnnotationSpec]), &rec) == nil && rec.Network != "" {
		detail["network"] = rec.Network
	}
	alive := false
	if why := podLost(pod); why != "" {
		detail["lost"] = why
	} else if !probe {
		alive = true
	} else if err := probeDaemon(ctx, p.podDialer(api, pod.Name, string(pod.UID), id, pod.Annotations[AnnotationSecret], nil), id); err != nil {
		detail["lost"] = fmt.Sprintf("pod %s/%s runs but its runboxd does not answer: %v", pod.Namespace, pod.Name, err)
	} else {
		alive = true
	}
	return runbox.Sandbox{
		ID:       id,
		Name:     pod.Labels[LabelName],
		Provider: ProviderName,
		Created:  pod.CreationTimestamp.Time,
		Alive:    alive,
		Detail:   detail,
	}
}

// probeDaemon asks runboxd for Info through dial, bounded by aliveTimeout.
func probeDaemon(ctx context.Context, dial runbox.Dialer, name string) error {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	c := rbclient.New(dial, rbclient.WithSandboxName(name))
	defer c.Close()
	_, err := c.Info(ctx)
	return err
}

// podLost says why pod cannot hold a live runboxd ("" when it can, or may
// soon): it is being deleted, it has ended (evicted, past its deadline),
// or its workload container has terminated (OOMKilled, killed, exited).
func podLost(pod *corev1.Pod) string {
	name := pod.Namespace + "/" + pod.Name
	if pod.DeletionTimestamp != nil {
		return fmt.Sprintf("pod %s is being deleted (since %s)", name, pod.DeletionTimestamp.Format("15:04:05"))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName || cs.State.Terminated == nil {
			continue
		}
		t := cs.State.Terminated
		why := fmt.Sprintf("container %s of pod %s terminated: %s (exit code %d", containerName, name, firstNonEmpty(t.Reason, "Terminated"), t.ExitCode)
		if t.Signal != 0 {
			why += fmt.Sprintf(", signal %d", t.Signal)
		}
		why += ")"
		if m := strings.TrimSpace(t.Message); m != "" {
			why += ": " + oneLine(m)
		}
		if pod.Status.Reason != "" {
			why += fmt.Sprintf("; pod %s: %s", pod.Status.Phase, pod.Status.Reason)
		}
		return why
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		why := fmt.Sprintf("pod %s has ended (%s)", name, pod.Status.Phase)
		if pod.Status.Reason != "" {
			why = fmt.Sprintf("pod %s has ended: %s", name, pod.Status.Reason) // Evicted, DeadlineExceeded
		}
		if m := strings.TrimSpace(pod.Status.Message); m != "" {
			why += ": " + oneLine(m)
		}
		return why
	case corev1.PodPending:
		return fmt.Sprintf("pod %s is pending (not started yet)", name)
	}
	return ""
}

// lostCause turns err, a failed stream to the pod's runboxd, into
// runbox.ErrSandboxLost naming the pod's state when the pod is gone,
// replaced (another UID), ended or its container has stopped; otherwise
// err is returned as it is (the client retries within its window).
func lostCause(ctx context.Context, api *kubeAPI, name, uid string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), aliveTimeout)
	defer cancel()
	pod, gerr := getPod(ctx, api, name)
	switch {
	case gerr != nil:
		return err
	case pod == nil:
		return fmt.Errorf("%w: pod %s/%s is gone: %w", runbox.ErrSandboxLost, api.namespace, name, err)
	case uid != "" && string(pod.UID) != uid:
		return fmt.Errorf("%w: pod %s/%s was deleted (a new pod has its name): %w", runbox.ErrSandboxLost, api.namespace, name, err)
	}
	if why := podLost(pod); why != "" {
		return fmt.Errorf("%w: %s: %w", runbox.ErrSandboxLost, why, err)
	}
	return err
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}
