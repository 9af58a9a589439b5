# Run R call 1 (tree 4739415; OLD = 40c072a): spans as plain data (5d48131) and a packed load's
# copies ahead of the decoder's making (4739415). Hot A/B: packed tp 1 and tp 2 rank 1, original
# tp 1 and tp 2 rank 1 (6 runs each, alternating); traces of the first round; ceilings, daemon
# restore, --verify. <= 8 files.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux1; mkdir -p $A
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p /tmp/tr/p /tmp/tr/o
TRACE_DIR=/tmp/tr/p RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
TRACE_DIR=/tmp/tr/o RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m > $OUT/ab-orig.jsonl 2>> $A/ab.err
echo "ab orig: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-orig.jsonl $g
python3 - $OUT/ab-packed.jsonl $OUT/ab-orig.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
  for l in open(f):
    r = json.loads(l)
    if r.get("failed"): continue
    st, ph = r["starts"], r["phases"]
    print(f[-11:-6], r["build"], r["case"][:14], "total", round(r["ms"], 1), "tail", round(r["ms"] - st["staging_free"] - ph["staging_free"], 2))
PY
for f in /tmp/tr/p/*.json /tmp/tr/o/*.json; do l=$(basename $(dirname $f))/$(basename $f .json); python3 bench/gaps.py $f $l; done > $A/gaps.jsonl 2>&1
cut -c1-400 $A/gaps.jsonl; cp $A/gaps.jsonl /tmp/tr/
tar -czf $OUT/traces.tgz -C /tmp tr
echo "traces: $(( $(date +%s) - t0 )) s"
timeout 170 env BUILD_DIR=$b STAGES="ceilings restore verify" RUNS_HOT=5 HF=0 PACK=1 MODELS=$M OUT=$A AUX=$A bash bench/packed.sh > $A/stages.log 2>&1
echo "stages rc $?: $(( $(date +%s) - t0 )) s"
cp $A/packed.jsonl $OUT/packed.jsonl; tail -40 $A/stages.log > $OUT/stages-tail.txt
cat $A/verify.txt > $OUT/checks.txt; cat $OUT/checks.txt
grep -h '"restore"\|h2d_ceiling' $OUT/packed.jsonl | cut -c1-300
echo "done: $(( $(date +%s) - t0 )) s"
