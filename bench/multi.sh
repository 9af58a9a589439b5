#!/usr/bin/env bash
# The several-GPU mode of the benchmark: one call on a machine with N >= 2 GPUs measures, side by
# side and in this order:
#  1. the pinned H2D ceiling of each GPU alone, then of all N GPUs copying at once;
#  2. the host copy ceiling (page cache -> memory, buffered pread): one process on all cores,
#     then N processes at once on disjoint core sets (the share each rank gets);
#  3. hoist under plain `mpirun -np N` (no binding flags, as users type it: Open MPI then binds
#     each rank to one core when N <= 2): tp N, dp N (replicas) and ep N (deepseek-v3-small),
#     dedup none / node / auto, hot and cold, several runs each, every run with --report-json;
#     one rank alone reading the whole model (the cold reference for dp + dedup);
#  4. safetensors.load_file in one process per GPU at once (each loads the whole checkpoint);
#  5. --verify of every configuration, and the timeline of the largest run.
# Writes $OUT/multi.jsonl, $OUT/MULTI.md (bench/summarize_multi.py) and the timeline SVG.
#   bench/multi.sh BUILD_DIR MODELS_DIR   (env: RUNS_HOT=5 RUNS_COLD=2 CONFIGS="tp dp ep")
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${1:?build dir}"; models="${2:?models dir}"
OUT="${OUT:-/tmp/hoist-bench-out}"; AUX="${AUX:-/tmp/hoist-bench-aux}"; mkdir -p "$OUT" "$AUX"
RUNS_HOT="${RUNS_HOT:-5}"; RUNS_COLD="${RUNS_COLD:-2}"
CONFIGS="${CONFIGS:-tp dp ep}"; DEDUPS="${DEDUPS:-none node auto}"
STAGES="${STAGES-ceilings hoist peers verify timeline}"  # a subset runs only those; empty: none
stage() { [[ " $STAGES " == *" $1 "* ]]; }
hoist=$build/launch/hoist
res="$OUT/multi.jsonl"; : > "$res"
log() { echo "[multi $(date +%T)] $*" >&2; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm() { cat "$1"/*.safetensors > /dev/null; }
now() { date +%s.%N; }

# Root may run Open MPI; nothing here binds or oversubscribes (tools/env.sh allows
# oversubscription for CI, which would change Open MPI's default binding).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent=
unset OMPI_MCA_rmaps_base_oversubscribe
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

n=$(nvidia-smi -L | wc -l)
cores=$(nproc)
log "$n GPUs, $cores cores"
m4b="$models/qwen3-4b"; ds="$models/deepseek-v3-small"
[[ -f "$m4b/config.json" ]] || $build/tools/hoist-mkckpt --family qwen3 --preset qwen3-4b --out "$m4b" --seed 1 > /dev/null
[[ -f "$ds/config.json" ]] || $build/tools/hoist-mkckpt --family deepseek-v3 --preset deepseek-v3-small --out "$ds" --seed 3 > /dev/null

if stage ceilings; then
log "pinned H2D ceiling: each GPU alone, then all at once"
for g in $(seq 0 $((n - 1))); do
  CUDA_VISIBLE_DEVICES=$g $build/bench/hoist-bench-h2d 4 5 | sed "s/^{/{\"kind\":\"h2d_alone\",\"gpu\":$g,/" >> "$res"
done
start=$(python3 -c 'import time; print(time.time() + 8)')  # after every process's set-up
for g in $(seq 0 $((n - 1))); do
  HOIST_BENCH_START=$start CUDA_VISIBLE_DEVICES=$g $build/bench/hoist-bench-h2d 4 9 > "$AUX/h2d-$g.json" &
done
wait
for g in $(seq 0 $((n - 1))); do sed "s/^{/{\"kind\":\"h2d_concurrent\",\"gpu\":$g,/" "$AUX/h2d-$g.json" >> "$res"; done

log "host copy ceiling: one process on all cores, then $n processes on disjoint cores at once"
files=("$m4b"/*.safetensors)
warm "$m4b"
$build/bench/hoist-bench-io --buffered --threads 16 "${files[@]}" | sed 's/^{/{"kind":"memcpy_alone",/' >> "$res"
per=$((cores / n))
for g in $(seq 0 $((n - 1))); do
  taskset -c $((g * per))-$(((g + 1) * per - 1)) $build/bench/hoist-bench-io --buffered \
    --threads $((per < 16 ? per : 16)) "${files[@]}" > "$AUX/io-$g.json" &
done
wait
for g in $(seq 0 $((n - 1))); do sed "s/^{/{\"kind\":\"memcpy_concurrent\",\"rank\":$g,/" "$AUX/io-$g.json" >> "$res"; done

mpirun -np 2 --report-bindings true > "$AUX/bindings.txt" 2>&1 || true
grep -m2 "bound to\|not bound" "$AUX/bindings.txt" | sed 's/^/  launcher default: /' >&2 || true
fi

# One hoist run under plain mpirun: label, temp, model, hoist args...
run_mpi() {
  local label=$1 temp=$2 model=$3; shift 3
  if [[ $temp == cold ]]; then drop; else warm "$model"; fi
  local rj="$AUX/report.json"; rm -f "$rj"
  local t0 t1; t0=$(now)
  if ! mpirun -np $n $hoist load --model "$model" --log-level warn --no-progress \
      --report-json "$rj" "$@" > "$AUX/last.log" 2>&1; then
    log "FAILED: $label $temp $*"; tail -5 "$AUX/last.log" >&2
    echo "{\"kind\":\"hoist\",\"label\":\"$label\",\"temp\":\"$temp\",\"failed\":true}" >> "$res"
    return 0
  fi
  t1=$(now)
  python3 - "$rj" "$label" "$temp" "$t0" "$t1" >> "$res" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ranks = []
for k in r["ranks"]:
    ph = k["phases"]
    ranks.append({"rank": k["rank"], "load_s": ph["total"]["seconds"],
                  "bytes": k["bytes_h2d"] + k["bytes_received"], "bytes_h2d": k["bytes_h2d"],
                  "storage": k["bytes_read_from_storage"], "received": k["bytes_received"],
                  "cpus": k.get("cpus", ""), "threads": k.get("fill_threads", 0),
                  "phases": {n: [p["start_s"], p["seconds"]] for n, p in ph.items()}})
t0, t1 = float(sys.argv[4]), float(sys.argv[5])
first_main = min(k.get("origin_epoch_s", t0) for k in r["ranks"])
print(json.dumps({"kind": "hoist", "label": sys.argv[2], "temp": sys.argv[3],
                  "dedup": r["dedup"], "dedup_reason": r.get("dedup_reason", ""),
                  "process_s": t1 - t0, "launch_s": first_main - t0,
                  "exit_s": t1 - (r["ranks"][0].get("origin_epoch_s", t0) + r["wall_s"]),
                  "wall_s": r["wall_s"], "ranks": ranks}))
PY
}

cfg_args() {  # config -> model and hoist args
  case $1 in
    tp) echo "$m4b --tp $n" ;;
    dp) echo "$m4b --dp $n" ;;
    ep) echo "$ds --ep $n" ;;
  esac
}

stage hoist && for temp in hot cold; do
  runs=$RUNS_HOT; cfgs=$CONFIGS; dds=$DEDUPS
  if [[ $temp == cold ]]; then runs=$RUNS_COLD; cfgs=${COLD_CONFIGS:-dp tp}; dds=${COLD_DEDUPS:-none node}; fi
  for cfg in $cfgs; do
    read -r model args <<< "$(cfg_args $cfg)"
    for dd in $dds; do
      log "mpirun -np $n hoist load $cfg$n --dedup $dd ($temp x $runs)"
      [[ $temp == hot ]] && run_mpi warmup hot $model $args --dedup $dd > /dev/null
      for i in $(seq $runs); do run_mpi "$cfg$n-$dd" $temp $model $args --dedup $dd; done
    done
  done
  log "one rank alone, whole qwen3-4b ($temp)"
  for i in $(seq $runs); do
    if [[ $temp == cold ]]; then drop; else warm "$m4b"; fi
    $hoist load --model "$m4b" --log-level warn --no-progress --report-json "$AUX/one.json" > /dev/null 2>&1 &&
      python3 -c "import json,sys; r=json.load(open('$AUX/one.json'))['ranks'][0]; print(json.dumps({'kind':'alone','temp':'$temp','load_s':r['phases']['total']['seconds'],'bytes':r['bytes_h2d']}))" >> "$res"
  done
done

stage peers && log "safetensors: one process per GPU at once"
stage peers && for temp in hot cold; do
  runs=$RUNS_HOT; [[ $temp == cold ]] && runs=$RUNS_COLD
  for i in $(seq $runs); do
    if [[ $temp == cold ]]; then drop; else warm "$m4b"; fi
    for g in $(seq 0 $((n - 1))); do
      CUDA_VISIBLE_DEVICES=$g python3 bench/peers.py "$m4b" hot 1 > "$AUX/st-$g.json" &
    done
    wait
    for g in $(seq 0 $((n - 1))); do sed "s/^{/{\"kind\":\"peer_multi\",\"gpu\":$g,\"temp2\":\"$temp\",/" "$AUX/st-$g.json" >> "$res"; done
  done
done

stage verify && log "verify" && : > "$OUT/verify-multi.txt"
stage verify && for cfg in $CONFIGS; do
  read -r model args <<< "$(cfg_args $cfg)"
  for dd in $DEDUPS; do
    if mpirun -np $n $hoist load --model "$model" $args --dedup $dd --verify --log-level warn \
        --no-progress > "$AUX/verify.log" 2>&1; then
      echo "PASS mpirun -np $n hoist load $cfg $n --dedup $dd --verify" >> "$OUT/verify-multi.txt"
    else
      echo "FAIL mpirun -np $n hoist load $cfg $n --dedup $dd --verify: $(tail -2 "$AUX/verify.log" | tr '\n' ' ')" >> "$OUT/verify-multi.txt"
    fi
  done
done
stage verify && cat "$OUT/verify-multi.txt" >&2

if stage timeline; then
  log "timeline: dp $n dedup node, hot"
  warm "$m4b"
  mpirun -np $n $hoist load --model "$m4b" --dp $n --dedup node --log-level warn --no-progress \
    --timeline "$OUT/timeline-dp$n-node.svg" --report-json "$AUX/dp-node.json" > "$OUT/dp-node-table.txt" 2>&1 || true
fi

python3 bench/summarize_multi.py "$res" > "$OUT/MULTI.md"
cat "$OUT/MULTI.md"
