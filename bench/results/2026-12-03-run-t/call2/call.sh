# Run T call 2 (tree d70455f; OLD = 1dd8e94, the same code without the prefault).
# (Exported with bench/prepare-device.sh at d70455f; .old = git archive 1dd8e94 with .gpu-deps
# copied in.) Ran as: cd .bench-src && bash call4.sh
# Hot A/B old vs new, alternating: original tp 1 and tp 2 rank 1 (8 runs each, traces of the
# first round), packed tp 1 and tp 2 rank 1 (5). Ceilings of this call: pinned H2D twice, the
# O_DIRECT reader over each model's files (page cache dropped). Cold A/B: --read auto and
# --read direct, original and packed (2 runs a build, page cache dropped before each).
# Daemon restores (new build) 0, 0.05 and 0.5 s after ctl release, 3 each, original and packed.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux4; mkdir -p $A
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
timeout 120 env BUILD_DIR=$b STAGES="ceilings" HF=0 PACK=1 MODELS=$M OUT=$A AUX=$A bash bench/packed.sh > $A/ceil.log 2>&1
cp $A/packed.jsonl $OUT/ceilings.jsonl
echo "ceilings: $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/tr
TRACE_DIR=/tmp/tr RUNS=8 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m > $OUT/hot-orig.jsonl 2> $A/ab.err
RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/hot-packed.jsonl 2>> $A/ab.err
echo "hot: $(( $(date +%s) - t0 )) s"
TEMP=cold RUNS=2 CASES="--read auto;--read direct" bash bench/ab.sh $old $new $m > $OUT/cold-orig.jsonl 2>> $A/ab.err
echo "cold orig: $(( $(date +%s) - t0 )) s"
TEMP=cold RUNS=2 CASES="--read auto;--read direct" bash bench/ab.sh $old $new $m-packed > $OUT/cold-packed.jsonl 2>> $A/ab.err
echo "cold: $(( $(date +%s) - t0 )) s"
for model in $m $m-packed; do
  sd=/tmp/sock-r; rm -rf $sd
  setsid $new serve --model $model --host-cache --socket-dir $sd --log-level warn > $A/serve.log 2>&1 &
  pid=$!
  for i in $(seq 600); do [[ -S $sd/rank-0.sock ]] && break; sleep 0.1; done
  for round in 1 2 3; do for gap in 0 0.05 0.5; do
    $new ctl release --socket $sd/rank-0.sock > /dev/null; sleep $gap
    echo "$(basename $model) gap $gap: $($new ctl restore --socket $sd/rank-0.sock 2>&1)" >> $OUT/restore.txt
  done; done
  kill -TERM $pid; wait $pid 2>/dev/null
done
cat $m/*.safetensors > /dev/null
$new load --model $m --tp 2 --rank 1 --timeline $OUT/tp2r1.svg --report-json $OUT/tp2r1.json --log-level debug 2>&1 | grep -i prefault > $OUT/tp2r1-prefault.txt
for f in /tmp/tr/*.json; do python3 bench/gaps.py $f $(basename $f .json); done > $OUT/gaps.jsonl 2>&1
grep -h 'ceiling' $OUT/ceilings.jsonl | cut -c1-250
g=$(python3 -c "import json;print(max(json.loads(l)['gib_s'] for l in open('$OUT/ceilings.jsonl') if 'h2d_ceiling' in l))")
for f in hot-orig hot-packed cold-orig cold-packed; do echo "== $f"; python3 bench/summarize_ab.py $OUT/$f.jsonl $g; done
cut -c1-330 $OUT/gaps.jsonl
cat $OUT/restore.txt $OUT/tp2r1-prefault.txt
tail -5 $A/ab.err
echo "done: $(( $(date +%s) - t0 )) s"
