#!/usr/bin/env bash
# Builds clustersim with AddressSanitizer + UndefinedBehaviorSanitizer into ${SAN_BUILD_DIR:-build-san}
# and runs the whole ctest suite under it (unit tests, the bad-input corpus, golden runs,
# validation). Any sanitizer report fails the run: UBSan does not recover, ASan aborts, LeakSanitizer
# exits non-zero. Leaks inside Open MPI and its helpers are suppressed by library (tools/lsan.supp);
# leaks in our own code are never suppressed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SAN_BUILD_DIR:-$root/build-san}"
jobs="${SAN_JOBS:-$(nproc)}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
command -v ccache >/dev/null 2>&1 && generator+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCLUSTERSIM_BUILD_BENCHMARKS=OFF -DCLUSTERSIM_TEST_TIMEOUT_SCALE=4
fi
start=$(date +%s)
cmake --build "$build" --parallel "$jobs"
built=$(date +%s)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Full stacks for allocations (so that a leak is matched to the library that made it), and Open
# MPI's plugins kept loaded until exit (an unloaded mca_*.so shows as "<unknown module>").
export LSAN_OPTIONS="suppressions=$root/tools/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1
cd "$build"
status=0
ctest --output-on-failure --timeout 3600 -j "$jobs" || status=$?
done_at=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((done_at - built)) s"
exit "$status"
