# Run Y call 3 (branch fill-flush: main + HOIST_FILL_FLUSH, never merged unless it pays; unset =
# main's code). Call 2's hoist-bench-ce found the copy engine at 49.5-49.9 GiB/s beside 16 cores
# copying into memory it never reads, and at 35-36 when they write the ring it reads: so after each
# task the fill writes the slot bytes it wrote back to memory (clwb) or evicts them (clflushopt).
# One binary, A/B by environment (bench/ab.sh, each round against its own ceiling): tp 1 and tp 2
# rank 1 on 16 threads; a --verify load with each mode.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
CASES="--read auto;--tp 2 --rank 1 --cpu-bind none --threads 16"
for k in clwb clflushopt; do
  printf '#!/bin/sh\nHOIST_FILL_FLUSH=%s exec %s "$@"\n' $k $h > /tmp/h-$k; chmod +x /tmp/h-$k
  cat $m/*.safetensors > /dev/null
  /tmp/h-$k load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --verify --no-progress > $A/v-$k.txt 2>&1
  echo "verify $k rc $?: $(grep -i '^verify ' $A/v-$k.txt | head -1)" | tee -a $OUT/verify.txt
  RUNS=5 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="$CASES" \
    bash bench/ab.sh $h /tmp/h-$k $m > $OUT/$k.jsonl 2> $A/$k.err
  python3 bench/summarize_ab.py $OUT/$k.jsonl | tee $OUT/$k.md
  echo "$k: $(( $(date +%s) - t0 )) s"
done
echo "done: $(( $(date +%s) - t0 )) s"
