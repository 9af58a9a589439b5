#!/usr/bin/env bash
# The crafted-input tests under AddressSanitizer and UndefinedBehaviorSanitizer (any report is
# fatal): the safetensors/config/index parsers, the planner and the topology file with job
# resolution (sanitize_parse_tests: tests/util, tests/planner, tests/config, leaks checked), then
# the CLI's handling of hostile names and usage errors and the daemon's wire, limits and socket
# checks (sanitize_wire_tests: a subset of tests/launch and tests/daemon/serve_test.cc; Open MPI
# runs in the process there, so leaks are not checked). The hoist binary those tests run is the
# sanitized one. Only what these tests need is built, at -O1 with line tables (a sanitizer build
# does not need -O2 or full debug info to find bad accesses), through ccache where present;
# GCC's -Wmaybe-uninitialized is off there (false reports inside libstdc++'s <regex> under the
# sanitizers' instrumentation).
#   tools/sanitize.sh [build-dir]   (default: build-asan; CUDA off: the GPU paths are not tested)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-asan}"
source "$root/tools/env.sh"
cache=()
command -v ccache > /dev/null && cache=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1 -Wno-maybe-uninitialized" \
  -DHOIST_SANITIZE=ON -DHOIST_WITH_CUDA=OFF -DHOIST_PYTHON=/nonexistent "${cache[@]}" \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target sanitize_parse_tests sanitize_wire_tests hoist \
  hoist-mkckpt
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
t="$build/tests"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" "$t/sanitize_parse_tests"
ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" "$t/sanitize_wire_tests" \
  --gtest_filter='JobFlags*:PrintableOutput*:Suggest*:ExitCodes*:Serve*'
echo "sanitize.sh: PASS (ASan + UBSan)"
