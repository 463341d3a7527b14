package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/kubernetes"
)

// init keeps client-go's log (klog) off the CLI's stderr: its streams
// report their own closing as errors there, and runbox reports what failed
// itself, as one line.
func init() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

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
