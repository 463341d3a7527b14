package cli

import (
	"github.com/spf13/pflag"
)

// The kubernetes provider's environment and default image, named here
// without linking the provider (a test of runbox-full's checks them
// against provider/kubernetes).
const (
	kubeNamespaceEnv       = "RUNBOX_KUBE_NAMESPACE"
	kubePodTemplateEnv     = "RUNBOX_KUBE_POD_TEMPLATE"
	kubeContextEnv         = "RUNBOX_KUBE_CONTEXT"
	kubeRunboxdImageEnv    = "RUNBOX_KUBE_RUNBOXD_IMAGE"
	kubeDefaultRunboxImage = "runbox.local/runboxd:latest"
)

// kubeFlags are up's (and run's) flags for the kubernetes provider. The
// other commands find a sandbox through the same configuration taken from
// the environment: KUBECONFIG, $RUNBOX_KUBE_CONTEXT, $RUNBOX_KUBE_NAMESPACE.
type kubeFlags struct {
	namespace, podTemplate, context, runboxdImage string
}

func (f *kubeFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.namespace, "namespace", "", "kubernetes: the pods' namespace (default: $"+kubeNamespaceEnv+", else the context's)")
	fs.StringVar(&f.podTemplate, "pod-template", "", "kubernetes: a pod manifest (YAML or JSON) to make the pod from (default: $"+kubePodTemplateEnv+", else runbox's hardened default)")
	fs.StringVar(&f.context, "context", "", "kubernetes: the kubeconfig context (default: $"+kubeContextEnv+", else the current one)")
	fs.StringVar(&f.runboxdImage, "runboxd-image", "", "kubernetes: the runboxd image the init container runs (default: $"+kubeRunboxdImageEnv+", else "+kubeDefaultRunboxImage+")")
}

// set reports whether any of the flags is given.
func (f *kubeFlags) set() bool {
	return f.namespace != "" || f.podTemplate != "" || f.context != "" || f.runboxdImage != ""
}
