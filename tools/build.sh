#!/usr/bin/env bash
# Configures and builds clustersim (Release) into ${BUILD_DIR:-build}; the CLI lands in
# <build>/bin/clustersim.
#   tools/build.sh         everything: the CLI, the Python package, tests and benchmarks
#   tools/build.sh --cli   only the CLI (tools/run-default.sh: the shortest road to a first result).
#                          A build folder configured by it is switched to everything by the next
#                          plain tools/build.sh; one already configured for everything is left so.
set -euo pipefail
case "${1:-}" in
  "") scope=all ;;
  --cli) scope=cli ;;
  *) echo "build.sh: unknown option '$1' (accepted: --cli, or nothing to build everything)" >&2
     exit 2 ;;
esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
# A compiler cache, where one is installed, makes rebuilds in several work trees cheap.
command -v ccache >/dev/null 2>&1 && generator+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ "$scope" = cli ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # Tests and benchmarks need doctest and Google Benchmark, which --cli does not install.
    # A unity build (each library compiled as one file) parses the heavy third-party headers
    # (CLI11, nlohmann/json, yaml-cpp, Boost.Graph, spdlog) once per library instead of once per
    # file: about half the CPU of a first build (docs/performance.md, "First result"). The full
    # build keeps one object per file, which ccache reuses across work trees after small edits.
    cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCLUSTERSIM_WERROR=ON -DCLUSTERSIM_BUILD_TESTS=OFF -DCLUSTERSIM_BUILD_BENCHMARKS=OFF \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0
  fi
  cmake --build "$build" --parallel "$(nproc)" --target clustersim
  exit 0
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCLUSTERSIM_WERROR=ON
elif grep -q '^CLUSTERSIM_BUILD_TESTS:BOOL=OFF' "$build/CMakeCache.txt"; then
  # Configured by `tools/build.sh --cli`: turn the tests and benchmarks on.
  cmake -S "$root" -B "$build" -DCLUSTERSIM_BUILD_TESTS=ON -DCLUSTERSIM_BUILD_BENCHMARKS=ON \
    -DCMAKE_UNITY_BUILD=OFF
fi
cmake --build "$build" --parallel "$(nproc)"
