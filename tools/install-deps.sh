#!/usr/bin/env bash
# Installs the Debian packages clustersim needs. Idempotent: packages already present are left
# alone, and apt is only consulted when something is missing.
#   tools/install-deps.sh         everything: the build, tests, benchmarks, Python package, tools
#   tools/install-deps.sh --cli   only what building the command-line tool needs (tools/run-default.sh)
set -euo pipefail

cli_packages=(
  build-essential cmake ninja-build pkg-config
  libboost-graph-dev libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev libcli11-dev zlib1g-dev
)
case "${1:-}" in
  "") scope=all ;;
  --cli) scope=cli ;;
  *) echo "install-deps: unknown option '$1' (accepted: --cli, or nothing for every package)" >&2
     exit 2 ;;
esac

packages=("${cli_packages[@]}")
[ "$scope" = all ] && packages+=(
  doctest-dev libbenchmark-dev
  protobuf-compiler  # tests decode .pftrace traces with protoc --decode
  python3            # tools/ scripts (standard library only)
  python3-dev pybind11-dev  # the Python package (clustersim/, docs/python.md)
  python3-venv       # pip install . into a fresh virtual environment (tests/python/pip_install.py)
  chromium           # the HTML report's browser test (headless, offline)
  libopenmpi-dev openmpi-bin  # `mpirun -n N clustersim sweep` shards a sweep over N processes
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
