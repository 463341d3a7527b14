#!/usr/bin/env bash
# Builds the binaries of runbox's test cluster from the Go module proxy:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
# (Kubernetes v1.37.2 through the wrapper module kubemod/: `go install
# k8s.io/kubernetes/cmd/...@v` refuses a module with replace directives),
# etcd (etcdmod/) and a static pause binary (pause/).
#
# Usage: scripts/k8s/build.sh [OUTDIR]   (default: $RUNBOX_K8S_DIR/bin)
# A cold build takes ~10 minutes of two cores and ~3 GB of RAM; with Go's build
# cache warm it is a ~20 s relink. Binaries already present are kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
out=${1:-$RUNBOX_K8S_DIR/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod
v=v1.37.2
ldf="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
start=$(date +%s)
need=()
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
	[ -x "$out/$c" ] || need+=("k8s.io/kubernetes/cmd/$c")
done
if [ ${#need[@]} -gt 0 ]; then
	(cd "$here/kubemod" && nice -n 10 go build -trimpath -ldflags "$ldf" -o "$out/" "${need[@]}")
fi
[ -x "$out/etcd" ] || (cd "$here/etcdmod" && nice -n 10 go build -trimpath -ldflags '-s -w' -o "$out/etcd" go.etcd.io/etcd/server/v3)
[ -x "$out/pause" ] || (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/pause" .)
echo "k8s harness: binaries in $out ($(( $(date +%s) - start ))s)"
