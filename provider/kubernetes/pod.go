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
			return nil, fmt.Errorf("%w: name %q cannot be a kubernetes label value: %v", runbox.ErrInvalidSpec, spec.Name, errs)
		}
		pod.Labels[LabelName] = spec.Name
	}
	rec, _ := json.Marshal(podSpecRecord{Image: spec.Image, Memory: spec.Memory, CPUs: spec.CPUs, Network: spec.Network})
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationSpec] = string(rec)
	pod.Annotations[AnnotationSecret] = pp.secretName

	ps := &pod.Spec
	switch ps.RestartPolicy {
	case "", corev1.RestartPolicyNever:
		ps.RestartPolicy = corev1.RestartPolicyNever
	default:
		return nil, fmt.Errorf("%w: restartPolicy %s would restart runboxd and lose its execs: leave it unset or Never", ErrTemplateConflict, ps.RestartPolicy)
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
	if ps.ActiveDeadlineSeconds == nil || *ps.ActiveDeadlineSeconds > pp.activeDeadline {
		ps.ActiveDeadlineSeconds = new(pp.activeDeadline)
	}
	if ps.TerminationGracePeriodSeconds == nil {
		ps.TerminationGracePeriodSeconds = new(int64(terminationGrace))
	}
	if spec.Workdir != "" || spec.Rootfs != "" || spec.HostRoot {
		return nil, fmt.Errorf("%w: a pod cannot mount a directory of this machine (--workdir, --rootfs, --host-root); copy files in with runbox cp or runbox sync", runbox.ErrInvalidSpec)
	}
	private := false
	switch spec.Network {
	case "", "none":
	case "host":
		ps.HostNetwork = true
	case NetworkPrivate:
		if ps.HostNetwork {
			return nil, fmt.Errorf("%w: --network private with a template that sets hostNetwork", ErrTemplateConflict)
		}
		private = true
		pod.Labels[LabelNetwork] = NetworkPrivate
	default:
		return nil, fmt.Errorf("%w: --network %q: the kubernetes provider takes none (the pod's network), host or private", runbox.ErrInvalidSpec, spec.Network)
	}
	for _, v := range ps.Volumes {
		if v.Name == volumeName {
			return nil, fmt.Errorf("%w: the template has a volume named %q", ErrTemplateConflict, volumeName)
		}
	}
	for _, c := range ps.InitContainers {
		if c.Name == initName {
			return nil, fmt.Errorf("%w: the template has an init container named %q", ErrTemplateConflict, initName)
		}
	}
	ps.Volumes = append(ps.Volumes, corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})

	// The workload: the template's container named "sandbox", else its
	// first, else a new one.
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
	w := &ps.Containers[idx]
	if len(w.Command) > 0 || len(w.Args) > 0 {
		return nil, fmt.Errorf("%w: container %q sets command or args; runboxd is its entrypoint (put the image's setup in an init container)", ErrTemplateConflict, w.Name)
	}
	if spec.Image != "" {
		w.Image = spec.Image
	}
	if w.Image == "" {
		return nil, ErrImageRequired
	}
	if w.ImagePullPolicy == "" {
		w.ImagePullPolicy = corev1.PullIfNotPresent
	}
	for _, m := range w.VolumeMounts {
		if m.MountPath == podDir {
			return nil, fmt.Errorf("%w: container %q mounts something at %s", ErrTemplateConflict, w.Name, podDir)
		}
	}
	// Read-only: commands can neither delete nor replace runboxd.
	w.VolumeMounts = append(w.VolumeMounts, corev1.VolumeMount{Name: volumeName, MountPath: podDir, ReadOnly: true})
	w.Command = []string{podRunboxd}
	w.Args = append([]string{"serve", "--socket", socketName(pp.id), "--auth-sha256", pp.authSum}, spec.DaemonArgs...)
	if private {
		// runboxd offers the egress proxy on the pod's loopback; its
		// environment is its commands', so they find it (egress.Env, in
		// place of a template's own proxy variables).
		w.Args = append(w.Args, "--egress")
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
	if err := setResources(w, spec); err != nil {
		return nil, err
	}

	install := corev1.Container{
		Name:            initName,
		Image:           pp.runboxdImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/runboxd", "install", podRunboxd},
		VolumeMounts:    []corev1.VolumeMount{{Name: volumeName, MountPath: podDir}},
		SecurityContext: &corev1.SecurityContext{
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			AllowPrivilegeEscalation: new(false),
			ReadOnlyRootFilesystem:   new(true),
			RunAsUser:                w.SecurityContext.RunAsUser,
			RunAsGroup:               w.SecurityContext.RunAsGroup,
		},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m"),
		}},
	}
	ps.InitContainers = append([]corev1.Container{install}, ps.InitContainers...)
	return pod, nil
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
