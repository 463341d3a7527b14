package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
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

// apply configures p with the flags given; they are an error with any
// provider but kubernetes.
func (f *kubeFlags) apply(p runbox.Provider) error {
	if f.namespace == "" && f.podTemplate == "" && f.context == "" && f.runboxdImage == "" {
		return nil
	}
	kp, ok := p.(*kubernetes.Provider)
	if !ok {
		return fmt.Errorf("--namespace, --pod-template, --context and --runboxd-image are for the kubernetes provider, not %s", p.Name())
	}
	if f.namespace != "" {
		kp.Namespace = f.namespace
	}
	if f.podTemplate != "" {
		kp.PodTemplate = f.podTemplate
	}
	if f.context != "" {
		kp.Context = f.context
	}
	if f.runboxdImage != "" {
		kp.RunboxdImage = f.runboxdImage
	}
	return nil
}
