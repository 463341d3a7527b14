package kubernetes

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/runbox/runbox"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "kubernetes"

// Environment variables the provider reads when its fields are empty.
const (
	// NamespaceEnv names the namespace of runbox's pods.
	NamespaceEnv = "RUNBOX_KUBE_NAMESPACE"
	// ContextEnv names the kubeconfig context to use.
	ContextEnv = "RUNBOX_KUBE_CONTEXT"
	// PodTemplateEnv is the path of a pod template (YAML or JSON).
	PodTemplateEnv = "RUNBOX_KUBE_POD_TEMPLATE"
	// RunboxdImageEnv is the reference of the runboxd image the init
	// container runs.
	RunboxdImageEnv = "RUNBOX_KUBE_RUNBOXD_IMAGE"
)

// DefaultRunboxdImage is the runboxd image's reference when neither
// Provider.RunboxdImage nor $RUNBOX_KUBE_RUNBOXD_IMAGE names one: what
// scripts/runboxd-image.sh builds and docs/kubernetes.md loads into a node.
const DefaultRunboxdImage = "runbox.local/runboxd:latest"

// Labels and annotations on runbox's pods and secrets.
const (
	// LabelSandbox holds the sandbox id (12 hex digits).
	LabelSandbox = "runbox.dev/sandbox"
	// LabelName holds the sandbox's alias, when it has one.
	LabelName = "runbox.dev/name"
	// LabelManagedBy is app.kubernetes.io/managed-by=runbox.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationSpec holds the spec the sandbox was created from (JSON).
	AnnotationSpec = "runbox.dev/spec"
	// AnnotationSecret names the Secret holding the sandbox's secret.
	AnnotationSecret = "runbox.dev/secret"
)

// managedBy is LabelManagedBy's value.
const managedBy = "runbox"

// Names and paths in the pod.
const (
	// containerName is the workload container, whose PID 1 is runboxd.
	containerName = "sandbox"
	// initName is the init container that installs runboxd.
	initName = "runbox-install"
	// volumeName is the emptyDir runboxd is installed into.
	volumeName = "runbox"
	// podDir is where that volume is mounted (read-only in the workload).
	podDir = "/.runbox"
	// podRunboxd is runboxd's path in the workload container.
	podRunboxd = podDir + "/runboxd"
	// secretKey is the Secret's data key holding the sandbox's secret.
	secretKey = "secret"
)

// Timing knobs. None decides a command's fate: runboxd enforces exec
// deadlines itself; these bound how long the provider waits on the API.
const (
	// apiTimeout bounds one API call (one attempt).
	apiTimeout = 20 * time.Second
	// apiAttempts is how many times a call that failed transiently is tried.
	apiAttempts = 5
	// startTimeout bounds how long Create waits for the pod to run and its
	// runboxd to answer (an image pull on a real cluster included).
	startTimeout = 3 * time.Minute
	// aliveTimeout bounds the Info probe that decides Sandbox.Alive.
	aliveTimeout = 5 * time.Second
	// shutdownTimeout bounds the Shutdown RPC of Remove when the caller's
	// context has no deadline.
	shutdownTimeout = 2 * time.Minute
	// exitTimeout is how long Remove waits for the container to stop after
	// the Shutdown RPC before it deletes the pod anyway.
	exitTimeout = 10 * time.Second
	// DefaultActiveDeadline caps a pod's life (activeDeadlineSeconds) when
	// neither the Provider nor the template sets a shorter one.
	DefaultActiveDeadline = 24 * time.Hour
	// terminationGrace is the pod's terminationGracePeriodSeconds when the
	// template sets none. runboxd as PID 1 drops the kubelet's SIGTERM (its
	// commands could send it one too), so a pod deleted from outside lives
	// this long before the kubelet's SIGKILL; clients know it is lost the
	// moment its deletion starts (podwatch.go). runbox rm stops every exec
	// with the stop protocol first.
	terminationGrace = 5
)

// Errors specific to the kubernetes provider. Compare with errors.Is.
var (
	// ErrImageRequired means neither the spec nor the pod template named
	// the workload image.
	ErrImageRequired = errors.New("a kubernetes sandbox needs an image (--image, or the template's container image)")
	// ErrTemplateConflict means the pod template sets something runbox must
	// own (the workload's command, the /.runbox volume, a restart policy
	// that would restart runboxd).
	ErrTemplateConflict = errors.New("pod template conflicts with runbox")
	// errNotConfigured means this machine has no kubeconfig and does not
	// run in a pod: Get finds nothing and List lists nothing, quietly, so
	// the CLI's lookups across providers stay as they were for users of
	// other providers; Create fails with runbox.ErrProviderUnavailable.
	errNotConfigured = errors.New("no kubernetes cluster configured")
)

