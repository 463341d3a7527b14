#!/usr/bin/env bash
# Builds the release binaries: static runbox, runbox-full, runbox-server and runboxd
# (CGO_ENABLED=0) for linux/amd64 and linux/arm64, each set (with the man
# pages in man1/) in a directory and a .tar.gz of it under dist/, with their SHA-256 sums in
# dist/SHA256SUMS (check with: cd dist && sha256sum -c SHA256SUMS).
#
#   scripts/release.sh [VERSION]
#
# VERSION (default: git describe, else "dev") is what runbox version
# prints. Keep runbox, runbox-full and runbox-server in one directory on
# PATH: runbox hands what it does not run itself to runbox-full beside it,
# and serve, mcp, token, audit and man to runbox-server. .ci/run runs this
# and the amd64 binaries' quick start.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
dist=dist
rm -rf "$dist"
mkdir -p "$dist"
ldflags="-s -w -X github.com/runbox/runbox/internal/buildinfo.Stamp=$version"
# The man pages (runbox man, from the command tree), dated by the last
# commit: the same for every architecture, so made once by this machine's
# runbox-server (whose command tree holds every command) and copied into
# each set's man1/.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	RUNBOX_HOME="$dist/.home" go run -ldflags "$ldflags" ./cmd/runbox-server man "$dist/.man1"
for arch in amd64 arm64; do
	name="runbox-$version-linux-$arch"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
		-ldflags "$ldflags" \
		-o "$dist/$name/" ./cmd/runbox ./cmd/runbox-full ./cmd/runbox-server ./cmd/runboxd
	cp -R "$dist/.man1" "$dist/$name/man1"
	# A fixed order, owner and time: the same tree gives the same archive.
	tar -C "$dist" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
		-cf - "$name" | gzip -n >"$dist/$name.tar.gz"
done
rm -rf "$dist/.man1" "$dist/.home"
(cd "$dist" && sha256sum -- *.tar.gz */runbox */runbox-full */runbox-server */runboxd >SHA256SUMS)
echo "$dist/:"
cat "$dist/SHA256SUMS"
