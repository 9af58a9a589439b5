# Run O call 6: why a hot packed load's compressed bytes cross slower than the original's:
# read modes, threads, slot sizes, and one report + timeline of each.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models
OUT=/tmp/aux-build AUX=/tmp/aux-build BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $OUT/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
grep -E 'FileHugePages|^Cached' /proc/meminfo
for d in $m $m-packed; do cat $d/*.safetensors $d/*.bin > /dev/null 2>&1; done
grep -E 'FileHugePages|^Cached' /proc/meminfo
$h load --model $m-packed --log-level info --no-progress --report-json $OUT/r-packed.json --timeline $OUT/t-packed.svg > $OUT/l-packed.log 2>&1
$h load --model $m --log-level info --no-progress --report-json $OUT/r-orig.json --timeline $OUT/t-orig.svg > $OUT/l-orig.log 2>&1
RUNS=3 CASES="--read auto;--read buffered;--read mmap;--read auto --threads 32;--read auto --slot-mib 32;--read auto --slots 8;--read auto --slot-mib 4" bash bench/ab.sh $h $h $m-packed > $OUT/sweep-packed.jsonl 2> $OUT/sweep.err
RUNS=3 CASES="--read auto;--read buffered" bash bench/ab.sh $h $h $m > $OUT/sweep-orig.jsonl 2>> $OUT/sweep.err
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/sweep-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/sweep-orig.jsonl $g
grep -E "fill threads|ring" $OUT/l-packed.log $OUT/l-orig.log | head
echo "done: $(( $(date +%s) - t0 )) s"
