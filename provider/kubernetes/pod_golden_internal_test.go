package kubernetes

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
)

// updateGolden rewrites testdata/buildpod/*/want.json from what buildPod
// builds now: run it only when a change to the pod is meant.
var updateGolden = flag.Bool("update", false, "rewrite testdata/buildpod from buildPod's output")

// builtPod is what a golden file holds: the pod buildPod built, or its
// error's text and the sentinels it matches.
type builtPod struct {
	Pod     *corev1.Pod `json:"pod,omitempty"`
	Error   string      `json:"error,omitempty"`
	Matches []string    `json:"matches,omitempty"`
}

// hardenedTemplate sets every field buildPod defaults or checks, so its
// golden file shows which of a template's values survive.
func hardenedTemplate() *corev1.Pod {
	user, group := int64(1000), int64(1001)
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "tmpl", GenerateName: "tmpl-", Namespace: "ns", ResourceVersion: "7", UID: "u",
			Labels:      map[string]string{"team": "a", LabelSandbox: "stale"},
			Annotations: map[string]string{"note": "kept"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  new(true),
			EnableServiceLinks:            new(true),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: new(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}},
			ActiveDeadlineSeconds:         new(int64(30)),
			TerminationGracePeriodSeconds: new(int64(9)),
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers:                []corev1.Container{{Name: "setup", Image: "setup"}},
			Containers: []corev1.Container{
				{Name: "sidecar", Image: "side"},
				{
					Name: containerName, Image: "tmpl-image", ImagePullPolicy: corev1.PullAlways,
					Stdin: true, TTY: true,
					Env:          []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://evil:1"}, {Name: "KEEP", Value: "1"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					SecurityContext: &corev1.SecurityContext{
						RunAsUser: &user, RunAsGroup: &group,
						Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}},
						AllowPrivilegeEscalation: new(true),
					},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourceCPU: resource.MustParse("100m"),
					}},
				},
			},
		},
	}
}

// TestBuildPodGolden: buildPod builds, for each template and spec, the pod
// (or the error) recorded in testdata/buildpod/<case>/want.json — runbox's
// defaults, the template's kept values, the init container that installs
// runboxd, the workload's mount, entrypoint and limits, and the order in
// which conflicts are reported.
func TestBuildPodGolden(t *testing.T) {
	pp := podParams{id: "0123456789ab", secretName: "runbox-0123456789ab", authSum: "00ff", runboxdImage: "runboxd:t", activeDeadline: 60}
	withContainer := func(c corev1.Container) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	cases := []struct {
		name string
		tmpl *corev1.Pod
		spec runbox.SandboxSpec
	}{
		{"empty", &corev1.Pod{}, runbox.SandboxSpec{Image: "i"}},
		{"full-spec", &corev1.Pod{}, runbox.SandboxSpec{Image: "i", Name: "my-box", Memory: 256 << 20, CPUs: 0.0001, Disk: 1 << 30, Network: "host", DaemonArgs: []string{"--grace", "2s"}}},
		{"hardened-template", hardenedTemplate(), runbox.SandboxSpec{Memory: 1 << 30, CPUs: 2}},
		{"hardened-template-private", hardenedTemplate(), runbox.SandboxSpec{Image: "i", Network: NetworkPrivate}},
		{"first-container", &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: new(int64(600)), Containers: []corev1.Container{{Name: "app", Image: "a"}, {Name: "other", Image: "o"}}}}, runbox.SandboxSpec{Network: "none"}},
		{"bad-name", &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways}}, runbox.SandboxSpec{Image: "i", Name: "not a label!"}},
		{"restart-always", &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways}}, runbox.SandboxSpec{Image: "i", Workdir: "/w"}},
		{"workdir", &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}, runbox.SandboxSpec{Image: "i", Workdir: "/w", Network: NetworkPrivate}},
		{"rootfs", &corev1.Pod{}, runbox.SandboxSpec{Image: "i", Rootfs: "/r"}},
		{"host-root", &corev1.Pod{}, runbox.SandboxSpec{Image: "i", HostRoot: true}},
		{"private-host-network", &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, Volumes: []corev1.Volume{{Name: volumeName}}}}, runbox.SandboxSpec{Image: "i", Network: NetworkPrivate}},
		{"bad-network", &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: volumeName}}}}, runbox.SandboxSpec{Image: "i", Network: "bridge"}},
		{"volume-conflict", &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: volumeName}}, InitContainers: []corev1.Container{{Name: initName}}}}, runbox.SandboxSpec{Image: "i"}},
		{"init-conflict", &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: initName}}, Containers: []corev1.Container{{Name: containerName, Command: []string{"sh"}}}}}, runbox.SandboxSpec{Image: "i"}},
		{"command", withContainer(corev1.Container{Name: containerName, Command: []string{"sh"}}), runbox.SandboxSpec{}},
		{"args", withContainer(corev1.Container{Name: "app", Args: []string{"-x"}}), runbox.SandboxSpec{Image: "i"}},
		{"no-image", withContainer(corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: podDir}}}), runbox.SandboxSpec{}},
		{"mount-conflict", withContainer(corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "x", MountPath: podDir}}}), runbox.SandboxSpec{Image: "i", Pids: 10}},
		{"pids", &corev1.Pod{}, runbox.SandboxSpec{Image: "i", Pids: 10, Memory: -1}},
		{"negative-limits", &corev1.Pod{}, runbox.SandboxSpec{Image: "i", Memory: -1}},
	}
	sentinels := map[string]error{
		"ErrInvalidSpec": runbox.ErrInvalidSpec, "ErrTemplateConflict": ErrTemplateConflict, "ErrImageRequired": ErrImageRequired,
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got builtPod
			pod, err := buildPod(tc.tmpl, tc.spec, pp)
			if err != nil {
				got.Error = err.Error()
				for _, name := range []string{"ErrImageRequired", "ErrInvalidSpec", "ErrTemplateConflict"} {
					if errors.Is(err, sentinels[name]) {
						got.Matches = append(got.Matches, name)
					}
				}
			} else {
				got.Pod = pod
				if pod != tc.tmpl {
					t.Error("buildPod returned a pod other than the template it changes")
				}
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			path := filepath.Join("testdata", "buildpod", tc.name, "want.json")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestBuildPodGolden -update writes it)", err)
			}
			if string(want) != string(b) {
				t.Errorf("buildPod built, for %s:\n%s\nwant (%s):\n%s", tc.name, b, path, want)
			}
		})
	}
}
