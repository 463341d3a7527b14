package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
)

// A kubernetes sandbox's secret lives in a Secret object of its own
// (runbox-<id>, owned by the pod so the garbage collector deletes it with
// the pod), and runboxd in the pod is given only its SHA-256.
//
// Why a Secret and not a pod annotation: reading it takes `get secrets` in
// the namespace, which RBAC grants apart from `get pods` (held by
// dashboards, monitoring, CI bots), is audited as secret access, and may be
// encrypted at rest; an annotation would show in every `kubectl describe
// pod`. Using the secret takes the pod's exec subresource (`create
// pods/exec`), which already lets its holder run anything in the pod: the
// Secret gives away nothing that access does not. Commands in the pod
// cannot read it: the pod gets no service account token unless its template
// asks for one, and nothing in the pod holds the secret (runboxd's
// arguments carry the hash).

// secretName is the name of the sandbox's Secret.
func secretName(id string) string { return "runbox-" + id }

// createSecret stores secret for the pod, owned by it.
func createSecret(ctx context.Context, api *kubeAPI, id string, pod *corev1.Pod, secret []byte) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:   secretName(id),
			Labels: map[string]string{LabelSandbox: id, LabelManagedBy: managedBy},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{secretKey: secret},
	}
	return call(ctx, "create secret "+api.namespace+"/"+s.Name, func(ctx context.Context) error {
		_, err := api.secrets.Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// An earlier attempt that timed out may have made it.
			got, gerr := api.secrets.Get(ctx, s.Name, metav1.GetOptions{})
			if gerr == nil && ownedBy(got, pod.UID) && string(got.Data[secretKey]) == string(secret) {
				return nil
			}
		}
		return err
	})
}

// readSecret reads the sandbox's secret for the pod with uid. A Secret that
// is missing or not owned by that pod is runbox.ErrUnauthenticated.
func readSecret(ctx context.Context, api *kubeAPI, name string, uid types.UID) ([]byte, error) {
	var s *corev1.Secret
	err := call(ctx, "get secret "+api.namespace+"/"+name, func(ctx context.Context) error {
		var err error
		s, err = api.secrets.Get(ctx, name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%w: secret %s/%s of the sandbox is missing", runbox.ErrUnauthenticated, api.namespace, name)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("%w: reading the sandbox's secret %s/%s: %v (runbox needs get on secrets in the namespace)", runbox.ErrUnauthenticated, api.namespace, name, err)
	case err != nil:
		return nil, err
	case uid != "" && !ownedBy(s, uid):
		return nil, fmt.Errorf("%w: secret %s/%s does not belong to pod uid %s", runbox.ErrUnauthenticated, api.namespace, name, uid)
	}
	secret := s.Data[secretKey]
	if err := daemonauth.CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("%w: secret %s/%s: %v", runbox.ErrUnauthenticated, api.namespace, name, err)
	}
	return secret, nil
}

// ownedBy reports whether s is owned by the pod with uid.
func ownedBy(s *corev1.Secret, uid types.UID) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Pod" && o.UID == uid {
			return true
		}
	}
	return false
}

// Dialer returns how to reach the sandbox's runboxd: an exec stream of
// `runboxd proxy` in its pod, authenticated with the secret from the
// sandbox's Secret (read at the first dial, and kept; with Home, in the
// sandbox's local record too).
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer {
	pod := firstNonEmpty(sb.Detail["pod"], "runbox-"+sb.ID)
	return func(ctx context.Context) (net.Conn, error) {
		api, err := p.client()
		if err != nil {
			return nil, err
		}
		keep := func(secret []byte) {
			p.remember(localRecord{ID: sb.ID, Name: sb.Name, Namespace: api.namespace, Context: p.context(), Pod: pod, UID: sb.Detail["uid"]}, secret)
		}
		return p.podDialer(api, pod, sb.Detail["uid"], sb.ID, "", keep)(ctx)
	}
}

