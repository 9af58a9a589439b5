# Run Z call 1 (main, 787a32c+: read_depth_mib unset = 2048 for a rank alone on its node): issue
# 17's four items side by side in one call.
# 1. Hot: tp 1 and tp 2 rank 1 on 16 threads, 8 runs each, each round against its own pinned-H2D
#    ceiling (bench/ab.sh, one build on both sides).
# 2. Restore: the daemon with a host cache, 0, 0.05 and 0.5 s after `ctl release`, 5 rounds.
# 3. Cold (bench/cold_square.sh, two Williams squares, page cache dropped before every run): the
#    O_DIRECT reader (1 GiB in flight), `--read direct` and `--read auto` at the new default depth,
#    and `--read direct --read-depth-mib 1024` (the old default).
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
lscpu > $OUT/cpu.txt; nvidia-smi -q | grep -iE "product name|serial|bus id|max clocks" -A0 > $OUT/gpu.txt
RUNS=8 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1 --cpu-bind none --threads 16" \
  bash bench/ab.sh $h $h $m > $OUT/hot.jsonl 2> $A/hot.err
python3 bench/summarize_ab.py $OUT/hot.jsonl | tee $OUT/hot.md
echo "hot: $(( $(date +%s) - t0 )) s"
CEILING_BIN=$b/bench/hoist-bench-h2d bash bench/restore_gaps.sh $h $m $OUT
cat $OUT/restore_ceiling.jsonl
cut -c1-160 $OUT/restore.txt
echo "restore: $(( $(date +%s) - t0 )) s"
SQUARES=2 SIDES="direct=--read direct;auto=--read auto;direct1024=--read direct --read-depth-mib 1024" \
  bash bench/cold_square.sh $h $b/bench/hoist-bench-io $m | tee $OUT/cold.jsonl | cut -c1-120
python3 bench/summarize_cold.py $OUT/cold.jsonl | tee $OUT/cold.md
echo "done: $(( $(date +%s) - t0 )) s"
