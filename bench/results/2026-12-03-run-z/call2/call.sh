# Run Z call 2 (main, same tree as call 1, the machine still warm from it): cold again, the three
# sides only (reader, `--read direct`, `--read auto` at the new default depth), two Williams
# squares of three (12 rounds); then 8 more hot rounds of tp 1 and tp 2 rank 1 on 16 threads.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
[[ -x $b/launch/hoist ]] || OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
SQUARES=2 SIDES="direct=--read direct;auto=--read auto" \
  bash bench/cold_square.sh $h $b/bench/hoist-bench-io $m > $OUT/cold.jsonl
python3 bench/summarize_cold.py $OUT/cold.jsonl | tee $OUT/cold.md
echo "cold: $(( $(date +%s) - t0 )) s"
RUNS=8 WARMUP=0 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $h $h $m > $OUT/hot.jsonl 2> $A/hot.err
python3 bench/summarize_ab.py $OUT/hot.jsonl | tee $OUT/hot.md
echo "done: $(( $(date +%s) - t0 )) s"