// podDialer is Dialer for a pod already looked up. keep, when not nil, is
// given the secret once it is read from the sandbox's Secret (the local
// record of a sandbox a command is about to use: not of every sandbox a
// listing probes).
func (p *Provider) podDialer(api *kubeAPI, pod, uid, id, secretObj string, keep func(secret []byte)) runbox.Dialer {
	secretObj = firstNonEmpty(secretObj, secretName(id))
	proxy := []string{podRunboxd, "proxy", "--socket", socketName(id)}
	raw := func(ctx context.Context) (net.Conn, error) {
		c, err := p.execStream(ctx, api, pod, uid, proxy)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	var mu sync.Mutex
	var secret []byte
	return func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		if secret == nil {
			secret = p.cachedSecret(uid)
		}
		if secret == nil {
			s, err := readSecret(ctx, api, secretObj, types.UID(uid))
			if err != nil {
				mu.Unlock()
				return nil, lostCause(ctx, api, pod, uid, err)
			}
			secret = s
			p.keepSecret(uid, s)
			if keep != nil {
				keep(s)
			}
		}
		s := secret
		mu.Unlock()
		return dialPastKilledProxies(ctx, daemonauth.Dialer(raw, s))
	}
}

// execStream opens an exec stream running command (runboxd proxy) in the
// pod, watched for as long as the stream lives (see podwatch.go): a pod
// already lost is not dialled, and one lost later cuts the stream with
// runbox.ErrSandboxLost.
func (p *Provider) execStream(ctx context.Context, api *kubeAPI, pod, uid string, command []string) (*execConn, error) {
	base, cancel := context.WithCancel(context.Background())
	pw, err := watchPod(ctx, base, api, pod)
	if err != nil {
		cancel()
		return nil, err
	}
	if lerr := pw.lost(api.namespace, pod, uid); lerr != nil {
		pw.stop()
		cancel()
		return nil, lerr
	}
	c, err := dialExec(api, api.namespace, pod, command, func(err error) error {
		return lostCause(ctx, api, pod, uid, err)
	})
	if err != nil {
		pw.stop()
		cancel()
		return nil, err
	}
	c.setOnEnd(cancel)
	go pw.follow(base, api, pod, uid, c.fail)
	return c, nil
}

// proxyKilled reports whether err says the runboxd proxy was killed: it
// exited from a signal, or the container runtime could not start it
// because the memory cgroup's OOM killer took it as it started (runc says
// so only in words: "read init-p: connection reset by peer (possibly
// OOM-killed)", which reaches us through the API server and the exec
// stream's status as text, whatever error type carries it).
func proxyKilled(err error) bool {
	var exit utilexec.CodeExitError
	if errors.As(err, &exit) {
		return exit.Code > 128
	}
	return strings.Contains(err.Error(), "(possibly OOM-killed)")
}

// proxyRetryBudget bounds how long a dial keeps starting a new runboxd
// proxy after the last one was killed by a signal.
const proxyRetryBudget = 20 * time.Second

// dialPastKilledProxies dials, and dials again while the runboxd proxy
// dies from a signal in a pod that still runs (raw checks the pod on each
// dial and fails with runbox.ErrSandboxLost once it is gone). The proxy
// runs in the workload container, at the container's oom_score_adj (995
// or so for a pod with only a memory limit: Burstable QoS), not below the
// commands' 1000 as runboxd's own connection is on the docker provider, so
// when the commands fill the pod's memory the OOM killer may choose it
// over a smaller command, again and again while they do. That costs a
// connection, not the sandbox: the client's own reconnect window is too
// short to outlast such a storm.
func dialPastKilledProxies(ctx context.Context, dial runbox.Dialer) (net.Conn, error) {
	deadline := time.Now().Add(proxyRetryBudget)
	backoff := 50 * time.Millisecond
	for {
		conn, err := dial(ctx)
		if err == nil || !proxyKilled(err) || errors.Is(err, runbox.ErrSandboxLost) ||
			time.Now().Add(backoff).After(deadline) {
			return conn, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// cachedSecret returns the secret of the pod with uid if this provider
// created or read it, else nil.
func (p *Provider) cachedSecret(uid string) []byte {
	if uid == "" {
		return nil
	}
	if v, ok := p.secrets.Load(uid); ok {
		return v.([]byte)
	}
	return nil
}

// keepSecret caches the secret of the pod with uid.
func (p *Provider) keepSecret(uid string, secret []byte) {
	if uid != "" {
		p.secrets.Store(uid, secret)
	}
}
