#!/usr/bin/env bash
# Builds clustersim with AddressSanitizer + UndefinedBehaviorSanitizer into ${SAN_BUILD_DIR:-build-san}
# and runs the whole ctest suite under it (unit tests, the bad-input corpus, golden runs,
# validation). Any sanitizer report fails the run: UBSan does not recover, ASan aborts, LeakSanitizer
# exits non-zero. Leaks inside Open MPI and its helpers are suppressed by library (tools/lsan.supp);
# leaks in our own code are never suppressed.
#
# What it costs (docs/performance-history.md, "CI time"; not measured again here): a second full
# build (every library, test and the validation scores step, instrumented, at -O1 -g1; no
# benchmarks) and the whole suite under the sanitizers. From an empty build-san/ with SAN_JOBS=2 the
# last recorded run took 2,151 s of CPU: build 1,312 s and tests 342 s wall on a loaded two-core
# machine, about 1,100 s (18 minutes) estimated on two idle cores. A second run reuses build-san/
# (and ccache, where installed) and rebuilds only what changed. It needs what tools/test.sh
# installs (tools/install-deps.sh: the compiler, CMake, Boost, doctest, Open MPI for the MPI sweep
# test, Chromium for the HTML report test) and about 1.3 GB of disk for build-san/. It prints
# "sanitize: build N s, tests M s" at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SAN_BUILD_DIR:-$root/build-san}"
jobs="${SAN_JOBS:-$(nproc)}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
command -v ccache >/dev/null 2>&1 && generator+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# GCC's -fsanitize=undefined leaves out float-cast-overflow (a double too large for the integer it
# is converted to); it is asked for by name.
sanitizers="address,undefined,float-cast-overflow"
flags="-fsanitize=$sanitizers -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer"
# -O1 and line tables only (-g1): half the compile time of -O2 -g (measured in
# docs/performance-history.md, "CI time"), and sanitizer reports still name the function, file
# and line.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitizers" \
    -DCLUSTERSIM_BUILD_BENCHMARKS=OFF -DCLUSTERSIM_TEST_TIMEOUT_SCALE=4
fi
# The options hold for the build too: its last step runs the validation suite with the
# instrumented binary (validation-scores.json, sim/cli/CMakeLists.txt).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Allocation stacks use the fast frame-pointer unwinder: the full one (fast_unwind_on_malloc=0)
# made allocation-heavy tests 7.5 times slower. Only Open MPI, unwound without frame pointers,
# needs it to match its leaks to the library suppressions: tests/CMakeLists.txt asks for it in
# sweep_mpi alone. Open MPI's plugins stay loaded until exit (an unloaded mca_*.so shows as
# "<unknown module>").
export LSAN_OPTIONS="suppressions=$root/tools/lsan.supp:print_suppressions=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1
start=$(date +%s)
cmake --build "$build" --parallel "$jobs"
built=$(date +%s)
cd "$build"
status=0
ctest --output-on-failure --timeout 3600 -j "$jobs" || status=$?
done_at=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((done_at - built)) s"
exit "$status"
