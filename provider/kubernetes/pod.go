package kubernetes

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
)

// podSpecRecord is the part of the spec a pod's AnnotationSpec keeps.
type podSpecRecord struct {
	Image   string  `json:"image,omitempty"`
	Memory  int64   `json:"memory,omitempty"`
	CPUs    float64 `json:"cpus,omitempty"`
	Network string  `json:"network,omitempty"`
}

// loadTemplate reads the pod template at path: a Pod manifest in YAML or
// JSON. "" is runbox's default, an empty pod.
func loadTemplate(path string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if path == "" {
		return pod, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: pod template: %v", runbox.ErrInvalidSpec, err)
	}
	if err := yaml.UnmarshalStrict(b, pod); err != nil {
		return nil, fmt.Errorf("%w: pod template %s: %v", runbox.ErrInvalidSpec, path, err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("%w: pod template %s is a %s, want a Pod", runbox.ErrInvalidSpec, path, pod.Kind)
	}
	return pod, nil
}

// podParams is what buildPod needs beside the template and the spec.
type podParams struct {
	id, secretName, authSum string
	runboxdImage            string
	activeDeadline          int64
	created                 time.Time
}

// buildPod makes the sandbox's pod from tmpl (which it changes) and spec.
//
// runbox owns, and refuses a template that sets: the workload container's
// command and args (runboxd is its entrypoint), the volume and mount at
// /.runbox, an init container named runbox-install, and a restart policy
// other than Never (a restarted runboxd would have lost every exec).
//
// What the template leaves unset gets runbox's hardened default: no service
// account token, no service links, RuntimeDefault seccomp, every capability
// dropped and no privilege escalation in the workload, restartPolicy Never,
// and an activeDeadlineSeconds cap (a template's larger value is lowered to
// the cap). A template that sets these fields keeps its own values.
func buildPod(tmpl *corev1.Pod, spec runbox.SandboxSpec, pp podParams) (*corev1.Pod, error) {
	pod := tmpl
	if err := setPodMeta(pod, spec, pp); err != nil {
		return nil, err
	}
	ps := &pod.Spec
	if err := setPodDefaults(ps, pp.activeDeadline); err != nil {
		return nil, err
	}
	if spec.Workdir != "" || spec.Rootfs != "" || spec.HostRoot {
		return nil, fmt.Errorf("%w: a pod cannot mount a directory of this machine (--workdir, --rootfs, --host-root); copy files in with runbox cp or runbox sync", runbox.ErrInvalidSpec)
	}
	private, err := setPodNetwork(pod, spec.Network)
	if err != nil {
		return nil, err
	}
	if err := addInstallVolume(ps); err != nil {
		return nil, err
	}
	w := workloadContainer(ps)
	if err := setWorkload(w, spec, pp, private); err != nil {
		return nil, err
	}
	ps.InitContainers = append([]corev1.Container{installContainer(pp.runboxdImage, w.SecurityContext)}, ps.InitContainers...)
	return pod, nil
}

// setPodMeta gives the pod its identity: runbox's name for it, no
// namespace or server-set fields of the template's, the labels that find
// it (the sandbox's id and name) and the annotations that describe it (the
// spec it was made from, its auth secret). It refuses a sandbox name that
// cannot be a label value.
func setPodMeta(pod *corev1.Pod, spec runbox.SandboxSpec, pp podParams) error {
	pod.APIVersion, pod.Kind = "v1", "Pod"
	pod.Name = "runbox-" + pp.id
	pod.GenerateName = ""
	pod.Namespace = ""
	pod.ResourceVersion, pod.UID = "", ""
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[LabelSandbox] = pp.id
	pod.Labels[LabelManagedBy] = managedBy
	if spec.Name != "" {
		if errs := validation.IsValidLabelValue(spec.Name); len(errs) > 0 {
			return fmt.Errorf("%w: name %q cannot be a kubernetes label value: %v", runbox.ErrInvalidSpec, spec.Name, errs)
		}
		pod.Labels[LabelName] = spec.Name
	}
	rec, _ := json.Marshal(podSpecRecord{Image: spec.Image, Memory: spec.Memory, CPUs: spec.CPUs, Network: spec.Network})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationSpec] = string(rec)
	pod.Annotations[AnnotationSecret] = pp.secretName
	return nil
}

