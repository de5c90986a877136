#!/usr/bin/env bash
# nvcc12.sh ARGS...: runs nvcc 12.4 (PTX ISA 8.4) with ARGS, for the CUDA
# modules whose instructions nvcc 11.8 (PTX ISA 7.8, the project's default,
# Debian bookworm's) cannot emit: FP8 mma.sync (m16n8k32 e4m3 needs ISA
# 8.4), wgmma and the bulk copies (8.0). The toolkit is Debian trixie's
# nvidia-cuda-toolkit package, downloaded once with apt (Debian's mirror is
# the only package source here) and unpacked, not installed, into
# $NVCC12_DIR (default ~/.cache/pocketllm/nvcc12); it uses the system's
# CUDA headers in /usr/include. Only PTX generation needs it: the PTX is
# committed, and the GPU host's driver JIT-compiles it.
set -euo pipefail
dir=${NVCC12_DIR:-$HOME/.cache/pocketllm/nvcc12}
tk=$dir/root/usr/lib/nvidia-cuda-toolkit
if [ ! -x "$tk/bin/nvcc" ]; then
  mkdir -p "$dir/lists" "$dir/cache/archives/partial"
  echo "deb [trusted=yes] http://deb.debian.org/debian trixie non-free" >"$dir/sources.list"
  apt_opts=(-o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o Debug::NoLocking=1 -q)
  apt-get "${apt_opts[@]}" update >&2
  (cd "$dir" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit >&2)
  rm -rf "$dir/root"
  dpkg -x "$dir"/nvidia-cuda-toolkit_12.4*.deb "$dir/root"
  # The package's profile is a link to /etc; point it at the unpacked tree.
  rm -f "$tk/bin/nvcc.profile"
  cat >"$tk/bin/nvcc.profile" <<PROFILE
NVVMIR_LIBRARY_DIR = $tk/libdevice
PATH += $tk/bin:$dir/root/usr/bin:
INCLUDES += "-I/usr/include" \$(_SPACE_)
PROFILE
fi
exec "$tk/bin/nvcc" "$@"
