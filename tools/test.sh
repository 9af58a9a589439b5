#!/usr/bin/env bash
# Builds hoist and runs every test: unit, mpirun integration, and a bounded fuzz run of the
# safetensors header parser. Usage: tools/test.sh [build-dir]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
"$root/tools/deps.sh"
source "$root/tools/env.sh"
jobs="$(nproc)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
if [[ "${HOIST_FUZZ:-1}" == 1 && -x "$root/tests/fuzz/run_fuzz.sh" ]]; then
  "$root/tests/fuzz/run_fuzz.sh" "${HOIST_FUZZ_SECONDS:-60}"
fi
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 900
