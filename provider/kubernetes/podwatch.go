package kubernetes

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/runbox/runbox"
)

// A stream to runboxd watches its pod. The moment the pod is being deleted,
// has ended, or its workload container has terminated, the sandbox is lost:
// the stream is cut with runbox.ErrSandboxLost naming why, and every later
// dial is refused the same way. Without the watch, a client would keep
// talking to a pod in its termination grace period (runboxd as PID 1 drops
// the kubelet's SIGTERM) and learn of its end only from the SIGKILL; and a
// result cut short by the pod's end could pass for the command's own.

// podWatch is a watch on one pod with its latest state.
type podWatch struct {
	w      watch.Interface
	cancel context.CancelFunc
	pod    *corev1.Pod // nil: deleted
}

// stop ends the watch.
func (pw *podWatch) stop() {
	if pw.w != nil {
		pw.w.Stop()
	}
	if pw.cancel != nil {
		pw.cancel()
	}
}

// watchPod reads the pod (within ctx) and starts a watch on it from that
// state, living as long as base (the stream's life). A pod that is gone
// has no watch.
func watchPod(ctx, base context.Context, api *kubeAPI, name string) (*podWatch, error) {
	pod, err := getPod(ctx, api, name)
	if err != nil || pod == nil {
		return &podWatch{}, err
	}
	pw := &podWatch{pod: pod}
	err = call(ctx, "watch pod "+api.namespace+"/"+name, func(actx context.Context) error {
		wctx, cancel := context.WithCancel(base)
		// Only starting the watch is bounded by the attempt's timeout.
		t := time.AfterFunc(time.Until(deadlineOf(actx)), cancel)
		w, err := api.pods.Watch(wctx, metav1.ListOptions{
			FieldSelector:   "metadata.name=" + name,
			ResourceVersion: pod.ResourceVersion,
		})
		if !t.Stop() && err == nil {
			w.Stop()
			err = fmt.Errorf("watch pod %s/%s: %w", api.namespace, name, context.DeadlineExceeded)
		}
		if err != nil {
			cancel()
			return err
		}
		pw.w, pw.cancel = w, cancel
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pw, nil
}

// deadlineOf is ctx's deadline, or apiTimeout from now.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(apiTimeout)
}

// apply takes ev's pod state.
func (pw *podWatch) apply(ev watch.Event) {
	switch ev.Type {
	case watch.Added, watch.Modified:
		if pod, ok := ev.Object.(*corev1.Pod); ok {
			pw.pod = pod
		}
	case watch.Deleted:
		pw.pod = nil
	}
}

// lost says why the pod with uid cannot hold a live runboxd, as an error
// wrapping runbox.ErrSandboxLost, or nil.
func (pw *podWatch) lost(namespace, name, uid string) error {
	switch {
	case pw.pod == nil:
		return fmt.Errorf("%w: pod %s/%s is gone", runbox.ErrSandboxLost, namespace, name)
	case uid != "" && string(pw.pod.UID) != uid:
		return fmt.Errorf("%w: pod %s/%s was deleted (a new pod has its name)", runbox.ErrSandboxLost, namespace, name)
	}
	if why := podLost(pw.pod); why != "" {
		return fmt.Errorf("%w: %s", runbox.ErrSandboxLost, why)
	}
	return nil
}

// follow reads the watch until the pod is lost, then calls onLost with
// why, or until base ends. A watch the server ends (they time out) is
// started again.
func (pw *podWatch) follow(base context.Context, api *kubeAPI, name, uid string, onLost func(error)) {
	defer func() { pw.stop() }()
	for {
		if pw.w == nil {
			onLost(pw.lost(api.namespace, name, uid))
			return
		}
		for ev := range pw.w.ResultChan() {
			if ev.Type == watch.Error {
				continue
			}
			pw.apply(ev)
			if err := pw.lost(api.namespace, name, uid); err != nil {
				onLost(err)
				return
			}
		}
		if base.Err() != nil {
			return
		}
		next, err := watchPod(base, base, api, name)
		if err != nil {
			if base.Err() != nil {
				return
			}
			select {
			case <-base.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		pw.stop()
		pw.w, pw.cancel, pw.pod = next.w, next.cancel, next.pod
		if err := pw.lost(api.namespace, name, uid); err != nil {
			onLost(err)
			return
		}
	}
}
