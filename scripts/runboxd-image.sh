#!/usr/bin/env bash
# runboxd-image.sh builds the runboxd image the kubernetes provider's init
# container runs: one layer holding the static runboxd binary at /runboxd
# (entrypoint /runboxd), written as a docker-archive tarball without any
# registry or container engine. Load it into a node's containerd with
#   ctr -n k8s.io images import runboxd-image.tar
# (or `docker load -i`, then push it to a registry your cluster pulls from).
#
# Usage: scripts/runboxd-image.sh [OUT.tar] [REF]
#   OUT.tar  default bin/runboxd-image.tar
#   REF      default runbox.local/runboxd:latest (the provider's default;
#            another reference goes to $RUNBOX_KUBE_RUNBOXD_IMAGE)
# RUNBOXD=path uses that binary instead of building cmd/runboxd.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bin/runboxd-image.tar}
ref=${2:-runbox.local/runboxd:latest}
arch=$(go env GOARCH 2>/dev/null || echo amd64)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$(dirname "$out")"
chmod 0755 "$work/rootfs"
if [ -n "${RUNBOXD:-}" ]; then
	install -m 0755 "$RUNBOXD" "$work/rootfs/runboxd"
else
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$work/rootfs/runboxd" ./cmd/runboxd)
fi
if ldd "$work/rootfs/runboxd" >/dev/null 2>&1; then
	echo "runboxd-image: runboxd is dynamically linked; build it with CGO_ENABLED=0" >&2
	exit 1
fi
MKIMAGE_ARCH=$arch "$root/scripts/k8s/mkimage.sh" "$ref" "$work/rootfs" '["/runboxd"]' '["version"]' "$out"
