package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/runbox/runbox"
)

// TestSetResourcesDisk: a disk bound becomes the workload's
// ephemeral-storage limit, and a template's larger request is lowered to
// it; no bound sets none.
func TestSetResourcesDisk(t *testing.T) {
	var w corev1.Container
	if err := setResources(&w, runbox.SandboxSpec{}); err != nil || w.Resources.Limits != nil {
		t.Fatalf("no limits: %v, %v", w.Resources.Limits, err)
	}
	w.Resources.Requests = corev1.ResourceList{}
	w.Resources.Requests[corev1.ResourceEphemeralStorage] = *resourceQuantity(8 << 30)
	if err := setResources(&w, runbox.SandboxSpec{Disk: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	lim := w.Resources.Limits[corev1.ResourceEphemeralStorage]
	req := w.Resources.Requests[corev1.ResourceEphemeralStorage]
	if lim.Value() != 1<<30 || req.Value() != 1<<30 {
		t.Errorf("ephemeral-storage limit %s, request %s, want 1Gi each", lim.String(), req.String())
	}
	if err := setResources(&w, runbox.SandboxSpec{Disk: -1}); err == nil {
		t.Error("a negative disk bound was accepted")
	}
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
