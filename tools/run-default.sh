#!/usr/bin/env bash
# Installs what the command-line tool needs (tools/install-deps.sh --cli), builds only its target
# (tools/build.sh --cli), and simulates the bundled default experiment, printing the
# summary and writing a Perfetto trace of one data-parallel replica (the 64 GPUs of all eight
# pipeline stages of replica 0) to out/default-trace.pftrace, about 41 MB; open it in
# ui.perfetto.dev.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/install-deps.sh" --cli
"$root/tools/build.sh" --cli
mkdir -p "$root/out"
"${BUILD_DIR:-$root/build}/bin/clustersim" run --trace "$root/out/default-trace.pftrace" \
  --trace-ranks 0-7,32-39,64-71,96-103,128-135,160-167,192-199,224-231 \
  --json "$root/out/default-summary.json"
