#!/usr/bin/env bash
# Bootstrap the offline base image from Debian's packages, for hosts with no registry
# (air-gapped boxes, CI here). Needs root and an apt mirror; nothing is pulled.
# Usage: docker/base.sh [IMAGE_TAG]
set -euo pipefail
tag=${1:-harness-base:bookworm}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base: $tag already present"; exit 0
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "base: mmdebstrap missing; install it with: apt-get install -y mmdebstrap" >&2; exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "base: bootstrapping Debian bookworm (python3.11, iproute2, procps) into $tag"
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,python3-pip,ca-certificates,iproute2,procps \
  bookworm "$tmp/base.tar"
docker import --change 'CMD ["/bin/bash"]' "$tmp/base.tar" "$tag" >/dev/null
echo "base: built $tag"