// setPodDefaults gives the pod runbox's hardened defaults where the
// template leaves them unset: restartPolicy Never, no service account
// token, no service links, RuntimeDefault seccomp, runbox's termination
// grace, and an activeDeadlineSeconds no larger than activeDeadline. It
// refuses any other restart policy.
func setPodDefaults(ps *corev1.PodSpec, activeDeadline int64) error {
	switch ps.RestartPolicy {
	case "", corev1.RestartPolicyNever:
		ps.RestartPolicy = corev1.RestartPolicyNever
	default:
		return fmt.Errorf("%w: restartPolicy %s would restart runboxd and lose its execs: leave it unset or Never", ErrTemplateConflict, ps.RestartPolicy)
	}
	if ps.AutomountServiceAccountToken == nil {
		ps.AutomountServiceAccountToken = new(false)
	}
	if ps.EnableServiceLinks == nil {
		ps.EnableServiceLinks = new(false)
	}
	if ps.SecurityContext == nil {
		ps.SecurityContext = &corev1.PodSecurityContext{}
	}
	if ps.SecurityContext.SeccompProfile == nil {
		ps.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if ps.ActiveDeadlineSeconds == nil || *ps.ActiveDeadlineSeconds > activeDeadline {
		ps.ActiveDeadlineSeconds = new(activeDeadline)
	}
	if ps.TerminationGracePeriodSeconds == nil {
		ps.TerminationGracePeriodSeconds = new(int64(terminationGrace))
	}
	return nil
}

// setPodNetwork puts the pod on the network the spec asks for (none, the
// default, is the pod's own) and reports whether that is the private
// network, whose pod carries LabelNetwork for an operator's NetworkPolicy.
// It refuses an unknown network, and private with a template on the host's.
func setPodNetwork(pod *corev1.Pod, network string) (private bool, err error) {
	ps := &pod.Spec
	switch network {
	case "", "none":
	case "host":
		ps.HostNetwork = true
	case NetworkPrivate:
		if ps.HostNetwork {
			return false, fmt.Errorf("%w: --network private with a template that sets hostNetwork", ErrTemplateConflict)
		}
		private = true
		pod.Labels[LabelNetwork] = NetworkPrivate
	default:
		return false, fmt.Errorf("%w: --network %q: the kubernetes provider takes none (the pod's network), host or private", runbox.ErrInvalidSpec, network)
	}
	return private, nil
}

// addInstallVolume adds the emptyDir runboxd is installed into, refusing a
// template that already has a volume of its name or an init container of
// runbox-install's.
func addInstallVolume(ps *corev1.PodSpec) error {
	for _, v := range ps.Volumes {
		if v.Name == volumeName {
			return fmt.Errorf("%w: the template has a volume named %q", ErrTemplateConflict, volumeName)
		}
	}
	for _, c := range ps.InitContainers {
		if c.Name == initName {
			return fmt.Errorf("%w: the template has an init container named %q", ErrTemplateConflict, initName)
		}
	}
	ps.Volumes = append(ps.Volumes, corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return nil
}

// workloadContainer returns the container runboxd runs in: the template's
// container named "sandbox", else its first, else a new one it adds.
func workloadContainer(ps *corev1.PodSpec) *corev1.Container {
	idx := -1
	for i, c := range ps.Containers {
		if c.Name == containerName {
			idx = i
		}
	}
	if idx < 0 && len(ps.Containers) > 0 {
		idx = 0
	}
	if idx < 0 {
		ps.Containers = append(ps.Containers, corev1.Container{Name: containerName})
		idx = 0
	}
	return &ps.Containers[idx]
}

// setWorkload makes w runboxd's container: the spec's image (else the
// template's), runboxd from the install volume as its entrypoint (with the
// egress proxy on the private network), no stdin or terminal, runbox's
// hardened security context where the template sets none, and the spec's
// limits. It refuses a container that sets its own command or args, or
// mounts something at runbox's directory, and a pod without an image.
func setWorkload(w *corev1.Container, spec runbox.SandboxSpec, pp podParams, private bool) error {
	if len(w.Command) > 0 || len(w.Args) > 0 {
		return fmt.Errorf("%w: container %q sets command or args; runboxd is its entrypoint (put the image's setup in an init container)", ErrTemplateConflict, w.Name)
	}
	if spec.Image != "" {
		w.Image = spec.Image
	}
	if w.Image == "" {
		return ErrImageRequired
	}
	if w.ImagePullPolicy == "" {
		w.ImagePullPolicy = corev1.PullIfNotPresent
	}
	for _, m := range w.VolumeMounts {
		if m.MountPath == podDir {
			return fmt.Errorf("%w: container %q mounts something at %s", ErrTemplateConflict, w.Name, podDir)
		}
	}
	// Read-only: commands can neither delete nor replace runboxd.
	w.VolumeMounts = append(w.VolumeMounts, corev1.VolumeMount{Name: volumeName, MountPath: podDir, ReadOnly: true})
	w.Command = []string{podRunboxd}
	w.Args = append([]string{"serve", "--socket", socketName(pp.id), "--auth-sha256", pp.authSum}, spec.DaemonArgs...)
	if private {
		// runboxd offers the egress proxy on the pod's loopback; its
		// environment is its commands', so they find it.
		w.Args = append(w.Args, "--egress")
		setEgressEnv(w)
	}
	w.Stdin, w.TTY = false, false
	if w.SecurityContext == nil {
		w.SecurityContext = &corev1.SecurityContext{}
	}
	if w.SecurityContext.Capabilities == nil {
		w.SecurityContext.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	if w.SecurityContext.AllowPrivilegeEscalation == nil {
		w.SecurityContext.AllowPrivilegeEscalation = new(false)
	}
	return setResources(w, spec)
}

// setEgressEnv gives w's environment egress.Env, the variables that lead
// its commands to runboxd's egress proxy, in place of any of the same
// names the template sets (a template's own proxy, say).
func setEgressEnv(w *corev1.Container) {
	set := map[string]string{}
	for _, kv := range egress.Env {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	w.Env = slices.DeleteFunc(w.Env, func(e corev1.EnvVar) bool { _, ok := set[e.Name]; return ok })
	for _, kv := range egress.Env {
		k, v, _ := strings.Cut(kv, "=")
		w.Env = append(w.Env, corev1.EnvVar{Name: k, Value: v})
	}
}

// installContainer is the init container that installs runboxd from
// runboxdImage into the install volume: hardened, small, and run as the
// workload's user and group (sc, the workload's security context), so the
// workload can run what it installs.
func installContainer(runboxdImage string, sc *corev1.SecurityContext) corev1.Container {
	return corev1.Container{
		Name:            initName,
		Image:           runboxdImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/runboxd", "install", podRunboxd},
		VolumeMounts:    []corev1.VolumeMount{{Name: volumeName, MountPath: podDir}},
		SecurityContext: &corev1.SecurityContext{
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			AllowPrivilegeEscalation: new(false),
			ReadOnlyRootFilesystem:   new(true),
			RunAsUser:                sc.RunAsUser,
			RunAsGroup:               sc.RunAsGroup,
		},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m"),
		}},
	}
}

// setResources maps the spec's limits to the workload's resources: Memory
// to limits.memory, CPUs to limits.cpu, Disk to limits.ephemeral-storage
// (the kubelet evicts a pod whose writable layer, logs and emptyDirs
// outgrow it: a pod's bound ends the sandbox, unlike a local sandbox's
// ENOSPC). Kubernetes has no per-pod process
// limit (the node's podPidsLimit applies), so Pids is refused.
func setResources(w *corev1.Container, spec runbox.SandboxSpec) error {
	if spec.Pids > 0 {
		return fmt.Errorf("%w: --pids: a pod cannot be given its own process limit (the node's kubelet podPidsLimit applies to every pod)", runbox.ErrInvalidSpec)
	}
	if spec.Memory < 0 || spec.CPUs < 0 || spec.Disk < 0 {
		return fmt.Errorf("%w: negative limits", runbox.ErrInvalidSpec)
	}
	if spec.Memory == 0 && spec.CPUs == 0 && spec.Disk == 0 {
		return nil
	}
	if w.Resources.Limits == nil {
		w.Resources.Limits = corev1.ResourceList{}
	}
	if spec.Memory > 0 {
		w.Resources.Limits[corev1.ResourceMemory] = *resource.NewQuantity(spec.Memory, resource.BinarySI)
	}
	if spec.Disk > 0 {
		w.Resources.Limits[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(spec.Disk, resource.BinarySI)
	}
	if spec.CPUs > 0 {
		w.Resources.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(int64(spec.CPUs*1000), 1), resource.DecimalSI)
	}
	// Requests default to the limits (Guaranteed QoS when both are set);
	// a template's explicit requests stay, unless above the new limits.
	for name, lim := range w.Resources.Limits {
		if req, ok := w.Resources.Requests[name]; ok && req.Cmp(lim) > 0 {
			w.Resources.Requests[name] = lim
		}
	}
	return nil
}

// socketName is runboxd's socket in the pod: an abstract unix socket (in
// the pod's network namespace), so no command can delete or replace it, and
// no file in the pod holds it. The name is the sandbox's, so sandboxes
// sharing a network namespace (hostNetwork) do not collide.
func socketName(id string) string { return "@runboxd-" + id }
