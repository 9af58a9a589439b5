# Run W call 1: (a) A/B of bc7ed19 (old-src/, exported beside the tree) against this tree (the
# sources opened beside the arena), alternated run by run, each round against its own ceiling;
# (b) fill threads against the engine's rate, on this tree's build. Each round: the pinned-H2D
# ceiling, then every case, the page cache read again before each load.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
if [[ ! -x $b/launch/hoist || ! -d $M/qwen3-4b ]]; then
  OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
else
  cmake --build $b > $A/rebuild.log 2>&1
fi
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist; ob=/tmp/hb-old
if [[ ! -x $ob/launch/hoist ]]; then
  cmake -S old-src -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/ocmake.log 2>&1 && ninja -C $ob hoist > $A/obuild.log 2>&1 \
    || tail -20 $A/ocmake.log $A/obuild.log
fi
echo "old build: $(( $(date +%s) - t0 )) s"
RUNS=6 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="--read auto;--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $ob/launch/hoist $h $m > $OUT/ab.jsonl 2> $A/ab.err
python3 bench/summarize_ab.py $OUT/ab.jsonl | tee $OUT/ab.md
echo "ab: $(( $(date +%s) - t0 )) s"
one() {  # round, label, args...
  local round=$1 label=$2; shift 2
  cat $m/*.safetensors > /dev/null
  $h load --model $m --log-level error --no-progress --report-json /tmp/r.json "$@" > /dev/null 2>&1
  python3 - "$round" "$label" <<'PY' >> $OUT/rounds.jsonl
import json, sys
r = json.load(open("/tmp/r.json"))["ranks"][0]; p = r["phases"]; t0 = p["total"]["start_s"]
ph = {k: [round((p[k]["start_s"] - t0) * 1e3, 3), round(p[k]["seconds"] * 1e3, 3)] for k in
      ("bind", "arena_alloc", "setup", "staging_alloc", "read", "h2d", "drain", "staging_free") if k in p}
print(json.dumps({"round": int(sys.argv[1]), "label": sys.argv[2], "ok": r["ok"], "ms": p["total"]["seconds"] * 1e3,
  "bytes": r["bytes_h2d"], "limit": r["limit"], "h2d_busy": p["h2d"]["busy_s"] / max(p["h2d"]["seconds"], 1e-9),
  "threads": r["fill_threads"], "phases": ph}))
PY
}
cases=(
 "tp1-default|"
 "tp1-t10|--cpu-bind none --threads 10"
 "tp1-t12|--cpu-bind none --threads 12"
 "tp1-t14|--cpu-bind none --threads 14"
 "tp2r1-default|--tp 2 --rank 1"
 "tp2r1-t10|--tp 2 --rank 1 --cpu-bind none --threads 10"
 "tp2r1-t12|--tp 2 --rank 1 --cpu-bind none --threads 12"
 "tp2r1-t14|--tp 2 --rank 1 --cpu-bind none --threads 14"
 "tp2r1-t16|--tp 2 --rank 1 --cpu-bind none --threads 16"
)
for i in 1 2 3 4 5; do
  $b/bench/hoist-bench-h2d 8 3 | python3 -c "import json,sys;d=json.loads(sys.stdin.read().strip().splitlines()[-1]);print(json.dumps({'round':$i,'label':'ceiling','gib_s':d['gib_s']}))" >> $OUT/rounds.jsonl
  for c in "${cases[@]}"; do IFS='|' read -r label args <<< "$c"; one $i $label $args; done
  echo "round $i: $(( $(date +%s) - t0 )) s"
done
cat $m/*.safetensors > /dev/null
for a in "--tp 2 --rank 1 --cpu-bind none --threads 16" "--tp 2 --rank 1" ""; do
  for i in 1 2 3; do
    cat $m/*.safetensors > /dev/null
    $h load --model $m $a --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
    python3 bench/head_tail.py /tmp/tr.json "[$a] $i" >> $OUT/head_tail.jsonl
  done
done
cat $m/*.safetensors > /dev/null
$h load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --log-level error --no-progress --timeline $OUT/tp2r1-t16.svg > /dev/null 2>&1
python3 bench/results/2026-12-03-run-w/sweep_summary.py $OUT/rounds.jsonl | tee $OUT/summary.txt
echo "done: $(( $(date +%s) - t0 )) s"
