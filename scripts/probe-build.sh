#!/usr/bin/env bash
# Builds pocket-worker with the in-graph timeline probes (kernels/cuda/probe.cuh) into
# ${1:-.gpud/probe}/pocket-worker: the decode step's modules (kernels, decode, quant, fp8mma, hybrid)
# get their PTX regenerated with -DPOCKET_PROBE in a copy of the working tree; everything
# else is as the tree has it, and the tree itself is not touched. Then, on the GPU machine:
#
#   .gpud/probe/pocket-worker bench --model M ... --probe-out /tmp/p
#   python3 scripts/probe-summary.py /tmp/p
#
# DEFINES adds preprocessor flags (diagnostic builds, e.g. -DQMV_LOADONLY in quant_mmv.cuh);
# PROBE=0 leaves the probes out (a plain build of the variant, for gpu-suite.sh abbin).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=$(cd "$root" && mkdir -p "${1:-.gpud/probe}" && cd "${1:-.gpud/probe}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf -) | tar -xf - -C "$tmp"
cd "$tmp/kernels/cuda"
flags="${DEFINES:-}"
[ "${PROBE:-1}" = 0 ] || flags="-DPOCKET_PROBE $flags"
pids=()
for m in kernels decode quant fp8mma hybrid; do
  # shellcheck disable=SC2086
  nvcc -ptx -arch=compute_90 -allow-unsupported-compiler -O3 $flags -o "$m.ptx" "$m.cu" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
for m in kernels decode quant fp8mma hybrid; do gzip -n9f "$m.ptx"; done # embedded gzipped (backend.go: loadPTX)
cd "$tmp"
CGO_ENABLED=1 go build -trimpath -ldflags='-s -w' -tags cuda -o "$out/pocket-worker" ./cmd/pocket-worker
echo "build (${flags:-plain}): $out/pocket-worker"
