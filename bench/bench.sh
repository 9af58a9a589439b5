#!/usr/bin/env bash
# One call on the GPU box: build, make the qwen3-4b fixture, and measure side by side, hot and
# cold page cache, several runs each: the pinned-H2D ceiling, the O_DIRECT read ceiling, `hoist
# load` in each read mode (tp 1, and tp 2 rank 1), and safetensors.load_file(device="cuda").
# Writes results.jsonl and BENCHMARKS.md (table) under $OUT, plus verify runs and a timeline.
#   bench/bench.sh            (env: RUNS_HOT=5 RUNS_COLD=3 MODES="auto buffered direct mmap pageable registered",
#                              MODES_HOT / MODES_COLD override MODES for one temperature,
#                              CODEC=1: the codec's sizes and decode rates, hoist-bench-codec)
# On a machine with several GPUs it first runs bench/multi.sh (MULTI=0 skips it, ONLY_MULTI=1
# runs only it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-bench-out}"; mkdir -p "$OUT"
AUX="${AUX:-/tmp/hoist-bench-aux}"; mkdir -p "$AUX"   # logs that do not come back (8 files max in $OUT)
RUNS_HOT="${RUNS_HOT:-5}"; RUNS_COLD="${RUNS_COLD:-3}"
MODES="${MODES:-auto buffered direct mmap pageable registered}"
VERIFY="${VERIFY:-1}"
MODELS="${MODELS:-/tmp/hoist-models}"
source tools/env.sh
log() { echo "[bench $(date +%T)] $*" >&2; }
res="$OUT/results.jsonl"; : > "$res"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm() { cat "$1"/*.safetensors > /dev/null; }

log "build"
build="${BUILD_DIR:-build-bench}"
extra=()
# The GPU box's image lacks Debian's dlpack header: bench/prepare-device.sh puts a copy in
# .gpu-deps/; pybind11 comes with its python3.
[[ -d .gpu-deps/include ]] && extra+=("-DCMAKE_INCLUDE_PATH=$root/.gpu-deps/include")
if python3 -m pybind11 --cmakedir > /dev/null 2>&1; then
  extra+=("-Dpybind11_DIR=$(python3 -m pybind11 --cmakedir)" "-DHOIST_PYTHON=$(command -v python3)")
fi
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF "${extra[@]}" > "$AUX/cmake.log" 2>&1 || { cat "$AUX/cmake.log"; exit 1; }
# Keep going past a failing optional target (the Python module); the binaries must exist.
ninja -C $build -k 0 > "$AUX/build.log" 2>&1 || { grep -A8 "error" "$AUX/build.log" | head -40 >&2; }
[[ -x $build/launch/hoist && -x $build/tools/hoist-mkckpt ]] || { tail -50 "$AUX/build.log"; exit 1; }
grep -E "hoist: " "$AUX/cmake.log" >&2 || true
hoist=$build/launch/hoist
{ nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv; nproc; free -g | head -2; df -h /tmp | tail -1; uname -r; } > "$OUT/machine.txt" 2>&1 || true

m4b="$MODELS/qwen3-4b"
if [[ ! -f "$m4b/config.json" ]]; then
  log "mkckpt qwen3-4b"
  /usr/bin/time -f '%e s' $build/tools/hoist-mkckpt --family qwen3 --preset qwen3-4b --out "$m4b" --seed 1 2>&1 | tail -2
fi
files=("$m4b"/*.safetensors)

[[ -f "$MODELS/deepseek-v3-small/config.json" ]] || $build/tools/hoist-mkckpt --family deepseek-v3 \
  --preset deepseek-v3-small --out "$MODELS/deepseek-v3-small" --seed 3 > /dev/null
[[ "${BUILD_ONLY:-0}" == 1 ]] && { log "built; models in $MODELS"; exit 0; }
# Several GPUs: the multi-GPU mode (bench/multi.sh) runs first; ONLY_MULTI=1 stops after it.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [[ "${MULTI:-auto}" != 0 && $gpus -ge 2 ]]; then
  log "several-GPU mode ($gpus GPUs)"
  OUT="$OUT" AUX="$AUX" bash bench/multi.sh "$build" "$MODELS" || log "multi.sh FAILED"
  [[ "${ONLY_MULTI:-0}" == 1 ]] && exit 0
fi

if [[ "${ONLY_SERVE:-0}" == 1 ]]; then MODES=""; PEER=0; VERIFY=0; MPI2=0; TEMPS=""; fi
log "pinned H2D ceiling"
for i in 1 2; do $build/bench/hoist-bench-h2d 8 7 | sed 's/^{/{"kind":"h2d_ceiling",/' >> "$res"; done

# The codec (issue 15, docs/CODEC.md): sizes per dtype, CPU and GPU decode, H2D of the compressed
# bytes, on the qwen3-4b fixture and on 1 GiB of synthetic normal BF16 weights (CODEC=0 skips it).
if [[ "${CODEC:-1}" == 1 ]]; then
  if [[ -x $build/bench/hoist-bench-codec ]]; then
    log "codec: hoist-bench-codec on qwen3-4b and on 1 GiB of synthetic normal BF16"
    for src in "--model $m4b" "--synthetic-gib 1"; do
      # shellcheck disable=SC2086
      $build/bench/hoist-bench-codec $src --runs 5 >> "$res" 2> "$AUX/codec.log" || { log "codec FAILED: $src"; tail -5 "$AUX/codec.log" >&2; }
    done
  else
    log "codec: hoist-bench-codec was not built (no nvcc?)"
  fi
fi

log "O_DIRECT read ceiling (cold): threads x request size sweep"
[[ "${ONLY_SERVE:-0}" == 1 ]] && IO_SWEEP=none
IO_SWEEP="${IO_SWEEP:-16:8 64:4 128:1 8:1:32 16:4:16}"
[[ "$IO_SWEEP" == none ]] && IO_SWEEP=""
for cfg in $IO_SWEEP; do  # threads:chunk_mib[:depth] (depth: requests in flight per thread, AIO)
  IFS=: read -r t c d <<< "$cfg"
  drop; $build/bench/hoist-bench-io --threads $t --chunk-mib $c --depth "${d:-0}" "${files[@]}" | sed "s/^{/{\"kind\":\"io_ceiling\",\"temp\":\"cold\",\"chunk_mib\":$c,/" >> "$res"
done
[[ "${ONLY_SERVE:-0}" == 1 ]] || warm "$m4b"; [[ "${ONLY_SERVE:-0}" == 1 ]] || $build/bench/hoist-bench-io --buffered --threads 16 "${files[@]}" | sed 's/^{/{"kind":"io_ceiling","temp":"hot",/' >> "$res"

if [[ "${RING:-1}" == 1 && -x $build/bench/hoist-bench-ring ]]; then
  log "ring DMA ceiling per pinned-memory kind (no reading)"
  $build/bench/hoist-bench-ring 8 5 >> "$res"
fi

run_hoist() {  # label temp extra-args...
  local label=$1 temp=$2; shift 2
  if [[ $temp == cold ]]; then drop; else warm "$m4b"; fi
  local rj="$AUX/last-report.json"
  if ! $hoist load --model "$m4b" --log-level warn --report-json "$rj" "$@" > "$AUX/last.log" 2>&1; then
    log "FAILED: $label $temp $*"; tail -5 "$AUX/last.log" >&2
    echo "{\"kind\":\"hoist\",\"label\":\"$label\",\"temp\":\"$temp\",\"failed\":true}" >> "$res"
    return 0
  fi
  python3 - "$rj" "$label" "$temp" >> "$res" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); k = r["ranks"][0]; ph = k["phases"]
out = {"kind": "hoist", "label": sys.argv[2], "temp": sys.argv[3], "bytes": k["bytes_h2d"],
       "resident": k["bytes_resident_at_start"], "bytes_read": k["bytes_read"],
       "wall_s": r["wall_s"], "phases": {n: p["seconds"] for n, p in ph.items()},
       "read_busy_s": ph.get("read", {}).get("busy_s", 0), "device": k["device"]}
print(json.dumps(out))
PY
}

for temp in ${TEMPS-hot cold}; do
  runs=$RUNS_HOT; [[ $temp == cold ]] && runs=$RUNS_COLD
  modes=$MODES; [[ $temp == hot ]] && modes=${MODES_HOT:-$MODES}; [[ $temp == cold ]] && modes=${MODES_COLD:-$MODES}
  for mode in $modes; do
    log "hoist tp1 --read $mode ($temp x $runs)"
    [[ $temp == hot ]] && run_hoist "warmup" hot --read $mode > /dev/null
    for i in $(seq $runs); do run_hoist "tp1-$mode" $temp --read $mode; done
  done
  if [[ $temp == hot ]]; then
    log "hoist tp1 auto, staging via cudaMallocHost (hot)"
    for i in $(seq $runs); do run_hoist "tp1-auto-mallochost" hot --pinning mallochost; done
  fi
  log "hoist tp2 rank1 auto ($temp)"
  for i in $(seq $runs); do run_hoist "tp2r1-auto" $temp --tp 2 --rank 1; done
done

if [[ -n "${SLOT_SWEEP:-}" ]]; then
  log "slot sweep (hot): $SLOT_SWEEP"
  for cfg in $SLOT_SWEEP; do  # slots:MiB:threads
    IFS=: read -r k m t <<< "$cfg"
    for i in 1 2 3; do run_hoist "sweep-${k}x${m}MiB-${t}thr" hot --slots $k --slot-mib $m --threads $t; done
  done
  for ck in ${CHUNK_SWEEP:-}; do
    for i in 1 2 3; do run_hoist "tp2r1-chunk${ck}KiB" hot --tp 2 --rank 1 --chunk-kib $ck; done
  done
fi

if [[ "${RELOAD:-1}" == 1 ]]; then
  log "repeated loads in one process (embedding API; the staging ring is kept between loads)"
  warm "$m4b"
  { $build/bench/hoist-bench-reload "$m4b" $((RUNS_HOT + 1)) 1 0 2>> "$AUX/reload.log" || log "reload FAILED"; } | grep "^{" >> "$res" || true
  { $build/bench/hoist-bench-reload "$m4b" $((RUNS_HOT + 1)) 2 1 2>> "$AUX/reload.log" || log "reload FAILED"; } | grep "^{" >> "$res" || true
fi

if [[ "${PEER:-1}" == 1 ]]; then
  log "safetensors peer"
  python3 bench/peers.py "$m4b" hot 1 > /dev/null  # warm-up, also warms the page cache
  python3 bench/peers.py "$m4b" hot "$RUNS_HOT" | sed 's/^{/{"kind":"peer",/' >> "$res"
  python3 bench/peers.py "$m4b" cold "$RUNS_COLD" | sed 's/^{/{"kind":"peer",/' >> "$res"
fi

if [[ $VERIFY == 1 ]]; then
  log "verify runs"
  vlog="$AUX/verify.log"; : > "$vlog"
  v() { if $hoist load --log-level warn --verify "$@" >> "$vlog" 2>&1; then echo "PASS $*" >> "$OUT/verify.txt"; else echo "FAIL $*" >> "$OUT/verify.txt"; fi; }
  : > "$OUT/verify.txt"
  v --model "$m4b"
  for r in 0 1; do v --model "$m4b" --tp 2 --rank $r; done
  for r in 0 1 2 3; do v --model "$m4b" --tp 4 --rank $r; done
  ds="$MODELS/deepseek-v3-small"
  [[ -f "$ds/config.json" ]] || $build/tools/hoist-mkckpt --family deepseek-v3 --preset deepseek-v3-small --out "$ds" --seed 3 > /dev/null
  for r in 0 1; do v --model "$ds" --ep 2 --rank $r; done
  cat "$OUT/verify.txt"
fi

log "timeline (tp1 hot) and mpirun -np 2 tp 2 on the one GPU with every report"
warm "$m4b"
[[ "${ONLY_SERVE:-0}" == 1 ]] || $hoist load --model "$m4b" --log-level warn --timeline "$OUT/timeline-tp1-hot.svg" > /dev/null 2>&1 || true
if [[ "${MPI2:-1}" == 1 ]]; then
  mpirun -np 2 $hoist load --topology examples/topologies/example-tp2.yaml --model "$m4b" --verify \
    --log-level warn --report-json "$OUT/mpi2-report.json" --trace "$AUX/mpi2-trace.json" \
    --timeline "$OUT/timeline-mpi2-tp2.svg" --metrics "$AUX/mpi2-metrics.prom" > "$OUT/mpi2-table.txt" 2>&1 \
    && echo "mpirun -np 2 tp2 --verify: PASS" || { echo "mpirun -np 2 tp2: FAIL"; tail -20 "$OUT/mpi2-table.txt"; }
fi

if [[ "${SERVE:-1}" == 1 ]]; then
  log "serve: attach (engine example and Python/torch) and host-cache restore"
  sd=/tmp/hoist-serve-sock; rm -rf "$sd"
  warm "$m4b"
  setsid $hoist serve --model "$m4b" --host-cache --socket-dir "$sd" --log-level warn > "$AUX/serve.log" 2>&1 &
  serve_pid=$!
  for i in $(seq 600); do [[ -S "$sd/rank-0.sock" ]] && break; sleep 0.1; done
  if [[ -S "$sd/rank-0.sock" ]]; then
    for i in $(seq ${RUNS_HOT}); do
      line=$($build/examples/hoist-engine-startup --attach "$sd" 2>&1 | grep -E "^rank 0/" || true)
      echo "$line" >&2
      python3 - "$line" >> "$res" <<'PY'
import json, re, sys
m = re.search(r"weights ([0-9.]+) ms .*max rel err ([0-9.e+-]+) (PASS|FAIL)", sys.argv[1])
if m: print(json.dumps({"kind": "attach_engine", "ms": float(m.group(1)), "err": float(m.group(2)), "ok": m.group(3) == "PASS"}))
PY
    done
    if [[ -d $build/python/pkg ]]; then
      for i in 1 2 3; do PYTHONPATH=$build/python/pkg python3 bench/attach_check.py "$sd/rank-0.sock" "$m4b" >> "$res" || echo "attach_check FAILED" >&2; done
    fi
    for i in $(seq ${RUNS_HOT}); do
      $hoist ctl release --socket "$sd/rank-0.sock" > /dev/null
      line=$($hoist ctl restore --socket "$sd/rank-0.sock")
      echo "$line" >&2
      python3 - "$line" >> "$res" <<'PY'
import json, re, sys
m = re.search(r"restored: .* in ([0-9.]+) s \(([0-9.]+) GiB/s\); DMA ([0-9.]+) s .*allocation ([0-9.]+) ms", sys.argv[1])
if m: print(json.dumps({"kind": "restore", "seconds": float(m.group(1)), "gib_s": float(m.group(2)),
                        "dma_s": float(m.group(3)), "alloc_ms": float(m.group(4))}))
PY
    done
  else
    echo "serve did not start:" >&2; tail -20 "$AUX/serve.log" >&2
  fi
  kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null || true
  [[ -e "$sd/rank-0.sock" ]] && echo "socket left behind after SIGTERM" >&2 || echo "serve stopped, socket removed" >&2
fi

python3 bench/summarize.py "$res" "$OUT/machine.txt" > "$OUT/BENCHMARKS.md"
cat "$OUT/BENCHMARKS.md"
