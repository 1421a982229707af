#!/usr/bin/env bash
# Installs what is missing, builds, and simulates the bundled default experiment, printing the
# summary and writing a Perfetto trace to out/default-trace.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/install-deps.sh"
"$root/tools/build.sh"
mkdir -p "$root/out"
"${BUILD_DIR:-$root/build}/bin/clustersim" run --trace "$root/out/default-trace.json" \
  --json "$root/out/default-summary.json"
