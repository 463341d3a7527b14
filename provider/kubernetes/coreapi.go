package kubernetes

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/watch"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// The provider talks to the API server's core/v1 group only: pods (create,
// get, list, watch, delete, and the exec subresource) and secrets (create,
// get, delete). It builds its clients over a scheme of its own holding
// just those types, rather than client-go's clientset, whose scheme
// (k8s.io/client-go/kubernetes/scheme) registers every built-in API group
// at package init: every runbox-full command paid that start-up
// (docs/performance.md), kubernetes or not. TestFullLinksNoClientset keeps
// the clientset out of runbox-full's link set.

// coreAPI is the provider's client of the core/v1 group in one namespace.
type coreAPI struct {
	rest    rest.Interface
	params  runtime.ParameterCodec
	pods    apiResource[*corev1.Pod, *corev1.PodList]
	secrets apiResource[*corev1.Secret, *corev1.SecretList]
}

// newCoreAPI makes the core/v1 clients over hc with cfg, as client-go's
// typed CoreV1 client configures itself, for namespace ns.
func newCoreAPI(cfg *rest.Config, hc *http.Client, ns string) (*coreAPI, error) {
	sch := runtime.NewScheme()
	// meta/v1's unversioned kinds (Status, WatchEvent, the options) as
	// client-go's scheme registers them, then core/v1 with its own.
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	if err := corev1.AddToScheme(sch); err != nil {
		return nil, fmt.Errorf("kubernetes client scheme: %w", err)
	}
	codecs := serializer.NewCodecFactory(sch)
	c := rest.CopyConfig(cfg)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(sch, codecs).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, err
	}
	params := runtime.NewParameterCodec(sch)
	return &coreAPI{
		rest:   rc,
		params: params,
		pods: apiResource[*corev1.Pod, *corev1.PodList]{rc, params, ns, "pods",
			func() *corev1.Pod { return &corev1.Pod{} }, func() *corev1.PodList { return &corev1.PodList{} }},
		secrets: apiResource[*corev1.Secret, *corev1.SecretList]{rc, params, ns, "secrets",
			func() *corev1.Secret { return &corev1.Secret{} }, func() *corev1.SecretList { return &corev1.SecretList{} }},
	}, nil
}

// apiResource is one namespaced resource's calls, as client-go's generated
// typed clients make them (k8s.io/client-go/gentype, which is not used
// because it links client-go's fake clientset machinery, and its package
// inits, into every binary).
type apiResource[T, L runtime.Object] struct {
	rest      rest.Interface
	params    runtime.ParameterCodec
	namespace string
	name      string
	newObj    func() T
	newList   func() L
}

// Create creates obj.
func (r apiResource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	res := r.newObj()
	err := r.rest.Post().Namespace(r.namespace).Resource(r.name).
		VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(res)
	return res, err
}

// Get reads the object called name.
func (r apiResource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	res := r.newObj()
	err := r.rest.Get().Namespace(r.namespace).Resource(r.name).Name(name).
		VersionedParams(&opts, r.params).Do(ctx).Into(res)
	return res, err
}

// List lists the objects opts selects.
func (r apiResource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	res := r.newList()
	err := r.rest.Get().Namespace(r.namespace).Resource(r.name).
		VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Do(ctx).Into(res)
	return res, err
}

// Watch watches the objects opts selects.
func (r apiResource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.rest.Get().Namespace(r.namespace).Resource(r.name).
		VersionedParams(&opts, r.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// Delete deletes the object called name.
func (r apiResource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.rest.Delete().Namespace(r.namespace).Resource(r.name).Name(name).
		Body(&opts).Do(ctx).Error()
}

// timeoutOf is a list's or watch's server-side timeout, as the typed
// clients pass it to the request.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
