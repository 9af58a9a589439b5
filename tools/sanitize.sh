#!/usr/bin/env bash
# The crafted-input tests under AddressSanitizer and UndefinedBehaviorSanitizer (any report is
# fatal): the safetensors/config/index parsers and the planner (planner_tests, util_tests), the
# topology file and job resolution (config_tests), the CLI's handling of hostile names and
# usage errors (launch_tests, a subset), and the daemon's wire, limits and socket checks
# (rank_tests, a subset). The hoist binary those tests run
# is the sanitized one. Leak checking is on for the parser and planner tests; where Open MPI runs
# in the process, its own allocations would be reported, so leaks are not checked there.
#   tools/sanitize.sh [build-dir]   (default: build-asan; CUDA off: the GPU paths are not tested)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-asan}"
source "$root/tools/env.sh"
cache=()
command -v ccache > /dev/null && cache=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_SANITIZE=ON \
  -DHOIST_WITH_CUDA=OFF -DHOIST_PYTHON=/nonexistent "${cache[@]}" > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target planner_tests util_tests config_tests launch_tests \
  rank_tests
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
t="$build/tests"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" "$t/util_tests"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" "$t/planner_tests"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" "$t/config_tests"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
"$t/launch_tests" --gtest_filter='JobFlags*:PrintableOutput*:Suggest*:ExitCodes*'
"$t/rank_tests" --gtest_filter='Serve*'
echo "sanitize.sh: PASS (ASan + UBSan)"
