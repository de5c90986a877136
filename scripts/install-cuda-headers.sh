#!/usr/bin/env bash
# Installs CUDA 11.8 headers, the libcuda stub and nvcc from Debian 12's
# non-free component: enough to build and vet the `cuda`-tagged code
# (gorgonia.org/cu) on a machine without a GPU. Idempotent; needs root.
set -euo pipefail
if [ -f /usr/include/cuda.h ] && command -v nvcc >/dev/null; then exit 0; fi
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ] && ! grep -q 'non-free' "$src"; then
  sed -i 's/^Components: main$/Components: main contrib non-free/' "$src"
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nvidia-cuda-dev nvidia-cuda-toolkit >/dev/null
test -f /usr/include/cuda.h
