package kubernetes

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
)

// TestBuildPodPrivate: a private sandbox's pod runs runboxd with the
// egress proxy, gives it egress.Env in place of a template's own proxy
// variables (each name once), carries LabelNetwork for an operator's
// NetworkPolicy, and stays off the host's network; a template that asks
// for the host's network conflicts.
func TestBuildPodPrivate(t *testing.T) {
	pp := podParams{id: "0123456789ab", secretName: "runbox-0123456789ab", authSum: "00", runboxdImage: "r", activeDeadline: 60}
	tmpl := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName,
		Env: []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://evil:1"}, {Name: "KEEP", Value: "1"}}}}}}
	pod, err := buildPod(tmpl, runbox.SandboxSpec{Image: "i", Network: NetworkPrivate}, pp)
	if err != nil {
		t.Fatal(err)
	}
	w := pod.Spec.Containers[0]
	if !slices.Contains(w.Args, "--egress") || pod.Spec.HostNetwork || pod.Labels[LabelNetwork] != NetworkPrivate {
		t.Errorf("args %v, hostNetwork %v, labels %v", w.Args, pod.Spec.HostNetwork, pod.Labels)
	}
	got := map[string][]string{}
	for _, e := range w.Env {
		got[e.Name] = append(got[e.Name], e.Value)
	}
	if len(got["KEEP"]) != 1 {
		t.Errorf("the template's own variable: %v", got["KEEP"])
	}
	if len(got) != len(egress.Env)+1 {
		t.Errorf("env %v, want egress.Env and KEEP", w.Env)
	}
	for _, kv := range egress.Env {
		found := false
		for _, e := range w.Env {
			found = found || e.Name+"="+e.Value == kv
		}
		if !found {
			t.Errorf("env lacks %s: %v", kv, w.Env)
		}
	}
	none, err := buildPod(&corev1.Pod{}, runbox.SandboxSpec{Image: "i"}, pp)
	if err != nil || slices.Contains(none.Spec.Containers[0].Args, "--egress") || len(none.Spec.Containers[0].Env) != 0 || none.Labels[LabelNetwork] != "" {
		t.Errorf("a pod not private: %v %v %v", err, none.Spec.Containers[0].Args, none.Labels)
	}
	host := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}
	if _, err := buildPod(host, runbox.SandboxSpec{Image: "i", Network: NetworkPrivate}, pp); !errors.Is(err, ErrTemplateConflict) {
		t.Errorf("private with a hostNetwork template: %v, want ErrTemplateConflict", err)
	}
}
