#!/usr/bin/env bash
# Builds hoist, writes a small Qwen3-shaped checkpoint, plans it and loads it with --verify:
# on the GPU when one is present, in host memory otherwise; then the same model as tp 2 under
# mpirun with reports. Usage: tools/example.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
HOIST_FUZZ=0 "$root/tools/deps.sh"
source "$root/tools/env.sh"
# The same configuration as tools/test.sh, so that the two share one build folder.
cache=()
if command -v ccache >/dev/null; then
  cache=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=true
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_TEST_HOOKS=ON \
  -DHOIST_WERROR=ON "${cache[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target hoist hoist-mkckpt
model="$build/example/qwen3-tiny"
out="$build/example/out"
rm -rf "$model" "$out"; mkdir -p "$out"
"$build/tools/hoist-mkckpt" --family qwen3 --preset qwen3-tiny --out "$model" --seed 7
echo "== hoist plan --tp 2"
"$build/launch/hoist" plan --model "$model" --tp 2 --json "$out/plan.json"
echo "== hoist load (one rank, --verify)"
"$build/launch/hoist" load --model "$model" --verify --dump "$out"
echo "== mpirun -np 2 hoist load --topology examples/topologies/example-tp2.yaml"
mpirun -np 2 "$build/launch/hoist" load --topology "$root/examples/topologies/example-tp2.yaml" \
  --model "$model" --verify --report-json "$out/report.json" --trace "$out/trace.json" \
  --timeline "$out/timeline.svg" --metrics "$out/metrics.prom"
echo "example outputs in $out"
