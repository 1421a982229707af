#!/usr/bin/env bash
# Configures and builds clustersim (Release) into ${BUILD_DIR:-build}; the CLI lands in
# <build>/bin/clustersim.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# A compiler cache, where one is installed, makes rebuilds in several work trees cheap.
command -v ccache >/dev/null 2>&1 && generator+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCLUSTERSIM_WERROR=ON
fi
cmake --build "$build" --parallel "$(nproc)"
