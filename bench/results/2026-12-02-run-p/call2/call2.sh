# Run P call 2 (tree 27722b9): where a hot packed load's copy engine idles (bench/gaps.py on the
# traces, with the new submit lane), fill threads 8/12/16, GPU clocks sampled during the loads,
# the codec's decode rate alone.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models
OUT=/tmp/aux-build AUX=/tmp/aux-build BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $OUT/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw,utilization.gpu --format=csv,noheader -lms 20 > $OUT/clocks.csv 2>&1 &
smi=$!
mkdir -p /tmp/tr/p /tmp/tr/o
TRACE_DIR=/tmp/tr/p RUNS=4 CASES="--read auto;--read auto --threads 8;--read auto --threads 12;--tp 2 --rank 1;--tp 2 --rank 1 --threads 8" bash bench/ab.sh $h $h $m-packed > $OUT/ab-packed.jsonl 2> $OUT/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
TRACE_DIR=/tmp/tr/o RUNS=3 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $h $h $m > $OUT/ab-orig.jsonl 2>> $OUT/ab.err
kill $smi
echo "ab orig: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-orig.jsonl $g
for f in /tmp/tr/p/*.json /tmp/tr/o/*.json; do l=$(basename $(dirname $f))/$(basename $f .json); python3 bench/gaps.py $f $l; python3 bench/lanes.py $f $l; done > $OUT/gaps.jsonl 2>&1
grep '"gaps"' $OUT/gaps.jsonl
tar -czf $OUT/traces.tgz -C /tmp tr
$b/bench/hoist-bench-codec --model $m --runs 3 --sub-streams 1024 > $OUT/codec.jsonl 2> $OUT/codec.err; tail -3 $OUT/codec.jsonl | cut -c1-400
awk -F, '{print $2, $4}' $OUT/clocks.csv | sort | uniq -c | sort -rn | head -8
echo "done: $(( $(date +%s) - t0 )) s"
