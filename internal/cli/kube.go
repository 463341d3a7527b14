package cli

import (
	"github.com/spf13/pflag"

	"github.com/runbox/runbox/provider/kubernetes"
)

// kubeFlags are up's (and run's) flags for the kubernetes provider. The
// other commands find a sandbox through the same configuration taken from
// the environment: KUBECONFIG, $RUNBOX_KUBE_CONTEXT, $RUNBOX_KUBE_NAMESPACE.
type kubeFlags struct {
	namespace, podTemplate, context, runboxdImage string
}

func (f *kubeFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.namespace, "namespace", "", "kubernetes: the pods' namespace (default: $"+kubernetes.NamespaceEnv+", else the context's)")
	fs.StringVar(&f.podTemplate, "pod-template", "", "kubernetes: a pod manifest (YAML or JSON) to make the pod from (default: $"+kubernetes.PodTemplateEnv+", else runbox's hardened default)")
	fs.StringVar(&f.context, "context", "", "kubernetes: the kubeconfig context (default: $"+kubernetes.ContextEnv+", else the current one)")
	fs.StringVar(&f.runboxdImage, "runboxd-image", "", "kubernetes: the runboxd image the init container runs (default: $"+kubernetes.RunboxdImageEnv+", else "+kubernetes.DefaultRunboxdImage+")")
}

// set reports whether any of the flags is given.
func (f *kubeFlags) set() bool {
	return f.namespace != "" || f.podTemplate != "" || f.context != "" || f.runboxdImage != ""
}

// apply gives p the flags set; the others leave its defaults.
func (f *kubeFlags) apply(p *kubernetes.Provider) {
	if f.namespace != "" {
		p.Namespace = f.namespace
	}
	if f.podTemplate != "" {
		p.PodTemplate = f.podTemplate
	}
	if f.context != "" {
		p.Context = f.context
	}
	if f.runboxdImage != "" {
		p.RunboxdImage = f.runboxdImage
	}
}
