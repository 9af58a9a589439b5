# Run Y call 4 (main): is 4 x 16 MiB still the ring for a strided tp 2 rank on 16 threads? One
# binary on both sides of bench/ab.sh (8 runs a case, each round against its own ceiling): the
# default ring against 3 and 6 slots of 16 MiB, 8 x 8 MiB and 3 x 24 MiB; tp 1 beside them.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
t="--tp 2 --rank 1 --cpu-bind none --threads 16"
CASES="$t;$t --slots 3;$t --slots 6;$t --slots 8 --slot-mib 8;$t --slots 3 --slot-mib 24;--read auto"
RUNS=4 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="$CASES" bash bench/ab.sh $h $h $m > $OUT/ring.jsonl 2> $A/ring.err
python3 bench/summarize_ab.py $OUT/ring.jsonl | tee $OUT/ring.md
tail -3 $A/ring.err
echo "done: $(( $(date +%s) - t0 )) s"
