#!/usr/bin/env bash
# Builds hoist and runs every test: unit, mpirun integration, the README and docs commands, the
# install into a fresh prefix, bounded fuzz runs of the safetensors header parser and the codec,
# the crafted-input tests under ASan + UBSan (tools/sanitize.sh); then a Release build of the main
# binaries with a smoke run. Warnings are errors here (never in a user's own build).
# Usage: tools/test.sh [build-dir]   (default: build; Release: <build-dir>-release; sanitized:
# <build-dir>-asan; HOIST_SANITIZE_TESTS=0 skips that part)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
"$root/tools/deps.sh"
source "$root/tools/env.sh"
jobs="$(nproc)"
cache=()
if command -v ccache >/dev/null; then
  cache=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_WERROR=ON \
  "${cache[@]}"
cmake --build "$build" -j "$jobs"
if [[ "${HOIST_FUZZ:-1}" == 1 && -x "$root/tests/fuzz/run_fuzz.sh" ]]; then
  "$root/tests/fuzz/run_fuzz.sh" "${HOIST_FUZZ_SECONDS:-60}"
fi
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900)

# The crafted-input tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
if [[ "${HOIST_SANITIZE_TESTS:-1}" == 1 ]]; then
  "$root/tools/sanitize.sh" "${build%/}-asan"
fi

# Release, as a user builds it: the main binaries, warning-free, then plan and load a checkpoint.
if [[ "${HOIST_RELEASE:-1}" == 1 ]]; then
  release="${build%/}-release"
  cmake -S "$root" -B "$release" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_WERROR=ON \
    -DHOIST_BUILD_TESTS=OFF "${cache[@]}" >/dev/null
  cmake --build "$release" -j "$jobs" --target hoist hoist-mkckpt
  smoke="$release/smoke"
  rm -rf "$smoke"
  "$release/tools/hoist-mkckpt" --family qwen3 --preset qwen3-tiny --out "$smoke/model" >/dev/null
  "$release/launch/hoist" plan --model "$smoke/model" --tp 2 >/dev/null
  "$release/launch/hoist" load --model "$smoke/model" --device host --verify --no-progress
  mpirun -np 2 "$release/launch/hoist" load --model "$smoke/model" --tp 2 --device host --verify \
    --no-progress
  # Test hooks are compiled out of Release (HOIST_TEST_HOOKS): --inject-* is an unknown flag there.
  set +e
  hooks="$("$release/launch/hoist" load --model "$smoke/model" --inject-fail-rank 0 2>&1)"
  rc=$?
  set -e
  if [[ $rc != 2 || "$hooks" != *"unknown flag '--inject-fail-rank'"* ]]; then
    echo "release build: --inject-fail-rank should be an unknown flag (exit 2), got $rc: $hooks"
    exit 1
  fi
  echo "release build: smoke PASS"
fi
