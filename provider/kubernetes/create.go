package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// waitingFailures are reasons a container waits for that will not go away
// by waiting longer: Create fails at once with them.
var waitingFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true,
}

// Create makes the sandbox's pod and its Secret, waits for the pod to run
// and for runboxd to answer through the exec stream, and returns the
// sandbox. A pod that cannot start (an image that cannot be pulled, an
// init container that fails) is deleted, and the error says why.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	fail := func(err error) (runbox.Sandbox, error) {
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: spec.Name, Err: err}
	}
	if spec.FromSnapshot != "" {
		// Ignoring it would give a sandbox without the snapshot's files.
		return fail(fmt.Errorf("from snapshot %s: provider %s cannot snapshot: %w", spec.FromSnapshot, ProviderName, runbox.ErrUnsupported))
	}
	if err := p.checkEgress(spec); err != nil {
		return fail(err)
	}
	tmpl, err := loadTemplate(p.podTemplatePath())
	if err != nil {
		return fail(err)
	}
	id, err := newID()
	if err != nil {
		return fail(err)
	}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		return fail(err)
	}
	pod, err := buildPod(tmpl, spec, podParams{
		id: id, secretName: secretName(id), authSum: daemonauth.Sum(secret),
		runboxdImage: p.runboxdImage(), activeDeadline: p.activeDeadline(),
	})
	if err != nil {
		return fail(err)
	}
	api, err := p.client()
	if err != nil {
		return fail(err)
	}
	if spec.Name != "" {
		if taken, err := listPods(ctx, api, ""); err != nil {
			return fail(err)
		} else {
			for _, o := range taken {
				if o.Labels[LabelName] == spec.Name || o.Labels[LabelSandbox] == spec.Name {
					return fail(fmt.Errorf("the name %q is taken by sandbox %s (pod %s): %w", spec.Name, o.Labels[LabelSandbox], o.Name, runbox.ErrNameInUse))
				}
			}
		}
	}
	created, err := createPod(ctx, api, pod)
	if err != nil {
		return fail(err)
	}
	cleanup := func(cause error) (runbox.Sandbox, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := deletePod(dctx, api, created.Name, string(created.UID), 0); derr != nil {
			cause = fmt.Errorf("%w (and deleting the pod failed: %v)", cause, derr)
		}
		return fail(cause)
	}
	if err := createSecret(ctx, api, id, created, secret); err != nil {
		return cleanup(err)
	}
	p.keepSecret(string(created.UID), secret)
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	running, err := waitRunning(sctx, api, created)
	if err != nil {
		return cleanup(err)
	}
	dial := p.podDialer(api, running.Name, string(running.UID), id, secretName(id), nil)
	var last error
	for {
		if last = probeDaemon(sctx, dial, id); last == nil {
			break
		}
		if errors.Is(last, runbox.ErrSandboxLost) || errors.Is(last, runbox.ErrUnauthenticated) || sctx.Err() != nil {
			return cleanup(fmt.Errorf("runboxd in pod %s/%s does not answer: %w", api.namespace, running.Name, last))
		}
		select {
		case <-sctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	sb := p.toSandboxAlive(running)
	p.remember(localRecord{ID: id, Name: spec.Name, Namespace: api.namespace, Context: p.context(), Pod: running.Name, UID: string(running.UID)}, secret)
	if spec.Network == NetworkPrivate {
		if err := p.startEgress(id, spec.Egress); err != nil {
			p.forget(id) // a host side that started sees it and exits
			return cleanup(err)
		}
	}
	return sb, nil
}

// toSandboxAlive describes a pod whose runboxd just answered.
func (p *Provider) toSandboxAlive(pod *corev1.Pod) runbox.Sandbox {
	image := ""
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName {
			image = c.Image
		}
	}
	sb := runbox.Sandbox{
		ID:       pod.Labels[LabelSandbox],
		Name:     pod.Labels[LabelName],
		Provider: ProviderName,
		Created:  pod.CreationTimestamp.Time,
		Alive:    true,
		Detail: map[string]string{
			"namespace": pod.Namespace, "pod": pod.Name, "uid": string(pod.UID), "node": pod.Spec.NodeName,
			"phase": string(pod.Status.Phase), "stream": "exec", "image": image,
		},
	}
	var rec podSpecRecord
	if json.Unmarshal([]byte(pod.Annotations[AnnotationSpec]), &rec) == nil && rec.Network != "" {
		sb.Detail["network"] = rec.Network
	}
	return sb
}

