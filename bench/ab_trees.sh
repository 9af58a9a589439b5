#!/usr/bin/env bash
# Old tree against this one in one call on the GPU box: both built in Release, the qwen3-4b
# fixture written once, a `hoist pack` copy made by each build (the packed format may differ
# between them), then bench/ab.sh alternating the builds run by run, hot, each round rated
# against its own pinned-H2D ceiling: the original's cases (AB_CASES) and the packed copies'
# (AB_PACKED_CASES). Prints the medians (bench/summarize_ab.py); writes ab.jsonl and ab.md
# under $OUT.
#   bench/ab_trees.sh OLD_SRC      (an exported older tree: REF=<commit> bench/prepare-device.sh
#                                   into another folder; env RUNS=5, AB_CASES, AB_PACKED_CASES)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
old_src=$(cd "$1" && pwd)
OUT="${OUT:-/tmp/hoist-ab-out}"; mkdir -p "$OUT"
MODELS="${MODELS:-/tmp/hoist-models}"; mkdir -p "$MODELS"
source tools/env.sh
log() { echo "[ab_trees $(date +%T)] $*" >&2; }
build() {  # src dir
  local extra=()
  [[ -d $root/.gpu-deps/include ]] && extra+=("-DCMAKE_INCLUDE_PATH=$root/.gpu-deps/include")
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    "${extra[@]}" > "$2.cmake.log" 2>&1 || { tail -20 "$2.cmake.log" >&2; return 1; }
  ninja -C "$2" -j 8 hoist hoist-mkckpt hoist-bench-h2d > "$2.build.log" 2>&1 ||
    { grep -B2 -A8 error "$2.build.log" | head -40 >&2; return 1; }
}
log "building $old_src and $root"
build "$old_src" /tmp/hb-old & old_pid=$!
build "$root" /tmp/hb-new || exit 1
wait $old_pid || exit 1
m=$MODELS/qwen3-4b
[[ -f $m/config.json ]] || /tmp/hb-new/tools/hoist-mkckpt --preset qwen3-4b --out "$m" --seed 1 > /dev/null
for b in old new; do
  log "pack with the $b build"
  rm -rf "$m-packed-$b"
  /tmp/hb-$b/launch/hoist pack --model "$m" --out "$m-packed-$b" --tp-multiple 8 > /dev/null
done
res=$OUT/ab.jsonl; : > "$res"
tag() {  # prefix round-offset: names the cases and keeps each ab.sh run's rounds (and ceilings) apart
  python3 -c 'import json, sys
for l in sys.stdin:
    if not l.startswith("{"): continue
    d = json.loads(l); d["round"] = d.get("round", 0) + int(sys.argv[2])
    if "case" in d: d["case"] = sys.argv[1] + " " + d["case"]
    print(json.dumps(d), flush=True)' "$1" "$2"
}
export CEILING_BIN=/tmp/hb-new/bench/hoist-bench-h2d RUNS="${RUNS:-5}"
CASES="${AB_CASES:---read auto;--tp 2 --rank 1}" \
  bash bench/ab.sh /tmp/hb-old/launch/hoist /tmp/hb-new/launch/hoist "$m" | tag original 0 >> "$res"
CASES="${AB_PACKED_CASES:---read auto}" OLD_MODEL=$m-packed-old \
  bash bench/ab.sh /tmp/hb-old/launch/hoist /tmp/hb-new/launch/hoist "$m-packed-new" | tag packed 1000 >> "$res"
python3 bench/summarize_ab.py "$res" | tee "$OUT/ab.md"
