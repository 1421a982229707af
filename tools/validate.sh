#!/bin/sh
# Runs the validation suite and regenerates docs/validation.md.
#   tools/validate.sh [BUILD_DIR] [--check]
# BUILD_DIR defaults to build (the binary is BUILD_DIR/bin/clustersim or BUILD_DIR/sim/cli/clustersim).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
shift $(( $# > 0 ? 1 : 0 ))
for bin in "$build/bin/clustersim" "$build/sim/cli/clustersim"; do
    if [ -x "$bin" ]; then
        exec "$bin" validate "$root/tests/validation" --write-doc "$root/docs/validation.md" "$@"
    fi
done
echo "validate.sh: no clustersim binary under $build (build it with: cmake --build $build --target clustersim)" >&2
exit 2
