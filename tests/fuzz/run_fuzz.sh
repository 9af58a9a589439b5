#!/usr/bin/env bash
# Builds the fuzz targets with clang-14 (libFuzzer + ASan + UBSan, every sanitizer report fatal)
# in their own build folder, then fuzzes each for a bounded time from its seed corpus, which is
# only read (new inputs go to a temporary folder): the safetensors header parser for SECONDS from
# tests/fuzz/corpus, the codec's stream parser and decoder for SECONDS/2 from
# tests/fuzz/codec_corpus. Exits non-zero on a build failure, a crash, a sanitizer report, a leak, a timeout or
# an out-of-memory. Crashing inputs are kept under <build>/fuzz-artifacts/.
#
# Warnings are not errors here (HOIST_WERROR=OFF): the gcc build enforces -Werror, and a
# clang-only warning elsewhere in planner/ must not stop the fuzzing job.
#
# Usage: tests/fuzz/run_fuzz.sh [SECONDS]   (default 60)
# Environment: HOIST_FUZZ_BUILD_DIR (default <repo>/build-fuzz), HOIST_FUZZ_JOBS (default 2).
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: $0 [SECONDS]  (a positive integer, default 60)" >&2
  exit 2
fi
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${HOIST_FUZZ_BUILD_DIR:-$repo/build-fuzz}"
jobs="${HOIST_FUZZ_JOBS:-2}"

for tool in clang-14 clang++-14 cmake ninja; do
  command -v "$tool" >/dev/null || { echo "run_fuzz.sh: $tool not found" >&2; exit 2; }
done

mkdir -p "$build"
log="$build/configure.log"
cache=()
command -v ccache > /dev/null && cache=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang-14 CXX=clang++-14 cmake -S "$repo" -B "$build" -G Ninja "${cache[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_FUZZ=ON -DHOIST_BUILD_TESTS=OFF \
  -DHOIST_WITH_CUDA=OFF -DHOIST_WERROR=OFF -DCMAKE_C_FLAGS="-fno-sanitize-recover=all" \
  -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=all" >"$log" 2>&1 ||
  { cat "$log" >&2; echo "run_fuzz.sh: cmake failed" >&2; exit 1; }
ninja -C "$build" -j "$jobs" safetensors_header_fuzz codec_stream_fuzz

work="$(mktemp -d "${TMPDIR:-/tmp}/hoist-fuzz-XXXXXX")"
trap 'rm -rf "$work"' EXIT
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

fuzz() {  # target corpus seconds
  local target=$1 corpus=$2 secs=$3
  mkdir -p "$work/$target"
  echo "run_fuzz.sh: fuzzing $target for ${secs}s"
  "$build/tests/fuzz/$target" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$work/$target" "$repo/tests/fuzz/$corpus"
  echo "run_fuzz.sh: $target: no crash in ${secs}s"
}
fuzz safetensors_header_fuzz corpus "$seconds"
fuzz codec_stream_fuzz codec_corpus "$(( seconds / 2 > 0 ? seconds / 2 : 1 ))"