// newID returns a fresh sandbox id.
var newID = sandboxkey.NewID

// createPod creates pod. A retried create that finds its own pod (an
// earlier attempt that timed out after the server made it) takes it.
func createPod(ctx context.Context, api *kubeAPI, pod *corev1.Pod) (*corev1.Pod, error) {
	var created *corev1.Pod
	err := call(ctx, "create pod "+api.namespace+"/"+pod.Name, func(ctx context.Context) error {
		var err error
		created, err = api.pods.Create(ctx, pod, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// The name holds the sandbox's random id: a pod of that name
			// with its label is this call's own.
			got, gerr := api.pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if gerr == nil && got.Labels[LabelSandbox] == pod.Labels[LabelSandbox] &&
				got.Annotations[AnnotationSpec] == pod.Annotations[AnnotationSpec] {
				created = got
				return nil
			}
		}
		return err
	})
	return created, err
}

// waitRunning polls the pod until its workload container runs, and fails
// at once when it cannot start (see waitingFailures, a failed init
// container, a pod that ended).
func waitRunning(ctx context.Context, api *kubeAPI, pod *corev1.Pod) (*corev1.Pod, error) {
	delay := 50 * time.Millisecond
	cur := pod
	for {
		if err := startFailure(cur); err != nil {
			return nil, err
		}
		for _, cs := range cur.Status.ContainerStatuses {
			if cs.Name == containerName && cs.State.Running != nil {
				return cur, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pod %s/%s did not start in time (%s): %w", api.namespace, pod.Name, pendingWhy(cur), ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
		next, err := getPod(ctx, api, pod.Name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("pod %s/%s did not start in time (%s): %w", api.namespace, pod.Name, pendingWhy(cur), err)
			}
			return nil, err
		}
		if next == nil || next.UID != pod.UID {
			return nil, fmt.Errorf("%w: pod %s/%s was deleted while starting", runbox.ErrSandboxLost, api.namespace, pod.Name)
		}
		cur = next
	}
}

// startFailure says why pod will not start, or nil.
func startFailure(pod *corev1.Pod) error {
	name := pod.Namespace + "/" + pod.Name
	for _, cs := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && waitingFailures[w.Reason] {
			hint := ""
			if cs.Name == initName && strings.Contains(w.Reason, "Image") {
				hint = " (build and load the runboxd image: see docs/kubernetes.md)"
			}
			return fmt.Errorf("pod %s: container %s cannot start: %s: %s%s", name, cs.Name, w.Reason, oneLine(w.Message), hint)
		}
		if t := cs.State.Terminated; t != nil && (cs.Name == containerName || t.ExitCode != 0) {
			return fmt.Errorf("pod %s: container %s terminated: %s (exit code %d): %s", name, cs.Name, t.Reason, t.ExitCode, oneLine(t.Message))
		}
	}
	if pod.DeletionTimestamp != nil {
		return fmt.Errorf("%w: pod %s is being deleted", runbox.ErrSandboxLost, name)
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return fmt.Errorf("pod %s ended before runboxd started: %s %s", name, pod.Status.Reason, oneLine(pod.Status.Message))
	}
	return nil
}

// pendingWhy summarises why a pod has not started yet.
func pendingWhy(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return fmt.Sprintf("%s: %s", c.Type, oneLine(c.Message))
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("container %s waiting: %s %s", cs.Name, w.Reason, oneLine(w.Message))
		}
	}
	return "phase " + string(pod.Status.Phase)
}
