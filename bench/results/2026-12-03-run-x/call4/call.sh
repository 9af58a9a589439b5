# Run X call 4 (branch crew-spin, never merged): why was the fill crew slower? The tree is main
# plus the crew (7f42753) with an experimental switch: HOIST_CREW_SPIN=1 has the idle crew threads
# spin with sched_yield instead of sleeping on a futex (so no 16-thread wake-up at the fill's
# start). Both against main (old-src/, c53e566), alternated by bench/ab.sh, each round against
# its own ceiling: first the spinning crew, then the sleeping one.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
ob=/tmp/hb-old
( source tools/env.sh
  cmake -S old-src -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/ocmake.log 2>&1 && ninja -C $ob -j6 hoist > $A/obuild.log 2>&1 ) &
oldpid=$!
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait $oldpid
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
[[ -x $ob/launch/hoist ]] || { tail -20 $A/ocmake.log $A/obuild.log; exit 1; }
printf '#!/bin/sh\nHOIST_CREW_SPIN=1 exec %s "$@"\n' $h > /tmp/hoist-spin; chmod +x /tmp/hoist-spin
CASES="--tp 2 --rank 1 --cpu-bind none --threads 16;--read auto"
RUNS=5 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="$CASES" \
  bash bench/ab.sh $ob/launch/hoist /tmp/hoist-spin $m > $OUT/spin.jsonl 2> $A/spin.err
python3 bench/summarize_ab.py $OUT/spin.jsonl | tee $OUT/spin.md
echo "spin: $(( $(date +%s) - t0 )) s"
RUNS=5 CEILING_BIN=$b/bench/hoist-bench-h2d CASES="$CASES" \
  bash bench/ab.sh $ob/launch/hoist $h $m > $OUT/sleep.jsonl 2> $A/sleep.err
python3 bench/summarize_ab.py $OUT/sleep.jsonl | tee $OUT/sleep.md
echo "sleep: $(( $(date +%s) - t0 )) s"
for hh in $ob/launch/hoist /tmp/hoist-spin $h; do
  cat $m/*.safetensors > /dev/null
  $hh load --model $m --tp 2 --rank 1 --cpu-bind none --threads 16 --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
  python3 bench/head_tail.py /tmp/tr.json "$hh t16" >> $OUT/head_tail.jsonl
done
echo "done: $(( $(date +%s) - t0 )) s"
