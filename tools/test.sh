#!/usr/bin/env bash
# Installs what is missing, builds everything (tests included) and runs the whole test suite:
# unit and contract tests, golden end-to-end runs, the bad-input corpus and the validation suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
