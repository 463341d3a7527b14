package kubernetes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Remove stops every exec with the stop protocol (the Shutdown RPC through
// runboxd), waits for the workload container to stop, and deletes the pod
// and its Secret, each delete with a UID precondition (a pod made since
// under the same name is never touched).
//
// A pod that has ended (evicted, past its deadline, its container
// terminated) is deleted without force: nothing it ran can have outlived
// its container. Force matters for a running pod whose runboxd does not
// answer: without it Remove fails with runbox.ErrSandboxLost; with it the
// pod is deleted (the kubelet kills what runs in it).
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	if !sandboxkey.ValidID(sb.ID) {
		return fail(runbox.ErrSandboxNotFound)
	}
	// The local record goes whatever becomes of the pod: its endpoint
	// exits, and the front hands the next command to runbox-full's lookup.
	defer p.forget(sb.ID)
	api, err := p.client()
	if err != nil {
		return fail(err)
	}
	pods, err := listPods(ctx, api, sb.ID)
	if err != nil {
		return fail(err)
	}
	if len(pods) == 0 {
		if err := deleteSecret(ctx, api, sb.ID); err != nil {
			return fail(err)
		}
		return fail(runbox.ErrSandboxNotFound)
	}
	for i := range pods {
		if err := p.removePod(ctx, api, &pods[i], force); err != nil {
			return fail(err)
		}
	}
	if err := deleteSecret(ctx, api, sb.ID); err != nil {
		return fail(err)
	}
	return nil
}

// removePod shuts the pod's runboxd down and deletes the pod.
func (p *Provider) removePod(ctx context.Context, api *kubeAPI, pod *corev1.Pod, force bool) error {
	if podLost(pod) == "" {
		sctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
			defer cancel()
		}
		id := pod.Labels[LabelSandbox]
		rc := rbclient.New(p.podDialer(api, pod.Name, string(pod.UID), id, pod.Annotations[AnnotationSecret], nil), rbclient.WithSandboxName(id))
		// An error is expected when runboxd exits before its answer gets
		// out; whether it stopped is decided by the container's state.
		shutdownErr := rc.Shutdown(sctx, 0)
		rc.Close()
		if !waitStopped(ctx, api, pod, exitTimeout) && shutdownErr != nil && !force {
			return fmt.Errorf("%w: runboxd in running pod %s/%s does not answer (%v); remove it with force",
				runbox.ErrSandboxLost, api.namespace, pod.Name, shutdownErr)
		}
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return deletePod(dctx, api, pod.Name, string(pod.UID), 1)
}

// waitStopped waits up to d for the pod's workload container to stop (or
// the pod to go) and reports whether it did.
func waitStopped(ctx context.Context, api *kubeAPI, pod *corev1.Pod, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		cur, err := getPod(ctx, api, pod.Name)
		if err == nil && (cur == nil || cur.UID != pod.UID || podLost(cur) != "") {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// deletePod deletes the pod with the given UID (a precondition: another pod
// of that name is left alone) and grace period; one already gone is fine.
func deletePod(ctx context.Context, api *kubeAPI, name, uid string, grace int64) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: new(types.UID(uid))}
	}
	err := call(ctx, "delete pod "+api.namespace+"/"+name, func(ctx context.Context) error {
		err := api.pods.Delete(ctx, name, opts)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or another pod now
			return nil
		}
		return err
	})
	return err
}

// deleteSecret deletes the sandbox's Secret (UID precondition from a fresh
// read); one already gone is fine. The garbage collector deletes it with
// its pod too; this does not wait for it.
func deleteSecret(ctx context.Context, api *kubeAPI, id string) error {
	name := secretName(id)
	return call(ctx, "delete secret "+api.namespace+"/"+name, func(ctx context.Context) error {
		s, err := api.secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if s.Labels[LabelSandbox] != id {
			return nil // not runbox's
		}
		err = api.secrets.Delete(ctx, name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &s.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
}
