# Run R call 3 (tree 7f8138c, one build): cold loads, auto against direct, original and packed
# (page cache dropped before every run, 3 rounds, alternating); hot tp 1 original and packed
# (6 each) beside them; daemon restore 2 s after each release (5 each, then one verified).
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux3; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
RUNS=6 CASES="--read auto" bash bench/ab.sh $h $h $m > $OUT/hot-orig.jsonl 2> $A/ab.err
RUNS=6 CASES="--read auto" bash bench/ab.sh $h $h $m-packed > $OUT/hot-packed.jsonl 2>> $A/ab.err
echo "hot: $(( $(date +%s) - t0 )) s"
TEMP=cold RUNS=3 CASES="--read auto;--read direct" bash bench/ab.sh $h $h $m > $OUT/cold-orig.jsonl 2>> $A/ab.err
echo "cold orig: $(( $(date +%s) - t0 )) s"
TEMP=cold RUNS=3 CASES="--read auto;--read direct" bash bench/ab.sh $h $h $m-packed > $OUT/cold-packed.jsonl 2>> $A/ab.err
echo "cold packed: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
for f in hot-orig hot-packed cold-orig cold-packed; do echo "== $f"; python3 bench/summarize_ab.py $OUT/$f.jsonl $g; done
timeout 150 env BUILD_DIR=$b STAGES="restore" RESTORE_GAP=2 RUNS_HOT=5 HF=0 PACK=1 MODELS=$M OUT=$A AUX=$A bash bench/packed.sh > $A/stages.log 2>&1
echo "restore rc $?: $(( $(date +%s) - t0 )) s"
cp $A/packed.jsonl $OUT/packed.jsonl
grep -h '"restore' $OUT/packed.jsonl | cut -c1-300
echo "done: $(( $(date +%s) - t0 )) s"
