# Run P call 1 (tree 2d?; OLD = e906c6f): hot A/B of the packed copy and the original,
# old against new (a016767 host-wait-free packed submit, 127224e sampled judge), traces of
# round 1, page-cache readers, verify.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=/tmp/aux-build AUX=/tmp/aux-build BUILD_DIR=$b STAGES="readers" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $OUT/setup.log 2>&1
cp /tmp/aux-build/packed.jsonl $OUT/readers.jsonl
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p $OUT/tp $OUT/to
TRACE_DIR=$OUT/tp RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $OUT/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
TRACE_DIR=$OUT/to RUNS=4 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m > $OUT/ab-orig.jsonl 2>> $OUT/ab.err
echo "ab orig: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-orig.jsonl $g
for f in $OUT/tp/*.json $OUT/to/*.json; do python3 bench/lanes.py $f $(basename $(dirname $f))/$(basename $f .json); done > $OUT/lanes.jsonl
cat $OUT/lanes.jsonl
grep host_copy $OUT/readers.jsonl | python3 -c "
import json,sys
for l in sys.stdin:
  r=json.loads(l); print(r.get('label'), {k:v for k,v in r.items() if k in ('gib_s','seconds','bytes')})"
BUILD_DIR=$b STAGES="verify" HF=0 PACK=1 MODELS=$M OUT=$OUT AUX=/tmp/aux-v bash bench/packed.sh > $OUT/verify.log 2>&1; cat $OUT/verify.txt
echo "done: $(( $(date +%s) - t0 )) s"
