#!/usr/bin/env bash
# The C ABI test (tests/CMakeLists.txt, c_abi_compatibility): a tiny checkpoint, then the C
# consumer built against the previous hoist_c.h and against today's, both on today's library.
#   run_abi_test.sh HOIST_MKCKPT CONSUMER_V1 CONSUMER_CURRENT
set -euo pipefail
mkckpt="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$mkckpt" --family qwen3 --preset qwen3-tiny --out "$dir/model" > /dev/null
for consumer in "$@"; do
  "$consumer" "$dir/model"
done
