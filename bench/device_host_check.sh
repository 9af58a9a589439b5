#!/usr/bin/env bash
# One checkpoint on the GPU against the host backend: hoist loads it one rank at a time with
# --dump on `--device cuda` and on `--device host`, in both layouts, at the tp / ep cases given,
# as it is and as its `hoist pack` copy; every GPU dump and the packed copy's host dump must equal
# the original's host dump byte for byte (the host backend's slicing is what tests/reference
# checks in CI). For families bench/hf_slices.py has no torch rules for (DeepSeek-V4).
# Prints one line per case and a summary; writes $OUT/device_host_check.txt; exit 1 on a failure.
#   bench/device_host_check.sh MODEL_DIR   (env: OUT, BUILD_DIR (default build-bench),
#                                            CASES="1:0 2:0 1:2" as tp:ep, LAYOUTS="fused hf")
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="$(readlink -f "${1:?usage: bench/device_host_check.sh MODEL_DIR}")"
cd "$root"
source tools/env.sh
OUT="${OUT:-/tmp/hoist-device-host-check}"; mkdir -p "$OUT"
work="${WORK:-/tmp/hoist-device-host-work}"; rm -rf "$work"; mkdir -p "$work"
hoist="${BUILD_DIR:-build-bench}/launch/hoist"
[[ -x $hoist ]] || { echo "no $hoist: build first (bench/bench.sh with BUILD_ONLY=1)" >&2; exit 2; }
res="$OUT/device_host_check.txt"; : > "$res"
packed="$work/packed"
"$hoist" pack --model "$model" --out "$packed" > "$work/pack.log" 2>&1 ||
  { echo "pack FAIL: $(tail -2 "$work/pack.log")" | tee -a "$res"; exit 1; }

# dump MODEL DEVICE NAME ARGS...: a --dump load, its rank file's path on stdout ("" on failure).
dump() {
  local m=$1 dev=$2 name=$3; shift 3
  local d="$work/$name"
  if "$hoist" load --model "$m" --device "$dev" --dump "$d" --no-progress "$@" \
    > "$work/load.log" 2>&1; then
    ls "$d"/rank-*.safetensors
  else
    echo "$name: load FAIL $(grep -m1 -i error "$work/load.log")" >> "$res"
  fi
}

pass=0; fail=0
for layout in ${LAYOUTS:-fused hf}; do
  for c in ${CASES:-1:0 2:0 1:2}; do
    tp=${c%%:*}; ep=${c##*:}; n=$tp; ((ep > 0)) && n=$ep
    for ((k = 0; k < n; k++)); do
      args=(--tp "$tp" --rank "$k" --layout "$layout"); ((ep > 0)) && args+=(--ep "$ep")
      tag="$layout-tp$tp-ep$ep-r$k"
      base=$(dump "$model" host "host-orig-$tag" "${args[@]}")
      for v in "cuda $model cuda-orig" "host $packed host-packed" "cuda $packed cuda-packed"; do
        set -- $v
        got=$(dump "$2" "$1" "$3-$tag" "${args[@]}")
        if [[ -n $base && -n $got ]] && cmp -s "$base" "$got"; then
          echo "$tag: PASS $3 = host original" >> "$res"; pass=$((pass + 1))
        else
          echo "$tag: FAIL $3 != host original" >> "$res"; fail=$((fail + 1))
        fi
      done
    done
  done
done
echo "PASS $pass FAIL $fail" >> "$res"
cat "$res"
((fail == 0))