// Provider creates sandboxes that are pods with runboxd as the workload
// container's PID 1. The zero value uses the usual client configuration
// (KUBECONFIG, ~/.kube/config, or in-cluster) and namespace resolution.
type Provider struct {
	// Kubeconfig is the kubeconfig file; "" means $KUBECONFIG, else
	// ~/.kube/config, else the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context; "" means $RUNBOX_KUBE_CONTEXT,
	// else the current context.
	Context string
	// Namespace is the namespace of runbox's pods; "" means
	// $RUNBOX_KUBE_NAMESPACE, else the context's namespace, else the
	// in-cluster service account's, else "default".
	Namespace string
	// PodTemplate is the path of a pod manifest (YAML or JSON) that pods
	// are made from; "" means $RUNBOX_KUBE_POD_TEMPLATE, else runbox's
	// default (see pod.go).
	PodTemplate string
	// RunboxdImage is the image whose /runboxd the init container
	// installs; "" means $RUNBOX_KUBE_RUNBOXD_IMAGE, else
	// DefaultRunboxdImage.
	RunboxdImage string
	// ActiveDeadline caps every pod's activeDeadlineSeconds; zero means
	// DefaultActiveDeadline.
	ActiveDeadline time.Duration
	// Config, when set, is used instead of loading a kubeconfig (tests,
	// programs with their own).
	Config *rest.Config
	// Home, when set, is the runbox home under which the provider keeps a
	// local record of each sandbox it creates or reaches
	// (<Home>/kubernetes/<id>: its pod, namespace and secret, 0600), so the
	// runbox front reaches it through its persistent endpoint (StreamDialer)
	// without asking the cluster; "" keeps none.
	Home string
	// EgressHost is the runbox-full binary whose hidden `egress-host`
	// command is a private sandbox's host side (egress.go); "" finds it
	// as the runbox front does ($RUNBOX_FULL, beside this executable, on
	// PATH).
	EgressHost string

	mu  sync.Mutex
	api *kubeAPI
	// secrets holds the secrets of sandboxes this provider created or
	// read, by pod UID.
	secrets sync.Map
}

var _ runbox.Provider = (*Provider)(nil)

// kubeAPI is what the provider made from its configuration, once.
type kubeAPI struct {
	cfg       *rest.Config
	hc        *http.Client
	namespace string
	*coreAPI  // in namespace
}

// Name returns "kubernetes".
func (p *Provider) Name() string { return ProviderName }

// Close closes the provider's idle connections to the API server.
// Sandboxes live on.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.api != nil {
		utilnet.CloseIdleConnectionsFor(p.api.hc.Transport)
	}
	return nil
}

// client returns the API client and namespace, loading the configuration
// on first use. A configuration that cannot be found or used is
// runbox.ErrProviderUnavailable, saying what to set.
func (p *Provider) client() (*kubeAPI, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.api != nil {
		return p.api, nil
	}
	cfg, ns, err := p.loadConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	// The client certificate and key are read once, here: with files,
	// client-go would start a goroutine that reloads them for the life of
	// the process (a process that must pick up rotated files makes a new
	// Provider).
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("%w: kubernetes client credentials: %v", runbox.ErrProviderUnavailable, err)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "runbox"
	}
	// client-go's own limiter would queue calls behind each other; the
	// provider bounds and retries its calls itself.
	cfg.QPS, cfg.Burst = 50, 100
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: kubernetes client: %v", runbox.ErrProviderUnavailable, err)
	}
	core, err := newCoreAPI(cfg, hc, ns)
	if err != nil {
		return nil, fmt.Errorf("%w: kubernetes client: %v", runbox.ErrProviderUnavailable, err)
	}
	p.api = &kubeAPI{cfg: cfg, hc: hc, namespace: ns, coreAPI: core}
	return p.api, nil
}

// loadConfig resolves the REST configuration and the namespace.
func (p *Provider) loadConfig() (*rest.Config, string, error) {
	ns := firstNonEmpty(p.Namespace, os.Getenv(NamespaceEnv))
	if p.Config != nil {
		return p.Config, firstNonEmpty(ns, "default"), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if p.Kubeconfig != "" {
		rules.ExplicitPath = p.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: firstNonEmpty(p.Context, os.Getenv(ContextEnv))}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, "", fmt.Errorf("%w: %w (set KUBECONFIG or --context, or run in a pod with a service account)", runbox.ErrProviderUnavailable, errNotConfigured)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: kubernetes client configuration (set KUBECONFIG or --context, or run in a pod with a service account): %v",
			runbox.ErrProviderUnavailable, err)
	}
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("%w: kubernetes namespace: %v", runbox.ErrProviderUnavailable, err)
		}
	}
	return cfg, firstNonEmpty(ns, "default"), nil
}

// runboxdImage returns the runboxd image's reference.
func (p *Provider) runboxdImage() string {
	return firstNonEmpty(p.RunboxdImage, os.Getenv(RunboxdImageEnv), DefaultRunboxdImage)
}

// podTemplatePath returns the pod template's path, "" for the default.
func (p *Provider) podTemplatePath() string {
	return firstNonEmpty(p.PodTemplate, os.Getenv(PodTemplateEnv))
}

// activeDeadline returns the cap on a pod's life, in seconds.
func (p *Provider) activeDeadline() int64 {
	d := p.ActiveDeadline
	if d <= 0 {
		d = DefaultActiveDeadline
	}
	return max(int64(d/time.Second), 1)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
