package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
)

// kubernetesRunboxdImageEnv is the provider's variable naming the runboxd
// image its pods start from (provider/kubernetes.RunboxdImageEnv; the
// bench does not link the provider).
const kubernetesRunboxdImageEnv = "RUNBOX_KUBE_RUNBOXD_IMAGE"

// kubernetesSandbox makes the kubernetes sandbox of the latency section
// when a cluster is configured (KUBECONFIG), and returns its id with the
// argv of the `kubectl exec` baseline into the same pod; "" when there is
// no cluster or it cannot be used (said once in the log).
//
// The pod's runboxd comes from an image of the runboxd just built,
// imported into the node of the project's harness (scripts/k8s/cluster.sh
// import, as root), unless $RUNBOX_KUBE_RUNBOXD_IMAGE names one the
// cluster has. The workload image is runbox-test:busybox, which the
// harness imports with `cluster.sh import-docker`.
func (s *sandboxes) kubernetesSandbox() (id string, kubectl []string) {
	if os.Getenv("KUBECONFIG") == "" {
		log.Printf("no KUBECONFIG, the kubernetes rows are left out (scripts/k8s/cluster.sh start; eval \"$(scripts/k8s/cluster.sh env)\")")
		return "", nil
	}
	kubectlBin, err := exec.LookPath("kubectl")
	if err != nil {
		kubectlBin = filepath.Join(envOr("RUNBOX_K8S_DIR", "/var/tmp/runbox-k8s"), "bin", "kubectl")
		if _, err := os.Stat(kubectlBin); err != nil {
			log.Printf("no kubectl in PATH or $RUNBOX_K8S_DIR/bin, the kubernetes rows are left out")
			return "", nil
		}
	}
	if os.Getenv(kubernetesRunboxdImageEnv) == "" {
		ref, err := s.importRunboxdImage()
		if err != nil {
			log.Printf("no runboxd image in the cluster, the kubernetes rows are left out: %v", err)
			return "", nil
		}
		os.Setenv(kubernetesRunboxdImageEnv, ref)
	}
	id = s.getWith("kubernetes", "--image", "runbox-test:busybox")
	if id == "" {
		return "", nil
	}
	out, err := s.runbox("inspect", id)
	if err != nil {
		log.Printf("inspect the kubernetes sandbox, its rows are left out: %v", err)
		return "", nil
	}
	var got struct {
		Detail map[string]string `json:"detail"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Detail["pod"] == "" {
		log.Printf("the kubernetes sandbox's inspect names no pod (%v), its rows are left out", err)
		return "", nil
	}
	return id, []string{kubectlBin, "exec", "-n", got.Detail["namespace"], got.Detail["pod"], "-c", "sandbox", "--", "true"}
}

// importRunboxdImage builds an image of the bench's runboxd and imports it
// into the harness's node, returning its reference.
func (s *sandboxes) importRunboxdImage() (string, error) {
	bin := filepath.Join(s.cfg.bin, "runboxd")
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	ref := "runbox.local/runboxd:bench-" + hex.EncodeToString(sum[:6])
	tar := filepath.Join(s.cfg.bin, "runboxd-image.tar")
	defer os.Remove(tar)
	mk := exec.Command("scripts/runboxd-image.sh", tar, ref)
	mk.Env = append(os.Environ(), "RUNBOXD="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		return "", fmt.Errorf("scripts/runboxd-image.sh: %w: %s", err, out)
	}
	if out, err := exec.Command("scripts/k8s/cluster.sh", "import", tar).CombinedOutput(); err != nil {
		return "", fmt.Errorf("scripts/k8s/cluster.sh import (as root; or set %s to an image the cluster has): %w: %s",
			kubernetesRunboxdImageEnv, err, out)
	}
	return ref, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
