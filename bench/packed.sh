#!/usr/bin/env bash
# Issue 15's figures in one call on the GPU box: packed (codec-compressed, docs/PACKED.md) copies
# of checkpoints loaded side by side with their originals, runs alternating original / packed:
#   - sizes per checkpoint (original and packed bytes), the codec's GPU decode rate;
#   - the pinned-H2D ceiling and the O_DIRECT rate (AIO reader) of this call;
#   - tp 1 hot and cold (auto and direct) loads: effective GiB/s of original bytes;
#   - --verify of packed loads (tp 1, 2, 4; DeepSeek FP8 ep 2) and a byte comparison of dumps;
#   - daemon restore from a host cache (packed: compressed cache decoded on the GPU);
#   - on 2 GPUs: mpirun -np 2 tp 2, per rank.
#   bench/packed.sh   (env: RUNS_HOT=5 RUNS_COLD=3 HF=1 (make and use the transformers checkpoint),
#                      FP8=1 (also block-quantized FP8 checkpoints: DeepSeek-V3 shape, quantized HF),
#                      ONLY=qwen3-4b-hf-fp8q,... (measure only these checkpoints),
#                      MODELS=/tmp/hoist-models BUILD_DIR=build-bench OUT AUX, RESTORE_GAP=seconds
#                      between ctl release and ctl restore (default 0),
#                      STAGES="env readers tests codec ceilings hot cold verify restore tp2 ab": a call under the
#                      device's 10-minute limit runs some of them; the build and the packed
#                      models are made once and kept (STAGES="" makes only those: unset
#                      runs the default list); ab needs OLD_SRC, an older tree, and takes
#                      AB_CASES (hot) and AB_COLD_CASES (cold, RUNS_COLD each))
# Writes packed.jsonl and PACKED.md under $OUT.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/hoist-bench-out}"; mkdir -p "$OUT"
AUX="${AUX:-/tmp/hoist-bench-aux}"; mkdir -p "$AUX"
RUNS_HOT="${RUNS_HOT:-5}"; RUNS_COLD="${RUNS_COLD:-3}"
MODELS="${MODELS:-/tmp/hoist-models}"
build="${BUILD_DIR:-build-bench}"
res="$OUT/packed.jsonl"; : > "$res"
STAGES="${STAGES-tests codec ceilings hot cold verify restore tp2}"
stage() { [[ " $STAGES " == *" $1 "* ]]; }
log() { echo "[packed $(date +%T)] $*" >&2; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
warm() { cat "$1"/*.safetensors "$1"/*.bin > /dev/null 2>&1 || true; }

OUT="$AUX/bench-build" AUX="$AUX" BUILD_ONLY=1 BUILD_DIR="$build" MODELS="$MODELS" bash bench/bench.sh
source tools/env.sh
hoist=$build/launch/hoist
m4b="$MODELS/qwen3-4b"; ds="$MODELS/deepseek-v3-small"; hf="$MODELS/qwen3-4b-hf"
models=("$m4b")
if [[ "${HF:-1}" == 1 ]]; then
  if [[ ! -f "$hf/config.json" ]]; then
    log "transformers: random-initialised Qwen3 4B, save_pretrained"
    python3 bench/make_hf_qwen3.py "$hf" 2>&1 | tail -2 >&2 || log "transformers checkpoint FAILED"
  fi
  [[ -f "$hf/config.json" ]] && models+=("$hf")
fi
# FP8=1: FP8 checkpoints too (issue 43), in folders of their own so that copies made before FP8
# was coded (uniform FP8 bytes, stored) are not reused: hoist-mkckpt's DeepSeek-V3 shape
# (block-quantized E4M3), and the transformers checkpoint block-quantized (bench/fp8_fixture.py).
if [[ "${FP8:-0}" == 1 ]]; then
  dsq="$MODELS/deepseek-v3-small-fp8q"; hfq="$MODELS/qwen3-4b-hf-fp8q"
  [[ -f "$dsq/config.json" ]] || $build/tools/hoist-mkckpt --preset deepseek-v3-small --out "$dsq" \
    --seed 3 > /dev/null
  models+=("$dsq")
  if [[ -f "$hf/config.json" && ! -f "$hfq/config.json" ]]; then
    python3 bench/fp8_fixture.py quantize "$hf" "$hfq" || log "fp8_fixture quantize FAILED"
  fi
  [[ -f "$hfq/config.json" ]] && models+=("$hfq")
fi
# ONLY="name,...": measure only these checkpoints (basenames; all of them are still made).
if [[ -n "${ONLY:-}" ]]; then
  kept=(); for m in "${models[@]}"; do [[ ",$ONLY," == *",$(basename "$m"),"* ]] && kept+=("$m"); done
  models=("${kept[@]}")
fi

pack() {  # model: writes model-packed once (again when this hoist refuses it: an older format)
  local m=$1 p="$1-packed"
  [[ -f "$p/hoist-packed.json" ]] && $hoist plan --model "$p" > /dev/null 2>&1 && return 0
  rm -rf "$p"
  log "pack $m"
  local t0=$(date +%s.%N)
  $hoist pack --model "$m" --out "$p" --tp-multiple 8 > "$AUX/pack.log" 2>&1 || { tail -5 "$AUX/pack.log" >&2; return 1; }
  python3 - "$m" "$p" "$(date +%s.%N)" "$t0" >> "$res" <<'PY'
import glob, json, os, sys
m, p, t1, t0 = sys.argv[1:5]
size = lambda pat: sum(os.path.getsize(f) for f in glob.glob(pat))
print(json.dumps({"kind": "pack", "model": os.path.basename(m), "original": size(m + "/*.safetensors"),
                  "packed": size(p + "/*.bin"), "seconds": float(t1) - float(t0)}))
PY
}
fhp() { echo "$1: $(grep -E 'FileHugePages|^Cached' /proc/meminfo | tr -s ' ' | tr '\n' ' ')" >> "$OUT/env.txt"; }
if stage env; then
  { lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node|L3'; uname -r; df -T "$MODELS" | tail -1
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  } >> "$OUT/env.txt" 2>&1 || true
  fhp "models made"
fi
[[ "${PACK:-1}" == 1 ]] && for m in "${models[@]}" "$ds"; do pack "$m"; done
stage env && fhp "packed"

# Page-cache copy rate per file set: one 16-thread buffered reader (hoist-bench-io), original
# against packed files, alternating; then the packed files' page cache dropped and read back
# (readahead's folios instead of the writer's) and measured again.
if stage readers; then
  log "page-cache readers: original and packed files"
  reader() {  # label dir
    mapfile -t shards < <(ls "$2"/*.safetensors "$2"/*.bin 2>/dev/null)
    warm "$2"; $build/bench/hoist-bench-io --buffered --threads 16 "${shards[@]}" \
      | sed "s|^{|{\"kind\":\"host_copy\",\"label\":\"$1\",|" >> "$res" || true
  }
  for m in "${models[@]}"; do
    for i in 1 2 3; do reader "$(basename "$m")/original" "$m"; reader "$(basename "$m")/packed" "$m-packed"; done
  done
fi

if stage tests; then
  log "CUDA tests: the batched decoder, the codec kernel, the CUDA pipeline"
  tb=/tmp/hoist-test-build
  cmake -S . -B $tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH="$root/.gpu-deps/include" > "$AUX/tcmake.log" 2>&1
  ninja -C $tb transport_tests codec_tests > "$AUX/tbuild.log" 2>&1 || grep -A5 error "$AUX/tbuild.log" | head -30 >&2
  for t in "transport_tests --gtest_filter=*Cuda*:*Decoder*:Packed*" "codec_tests --gtest_filter=CodecGpu*"; do
    # shellcheck disable=SC2086
    $tb/tests/$t > "$AUX/t.log" 2>&1 && echo "PASS $t" >> "$OUT/tests.txt" || { echo "FAIL $t" >> "$OUT/tests.txt"; grep -E "Failure|FAILED|error" -A3 "$AUX/t.log" | head -30 >> "$OUT/tests.txt"; }
    grep -E "^\[  (PASSED|SKIPPED|FAILED)" "$AUX/t.log" >> "$OUT/tests.txt" || true
  done
  cat "$OUT/tests.txt" >&2
fi

stage ceilings && log "pinned H2D ceiling"
stage ceilings && for i in 1 2; do $build/bench/hoist-bench-h2d 8 7 | sed 's/^{/{"kind":"h2d_ceiling",/' >> "$res"; done
for m in "${models[@]}"; do
  b=$(basename "$m")
  stage ceilings && for f in "$m" "$m-packed"; do
    mapfile -t shards < <(ls "$f"/*.safetensors "$f"/*.bin 2>/dev/null)
    drop; $build/bench/hoist-bench-io --threads 16 --chunk-mib 4 --depth 16 "${shards[@]}" 2>/dev/null \
      | sed "s/^{/{\"kind\":\"io_ceiling\",\"model\":\"$(basename "$f")\",/" >> "$res" || true
  done
  for ss in ${CODEC_SUB_STREAMS:-1024}; do  # 1024: what hoist pack writes
    stage codec && [[ -x $build/bench/hoist-bench-codec ]] && $build/bench/hoist-bench-codec --model "$m" --runs 3 \
      --sub-streams "$ss" | sed "s/^{/{\"model\":\"$b\",/" >> "$res" 2> "$AUX/codec.log" || true
  done
done

load() {  # label temp model hoist-args...
  local label=$1 temp=$2 model=$3; shift 3
  if [[ $temp == cold ]]; then drop; else warm "$model"; fi
  local rj="$AUX/r.json"
  if ! $hoist load --model "$model" --log-level warn --no-progress --report-json "$rj" "$@" > "$AUX/last.log" 2>&1; then
    log "FAILED: $label $temp $model $*"; tail -5 "$AUX/last.log" >&2
    echo "{\"kind\":\"load\",\"label\":\"$label\",\"temp\":\"$temp\",\"failed\":true}" >> "$res"; return 0
  fi
  python3 - "$rj" "$label" "$temp" >> "$res" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in r["ranks"] if sys.argv[2] != "warmup" else []:
    ph = k["phases"]
    print(json.dumps({"kind": "load", "label": sys.argv[2], "temp": sys.argv[3], "rank": k["rank"],
                      "payload": ph["total"]["bytes"], "total_s": ph["total"]["seconds"],
                      "bytes_read": k["bytes_read"], "bytes_h2d": k["bytes_h2d"],
                      "resident": k.get("bytes_resident_at_start", 0),
                      "read_busy_s": ph.get("read", {}).get("busy_s", 0),
                      "threads": k.get("fill_threads"), "slots": k.get("staging_slots"),
                      "deep": k.get("deep_read"),
                      "phases": {n: p["seconds"] for n, p in ph.items()},
                      "starts": {n: p.get("start_s", 0) - ph["total"].get("start_s", 0) for n, p in ph.items()},
                      "wall_s": r["wall_s"]}))
PY
}

for m in "${models[@]}"; do
  b=$(basename "$m")
  if stage hot; then
    log "$b: tp1 hot, original and packed alternating (x $RUNS_HOT)"
    load warmup hot "$m" > /dev/null; load warmup hot "$m-packed" > /dev/null
    for i in $(seq "$RUNS_HOT"); do
      load "$b/original" hot "$m"; load "$b/packed" hot "$m-packed"
    done
    # Traced loads (each TRACED case, ';'-separated hoist options): where the device lanes spent
    # their time (bench/lanes.py).
    IFS=';' read -r -a traced <<< "${TRACED:-;--tp 2 --rank 1}"
    for c in "${traced[@]}"; do
      for which in original packed; do
        mm=$m; [[ $which == packed ]] && mm="$m-packed"
        # shellcheck disable=SC2086
        load "$b/$which-traced $c" hot "$mm" --trace "$AUX/trace.json" $c
        python3 bench/lanes.py "$AUX/trace.json" "$b/$which $c" >> "$res" || true
      done
    done
  fi
  stage cold || continue
  # The disk's rate drifts by tens of percent within a call, and a load right after the deep
  # O_DIRECT reader runs 10-45% slower than one right after a load (the 2026-12-01 measurements: the disk's burst
  # allowance). So every round runs the reader(s) first, then one unrecorded cold load to settle
  # the disk, then each mode on both copies, in an order rotated every round and reversed every
  # other round: every recorded load follows a load, and no mode always gets the same predecessor
  # or the same stretch of the disk. COLD_MODES: ';'-separated, each a read mode and optionally
  # more `hoist load` options.
  log "$b: tp1 cold, ${COLD_MODES:-auto;direct} interleaved with the O_DIRECT reader (x $RUNS_COLD)"
  mapfile -t oshards < <(ls "$m"/*.safetensors)
  items=()
  IFS=';' read -r -a cmodes <<< "${COLD_MODES:-auto;direct}"
  for mode in "${cmodes[@]}"; do
    items+=("original $mode"); [[ "${PACK:-1}" == 1 ]] && items+=("packed $mode")
  done
  # READERS: ';'-separated hoist-bench-io option sets, each run first in every round.
  IFS=';' read -r -a readers <<< "${READERS:---threads 16 --chunk-mib 4 --depth 16}"
  for i in $(seq "$RUNS_COLD"); do
    for rd in "${readers[@]}"; do
      for which in original packed; do  # the packed files too: the disk may read them slower
        [[ $which == packed && "${PACK:-1}" != 1 ]] && continue
        files=("${oshards[@]}"); [[ $which == packed ]] && files=("$m"-packed/*.bin)
        # shellcheck disable=SC2086
        drop; $build/bench/hoist-bench-io $rd "${files[@]}" 2>/dev/null \
          | sed "s|^{|{\"kind\":\"io_round\",\"model\":\"$b\",\"files\":\"$which\",\"round\":$i,\"reader\":\"$rd\",|" >> "$res" || true
      done
    done
    drop; $hoist load --model "$m" --log-level warn --no-progress > /dev/null 2>&1 || true  # settle
    n=${#items[@]}
    for j in $(seq 0 $((n - 1))); do  # round i starts at item i-1; even rounds run backwards
      k=$(( i % 2 == 1 ? (j + i - 1) % n : (n + (i - 1 - j) % n) % n ))
      read -r which mode <<< "${items[$k]}"
      mm=$m; [[ $which == packed ]] && mm="$m-packed"
      # shellcheck disable=SC2086
      load "$b/$which-$mode" cold "$mm" --read $mode
    done
  done
done

# Geometry and where the time goes: hot tp 1 loads of the packed copy (and the original) under
# each SWEEP entry (hoist load options), alternating; the last report per case kept
# under $AUX; packed.jsonl has every run's phases with their start times.
if stage sweep; then
  IFS=';' read -r -a cases <<< "${SWEEP:---slots 4 --slot-mib 8;--slots 8 --slot-mib 8;--slots 4 --slot-mib 32;--slots 8 --slot-mib 16}"
  for i in $(seq "$RUNS_HOT"); do
    for c in "${cases[@]}"; do
      tag=$(echo "$c" | tr -d ' -' | tr -c 'a-z0-9\n' '_')
      # shellcheck disable=SC2086
      [[ "${SWEEP_PACKED:-1}" == 1 ]] && { load "sweep/packed $c" hot "$m4b-packed" $c; cp "$AUX/r.json" "$AUX/sweep-packed-$tag.json"; }
      # shellcheck disable=SC2086
      load "sweep/original $c" hot "$m4b" $c; cp "$AUX/r.json" "$AUX/sweep-original-$tag.json"
    done
  done
fi
# A/B of this tree against OLD_SRC (an exported older tree): `hoist load` of the original
# alternated build by build (bench/ab.sh), AB_CASES ';'-separated.
# A/B: OLD_SRC's build against this one; without OLD_SRC, this build against itself (the cases
# then compare options, with twice the runs each).
if stage ab; then
  ohoist=$hoist
  if [[ -n "${OLD_SRC:-}" ]]; then
    log "A/B: building $OLD_SRC"
    ob=/tmp/hb-old; ohoist=$ob/launch/hoist
    cmake -S "$OLD_SRC" -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
      -DCMAKE_INCLUDE_PATH="$root/.gpu-deps/include" > "$AUX/ocmake.log" 2>&1 && ninja -C $ob hoist > "$AUX/obuild.log" 2>&1 \
      || { tail -20 "$AUX/obuild.log" "$AUX/ocmake.log" >&2; }
  fi
  for m in "${models[@]}"; do
    RUNS=$RUNS_HOT CASES="${AB_CASES:---read auto;--tp 2 --rank 1}" bash bench/ab.sh "$ohoist" "$hoist" "$m" \
      | sed "s/^{/{\"model\":\"$(basename "$m")\",/" >> "$res" || true
    [[ -n "${AB_COLD_CASES:-}" ]] && RUNS=$RUNS_COLD TEMP=cold CASES="$AB_COLD_CASES" bash bench/ab.sh "$ohoist" "$hoist" "$m" \
      | sed "s/^{/{\"model\":\"$(basename "$m")\",/" >> "$res" || true
  done
fi
if stage ring; then
  log "ring DMA ceilings: restore-like pieces from 8 GiB of distinct pinned memory"
  IFS=';' read -r -a geos <<< "${RING_GEOMETRIES:-4 8;1024 8;128 64;32 256;1 8192}"
  for geo in "${geos[@]}"; do
    # shellcheck disable=SC2086
    for fill in ${RING_FILLS:-cpu}; do
      $build/bench/hoist-bench-ring 8 3 $geo ${RING_KINDS:-register-thp,mallochost} $fill >> "$res" || true
    done
  done
fi

if stage verify; then
log "verify packed loads, and dumps of original and packed compared byte for byte"
: > "$OUT/verify.txt"
v() { if $hoist load --log-level warn --no-progress --verify "$@" >> "$AUX/verify.log" 2>&1; then echo "PASS $*" >> "$OUT/verify.txt"; else echo "FAIL $*" >> "$OUT/verify.txt"; fi; }
v --model "$m4b-packed"
v --model "$m4b-packed" --tp 2 --rank 1
[[ -f "$hf-packed/hoist-packed.json" ]] && v --model "$hf-packed" --tp 4 --rank 3
for r in 0 1; do v --model "$ds-packed" --ep 2 --rank $r; done
for r in 0 1; do
  rm -rf "$AUX/d-o" "$AUX/d-p"
  $hoist load --model "$m4b" --tp 2 --rank $r --dump "$AUX/d-o" --log-level warn --no-progress > /dev/null 2>&1
  $hoist load --model "$m4b-packed" --tp 2 --rank $r --dump "$AUX/d-p" --log-level warn --no-progress > /dev/null 2>&1
  if cmp -s "$AUX/d-o/rank-$r.safetensors" "$AUX/d-p/rank-$r.safetensors"; then
    echo "PASS dump tp2 rank $r: packed == original" >> "$OUT/verify.txt"
  else
    echo "FAIL dump tp2 rank $r: packed != original" >> "$OUT/verify.txt"
  fi
done
cat "$OUT/verify.txt" >&2
fi

restore_runs() {  # label model
  local label=$1 model=$2 sd=/tmp/hoist-packed-sock
  rm -rf "$sd"; warm "$model"
  setsid $hoist serve --model "$model" --host-cache --socket-dir "$sd" --log-level warn > "$AUX/serve.log" 2>&1 &
  local pid=$!
  for i in $(seq 600); do [[ -S "$sd/rank-0.sock" ]] && break; sleep 0.1; done
  if [[ -S "$sd/rank-0.sock" ]]; then
    # How much of the daemon's anonymous memory (its pinned host cache) huge pages back, in KiB.
    huge=$(awk '/AnonHugePages/ {s += $2} END {print s + 0}' /proc/$pid/smaps 2>/dev/null || echo -1)
    echo "{\"kind\": \"serve_memory\", \"label\": \"$label\", \"anon_huge_kib\": $huge}" >> "$res"
    for i in $(seq "$RUNS_HOT"); do
      $hoist ctl release --socket "$sd/rank-0.sock" > /dev/null
      sleep "${RESTORE_GAP:-0}"  # seconds between release and restore (device memory just freed)
      line=$($hoist ctl restore --socket "$sd/rank-0.sock" 2>&1 || true); echo "$label: $line" >&2
      python3 - "$label" "$line" >> "$res" <<'PY'
import json, re, sys
m = re.search(r"restored: .* in ([0-9.]+) s \(([0-9.]+) GiB/s\)", sys.argv[2])
if m: print(json.dumps({"kind": "restore", "label": sys.argv[1], "seconds": float(m.group(1)), "gib_s": float(m.group(2)), "line": sys.argv[2]}))
PY
    done
    # Then one restore that the daemon verifies against the checkpoint (not timed with the rest).
    $hoist ctl release --socket "$sd/rank-0.sock" > /dev/null
    line=$($hoist ctl restore --verify --timeout-s 600 --socket "$sd/rank-0.sock" 2>&1 | tr '\n' ' ' || true)
    echo "$label: $line" >&2
    python3 -c 'import json,sys; print(json.dumps({"kind": "restore_verify", "label": sys.argv[1], "pass": "verified: PASS" in sys.argv[2], "line": sys.argv[2]}))' "$label" "$line" >> "$res"
  else
    log "serve did not start ($label)"; tail -5 "$AUX/serve.log" >&2
  fi
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true
}
if stage restore; then
  restore_runs "qwen3-4b/original" "$m4b"
  restore_runs "qwen3-4b/packed" "$m4b-packed"
fi

gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if stage tp2 && [[ $gpus -ge 2 ]]; then
  for m in "${models[@]}"; do
    b=$(basename "$m")
    log "$b: mpirun -np 2 tp 2 hot, original and packed alternating"
    for i in $(seq "$RUNS_HOT"); do
      for which in original packed; do
        mm=$m; [[ $which == packed ]] && mm="$m-packed"
        warm "$mm"
        if mpirun -np 2 $hoist load --model "$mm" --tp 2 --log-level warn --no-progress --report-json "$AUX/r2.json" > "$AUX/mpi.log" 2>&1; then
          python3 - "$AUX/r2.json" "$b/$which-tp2" >> "$res" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in r["ranks"]:
    ph = k["phases"]
    print(json.dumps({"kind": "load", "label": sys.argv[2], "temp": "hot", "rank": k["rank"],
                      "payload": ph["total"]["bytes"], "total_s": ph["total"]["seconds"],
                      "bytes_read": k["bytes_read"], "bytes_h2d": k["bytes_h2d"],
                      "phases": {n: p["seconds"] for n, p in ph.items()}, "wall_s": r["wall_s"]}))
PY
        else
          log "mpirun tp2 $which FAILED"; tail -5 "$AUX/mpi.log" >&2
        fi
      done
    done
  done
  log "host copy ceiling with both ranks copying: two page-cache readers (hoist-bench-io --buffered) at once"
  for m in "${models[@]}"; do
    for f in "$m" "$m-packed"; do
      mapfile -t shards < <(ls "$f"/*.safetensors "$f"/*.bin 2>/dev/null)
      warm "$f"
      for g in 0 1; do $build/bench/hoist-bench-io --buffered --threads 16 "${shards[@]}" \
        | sed "s/^{/{\"kind\":\"host_copy_both\",\"model\":\"$(basename "$f")\",\"reader\":$g,/" >> "$res" & done; wait
    done
  done
  log "pinned H2D with both GPUs copying: hoist-bench-h2d on each GPU at once"
  for g in 0 1; do CUDA_VISIBLE_DEVICES=$g $build/bench/hoist-bench-h2d 8 7 | sed "s/^{/{\"kind\":\"h2d_ceiling_both\",\"gpu\":$g,/" >> "$res" & done; wait
fi

python3 bench/summarize_packed.py "$res" > "$OUT/PACKED.md" || true
cat "$OUT/PACKED.md"
