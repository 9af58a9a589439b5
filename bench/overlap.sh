#!/usr/bin/env bash
# GPU benchmark of issue 42 (addresses first, bytes later): the example engine's time to first
# token (examples/tp_engine/run.py, bf16, 8 greedy tokens, one GPU) loading synchronously against
# --overlap (hoist.load_async: its warm-up runs while the weights stream), cold (the page
# cache dropped before each run; needs root) and hot, RUNS runs each, on the qwen3-4b shape
# (hoist-mkckpt --family qwen3 --preset qwen3-4b, 8.04 GB, written once to MODEL). Prints and writes
# the median of every start-up line item (process_start, cuda_context, hoist_plan_arena, weights,
# warm_up, first_token, total) per case to $OUT/overlap.md, the raw lines to $OUT/overlap.tsv,
# each run's log to $OUT/logs/. Target (issue 42): cold --overlap total within 10% of the
# synchronous total minus min(weights, warm_up).
# Uses hoist's build in BUILD (default build/, else build-bench/; built as bench/engine_check.sh
# builds it when missing: hoist_python, hoist-mkckpt). Needs torch with CUDA.
#   bench/overlap.sh   (env: OUT, BUILD, PYTHON, RUNS=3, MODEL, WARMUP_SIZES, WARMUP_REPEATS=2)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-overlap}"; mkdir -p "$OUT/logs"
PYTHON="${PYTHON:-python3}"
RUNS="${RUNS:-3}"
MODEL="${MODEL:-/tmp/hoist-overlap-model/qwen3-4b}"
WARMUP_SIZES="${WARMUP_SIZES:-1,2,4,8,16,32,64,128}"
WARMUP_REPEATS="${WARMUP_REPEATS:-2}"
source tools/env.sh
source bench/build_python.sh
say() { echo "[overlap.sh $(date +%T)] $*" >&2; }

build="${BUILD:-}"
if [[ -z "$build" ]]; then
  for b in build build-bench; do [[ -x "$b/tools/hoist-mkckpt" && -d "$b/python/pkg/hoist" ]] && { build=$b; break; }; done
fi
if [[ -z "$build" ]]; then
  build=build-bench
  say "building hoist_python and hoist-mkckpt into $build (log: $OUT/build.log)"
  if ! build_python "$build" "$OUT/build.log" hoist_python hoist-mkckpt; then
    say "build failed:"; tail -20 "$OUT/build.log" >&2; exit 2
  fi
fi
[[ "$build" == /* ]] || build="$root/$build"
export PYTHONPATH="$build/python/pkg${PYTHONPATH:+:$PYTHONPATH}"

if [[ ! -f "$MODEL/config.json" ]]; then
  say "writing the qwen3-4b shape to $MODEL"
  mkdir -p "$(dirname "$MODEL")"
  "$build/tools/hoist-mkckpt" --family qwen3 --preset qwen3-4b --out "$MODEL" \
    --threads "$(nproc)" > "$OUT/mkckpt.log" 2>&1 || { say "hoist-mkckpt failed"; tail "$OUT/mkckpt.log" >&2; exit 2; }
fi

can_drop=0
if [[ $(id -u) == 0 ]] && sync && echo 3 > /proc/sys/vm/drop_caches 2> /dev/null; then can_drop=1; fi
[[ $can_drop == 1 ]] || say "cannot drop the page cache (not root?): the cold cases are skipped"

printf 'temp\tmode\trun\tphase\tseconds\n' > "$OUT/overlap.tsv"
run_case() {  # temp mode run
  local temp=$1 mode=$2 i=$3 log="$OUT/logs/$1-$2-$3.log" flag=()
  [[ $mode == overlap ]] && flag=(--overlap)
  if [[ $temp == cold ]]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
  if ! timeout 120 "$PYTHON" examples/tp_engine/run.py --model "$MODEL" --device cuda \
       --dtype bfloat16 --tokens 8 --warmup-sizes "$WARMUP_SIZES" \
       --warmup-repeats "$WARMUP_REPEATS" --out "$OUT/logs/$temp-$mode-$i.npz" "${flag[@]}" \
       > "$log" 2>&1; then
    say "$temp $mode run $i failed:"; tail -5 "$log" >&2; return 1
  fi
  awk -v t="$temp" -v m="$mode" -v r="$i" '$1 == "phase" {print t "\t" m "\t" r "\t" $2 "\t" $3}' \
    "$log" >> "$OUT/overlap.tsv"
}

temps=(hot); [[ $can_drop == 1 ]] && temps=(cold hot)
cat "$MODEL"/*.safetensors > /dev/null  # hot runs start from a warm page cache
failed=0
for temp in "${temps[@]}"; do
  for i in $(seq 1 "$RUNS"); do  # interleaved, so drift hits both modes alike
    for mode in sync overlap; do
      [[ $temp == hot && $i == 1 && $mode == sync ]] && cat "$MODEL"/*.safetensors > /dev/null
      run_case "$temp" "$mode" "$i" || failed=1
    done
  done
done

"$PYTHON" - "$OUT" <<'PY'
import collections, statistics, sys
import numpy as np
out = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(f"{out}/overlap.tsv")][1:]
cases = collections.defaultdict(lambda: collections.defaultdict(list))
for temp, mode, run, phase, s in rows:
    cases[(temp, mode)][phase].append(float(s))
order = ["process_start", "cuda_context", "hoist_plan_arena", "weights", "warm_up",
         "first_token", "total"]
lines = ["| case | runs | " + " | ".join(order) + " |", "|---" * (len(order) + 2) + "|"]
for (temp, mode), ph in sorted(cases.items()):
    n = len(ph.get("total", []))
    cells = [f"{statistics.median(ph[p]):.3f}" if p in ph else "-" for p in order]
    lines.append(f"| {temp} {mode} | {n} | " + " | ".join(cells) + " |")
for temp in ("cold", "hot"):
    s, o = cases.get((temp, "sync")), cases.get((temp, "overlap"))
    if s and o and "total" in s and "total" in o:
        hidden = min(statistics.median(s["weights"]), statistics.median(s["warm_up"]))
        target = statistics.median(s["total"]) - hidden
        lines.append(f"\n{temp}: overlap total {statistics.median(o['total']):.3f} s, sync "
                     f"{statistics.median(s['total']):.3f} s; the target (sync minus "
                     f"min(weights, warm_up)) {target:.3f} s, +10% {1.1 * target:.3f} s")
# Tokens and logits of every run must equal the first synchronous run's.
import glob
ref = None
same = True
for f in sorted(glob.glob(f"{out}/logs/*.npz")):
    d = np.load(f)
    if ref is None:
        ref = d
        continue
    for k in ("tokens", "prefill", "steps"):
        if not np.array_equal(ref[k], d[k]):
            same = False
            lines.append(f"MISMATCH: {f} {k} differs from the first run's")
lines.append(f"\ntokens and logits identical across every run and mode: {same}")
text = "\n".join(lines)
print(text)
open(f"{out}/overlap.md", "w").write(text + "\n")
PY
exit $failed
