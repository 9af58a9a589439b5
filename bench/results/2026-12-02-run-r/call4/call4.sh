# Run R call 4 (tree 16fafac; OLD = 7f8138c; both device-slot commits reverted after this call): four device slots per staging slot in a
# load, eight in a restore. Hot A/B packed tp 1 and tp 2 rank 1 (5 runs each); packed restores
# right after release (4 each build, alternating daemons). Short: the session's device budget.
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
RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
for round in 1 2; do for build in old new; do
  h=${!build}; sd=/tmp/sock-$build; rm -rf $sd
  setsid $h serve --model $m-packed --host-cache --socket-dir $sd --log-level warn > $A/serve-$build.log 2>&1 &
  pid=$!
  for i in $(seq 600); do [[ -S $sd/rank-0.sock ]] && break; sleep 0.1; done
  for i in 1 2; do
    $h ctl release --socket $sd/rank-0.sock > /dev/null
    echo "$build: $($h ctl restore --socket $sd/rank-0.sock 2>&1)" >> $OUT/restore.txt
  done
  kill -TERM $pid; wait $pid 2>/dev/null
done; done
cat $OUT/restore.txt
echo "restore: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g
echo "done: $(( $(date +%s) - t0 )) s"
