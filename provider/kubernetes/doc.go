// Package kubernetes is the runbox provider whose sandboxes are pods. It
// talks to the cluster through client-go, with the usual configuration:
// a kubeconfig ($KUBECONFIG, ~/.kube/config) and its context, or the
// in-cluster service account; the namespace comes from the provider (the
// CLI's --namespace, $RUNBOX_KUBE_NAMESPACE), else the context, else the
// service account's, else "default".
//
// A sandbox is a pod made from a template (the user's, or an empty one)
// to which runbox adds what it needs (see buildPod): an init container from
// the small runboxd image copies the static runboxd binary into an emptyDir
// mounted read-only at /.runbox in the workload container, whose
// entrypoint is /.runbox/runboxd serve (PID 1). runboxd listens on an
// abstract unix socket named after the sandbox, in the pod's network
// namespace: no file in the pod holds it, and no command can remove it.
//
// The client reaches runboxd through the API server's pod exec stream
// running `runboxd proxy` (WebSocket, with SPDY as the fallback), so no
// pod network access is needed. One stream carries many concurrent execs
// (HTTP/2); when it breaks, the client opens another and re-attaches, and
// the commands run on: their lifetime is runboxd's, not the stream's.
//
// With Home set, the provider keeps a local record of each sandbox it
// creates or reaches (<Home>/kubernetes/<id>: the pod, namespace and
// secret), from which the runbox CLI reaches the sandbox through a
// persistent endpoint on this machine: one exec stream of `runboxd proxy
// --mux`, a yamux stream per connection (StreamDialer, endpoint.go).
//
// A sandbox on --network private (NetworkPrivate, egress.go) has runboxd's
// egress proxy on the pod's loopback and a host side on the machine that
// created it (`runbox-full egress-host kubernetes ID`, ServeEgress), which
// lives as long as its local record. What else the pod reaches is the pod
// network's: the operator's NetworkPolicy closes it.
//
// Labels and the pod's UID are the registry, so any machine with the
// kubeconfig finds a sandbox without local state:
//
//	runbox.dev/sandbox=<id>            the sandbox id (12 hex digits); the pod is runbox-<id>
//	runbox.dev/name=<name>             its optional alias
//	runbox.dev/network=private         on a private sandbox's pod
//	app.kubernetes.io/managed-by=runbox
//	annotation runbox.dev/spec         the spec it was created from (JSON)
//	annotation runbox.dev/secret       the Secret holding the sandbox's secret (see auth.go)
//
// Every API call is bounded by a timeout and retried while it fails
// transiently (429, 5xx, timeouts, connection resets), waiting as a
// Retry-After asks. Deletes carry the pod's UID as a precondition. A pod
// that is gone, being deleted, evicted, past its activeDeadlineSeconds, or
// whose workload container terminated (OOMKilled, killed) makes clients
// fail with runbox.ErrSandboxLost naming that cause.
package kubernetes
