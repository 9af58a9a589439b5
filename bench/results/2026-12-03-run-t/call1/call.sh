# Run T call 1 (tree 86b7342; OLD = 86b7342~1): non-temporal stores into staging (86b7342).
# Hot A/B, alternating: original tp 1 and tp 2 rank 1, packed tp 1 and tp 2 rank 1 (6 runs each).
# Then NEW against a variant with streaming stores for strided rows only (306d8a6, .rows).
# Then daemon restores at gaps of 0, 0.05 and 0.5 s after ctl release (original and packed).
# (Exported with bench/prepare-device.sh at 86b7342; .old = git archive 86b7342~1, .rows = git
# archive 306d8a6, each with .gpu-deps copied in.) Ran as: cd .bench-src && bash call3.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux3; mkdir -p $A
( cd .rows && cmake -S . -B /tmp/hb-rows -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/rows-cmake.log 2>&1 && ninja -C /tmp/hb-rows launch/hoist > /tmp/rows-build.log 2>&1; echo "rows built rc $?" ) &
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p /tmp/tr
TRACE_DIR=/tmp/tr RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m > $OUT/ab-orig.jsonl 2> $A/ab.err
echo "ab orig: $(( $(date +%s) - t0 )) s"
RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2>> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
rows=/tmp/hb-rows/launch/hoist
RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $new $rows $m > $OUT/ab-rows-orig.jsonl 2>> $A/ab.err
RUNS=5 CASES="--read auto" bash bench/ab.sh $new $rows $m-packed > $OUT/ab-rows-packed.jsonl 2>> $A/ab.err
echo "ab rows: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
for f in ab-orig ab-packed ab-rows-orig ab-rows-packed; do echo "== $f"; python3 bench/summarize_ab.py $OUT/$f.jsonl $g; done
for f in /tmp/tr/*.json; do python3 bench/gaps.py $f $(basename $f .json); done > $OUT/gaps.jsonl 2>&1
cut -c1-300 $OUT/gaps.jsonl
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
(lscpu; ldd --version | head -1; grep -m1 -i "model name" /proc/cpuinfo) > $OUT/cpu.txt 2>&1
cat $OUT/restore.txt
echo "done: $(( $(date +%s) - t0 )) s"
