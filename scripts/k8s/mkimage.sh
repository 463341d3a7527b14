#!/usr/bin/env bash
# mkimage.sh NAME:TAG ROOTFS_DIR ENTRYPOINT_JSON CMD_JSON OUT.tar
# Writes a one-layer image of ROOTFS_DIR as a docker-archive tarball (what
# `docker load` and `ctr images import` accept), reproducibly: sorted
# entries, owner root, mtime 0, no registry needed.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: $0 NAME:TAG ROOTFS_DIR ENTRYPOINT_JSON CMD_JSON OUT.tar" >&2; exit 2; }
ref=$1 rootfs=$2 ep=$3 cmd=$4 out=$5
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$rootfs" -cf "$w/layer.tar" .
diffid=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
mkdir -p "$w/out/$diffid"
mv "$w/layer.tar" "$w/out/$diffid/layer.tar"
printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":%s,"Cmd":%s,"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"runbox mkimage.sh"}]}' \
	"${MKIMAGE_ARCH:-amd64}" "$ep" "$cmd" "$diffid" >"$w/cfg.json"
cfgsha=$(sha256sum "$w/cfg.json" | cut -d' ' -f1)
mv "$w/cfg.json" "$w/out/$cfgsha.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfgsha" "$ref" "$diffid" >"$w/out/manifest.json"
tar --sort=name --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$w/out" -cf "$out" .
echo "$out: $ref (config sha256:$cfgsha)"
