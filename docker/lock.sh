#!/usr/bin/env bash
# Make the locks every environment installs from (`make lock`):
#   docker/requirements.lock      every package of the host venv (all extras) and of the images
#                                 (the train extra, named in docker/requirements.txt), exact.
#   docker/requirements-gpu.lock  the GPU image's torch: the registry's CUDA build of the same
#                                 version, and the CUDA libraries it pulls, exact.
#   docker/requirements-gpu-cu128.lock  the CUDA 12 image's torch: the same version's +cu128
#                                 build from PyTorch's index (its own metadata pins the rest).
# pip-compile keeps the pins already in a lock; `make lock UPGRADE=1` moves them to the newest
# versions pyproject.toml allows.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=build/lock-venv
if [ ! -x "$tools/bin/pip-compile" ]; then
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q pip-tools==7.6.2
fi
upgrade=()
case "${UPGRADE:-}" in 1|true|yes) upgrade=(--upgrade) ;; esac
compile() {
  "$tools/bin/pip-compile" -q --strip-extras --allow-unsafe --no-emit-index-url \
    --no-emit-find-links --no-emit-trusted-host "${upgrade[@]}" "$@"
}

compile --all-extras -o docker/requirements.lock pyproject.toml
# A CPU wheel of torch may carry a local tag (2.13.0+cpu); the lock names the version, so the
# CPU image takes the CPU build and the GPU image the CUDA build of that one version.
sed -i -E 's/^(torch==[0-9.]+)\+[a-z0-9]+/\1/' docker/requirements.lock

torch=$(grep -E '^torch==' docker/requirements.lock | cut -d= -f3)
in=build/requirements-gpu.in
mkdir -p build
# `===` matches the version string exactly: the registry's CUDA build, never a +cpu one.
printf 'torch===%s\n-c ../docker/requirements.lock\n' "$torch" >"$in"
compile -o docker/requirements-gpu.lock "$in"
# PyTorch's index is not reachable everywhere (pip-compile would need it): torch alone is
# pinned, and its wheel pins its CUDA 12 libraries exactly itself.
cat >docker/requirements-gpu-cu128.lock <<LOCK
# The CUDA 12 GPU image (recipe gpu-cu128: make image DEVICE=gpu CUDA=12.8), made by
# docker/lock.sh: torch $torch built with CUDA 12.8, from https://download.pytorch.org/whl/cu128
# (the build's TORCH_INDEX). Only torch is pinned here: that wheel's own metadata pins each
# of its nvidia-*-cu12 libraries and triton at one exact version (Requires-Dist ==), so this
# line fixes the whole CUDA stack. Every other package comes from docker/requirements.lock.
torch===$torch+cu128
LOCK
echo "lock: docker/requirements.lock ($(grep -cE '^[a-z]' docker/requirements.lock) packages)," \
  "docker/requirements-gpu.lock ($(grep -cE '^[a-z]' docker/requirements-gpu.lock)); torch $torch"
