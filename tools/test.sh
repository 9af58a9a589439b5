#!/usr/bin/env bash
# Builds hoist and runs every test: unit, mpirun integration, the README and docs commands, the
# install into a fresh prefix, bounded fuzz runs of the safetensors header parser and the codec,
# the crafted-input tests under ASan + UBSan (tools/sanitize.sh). Warnings are errors here (never
# in a user's own build).
#
# The main build is a Release build (-O3, as users and the benchmarks build it) with the test
# hooks compiled in (the failure tests need them); a Release build's default of no hooks is
# checked at configure time rather than by building everything a second time. Compiles go
# through ccache where it is installed (tools/deps.sh installs it), keyed on paths relative to
# the clone, so a second clone on the same machine reuses the first one's objects. Each stage's
# time is printed at the end.
# Usage: tools/test.sh [build-dir]   (default: build; sanitized: <build-dir>-asan;
# HOIST_SANITIZE_TESTS=0 skips that part, HOIST_FUZZ=0 the fuzzing)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
stages=()
stage_start=$SECONDS
stage() {  # closes the running stage under `name`
  stages+=("$(printf '%-10s %5d s' "$1" $((SECONDS - stage_start)))")
  stage_start=$SECONDS
}
report() {
  local rc=$?
  echo "tools/test.sh: stage times (total $SECONDS s, exit $rc):"
  for s in "${stages[@]}"; do echo "  $s"; done
}
trap report EXIT

"$root/tools/deps.sh"
source "$root/tools/env.sh"
jobs="$(nproc)"
cache=()
if command -v ccache >/dev/null; then
  cache=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
fi
stage deps

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_TEST_HOOKS=ON \
  -DHOIST_WERROR=ON "${cache[@]}"
cmake --build "$build" -j "$jobs"
stage build

if [[ "${HOIST_FUZZ:-1}" == 1 && -x "$root/tests/fuzz/run_fuzz.sh" ]]; then
  "$root/tests/fuzz/run_fuzz.sh" "${HOIST_FUZZ_SECONDS:-60}"
  stage fuzz
fi

(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900)
stage ctest

# The crafted-input tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
if [[ "${HOIST_SANITIZE_TESTS:-1}" == 1 ]]; then
  "$root/tools/sanitize.sh" "${build%/}-asan"
  stage sanitize
fi

# A user's Release build compiles the test hooks (--inject-* flags) out: its configuration says
# so. The binaries themselves were built with these flags above and smoke-tested by ctest.
release="${build%/}-release-config"
configured="$(cmake -S "$root" -B "$release" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHOIST_BUILD_TESTS=OFF "${cache[@]}")"
rm -rf "$release"
if [[ "$configured" != *"hoist: test hooks OFF"* ]]; then
  echo "tools/test.sh: a Release configuration should compile the test hooks out:"
  echo "$configured"
  exit 1
fi
stage release
echo "tools/test.sh: PASS"
