# Run R call 2 (tree 7f8138c; OLD = 4739415, call 1's tree): a packed restore copies ahead of its
# decoder's making, the CUDA decoder in one allocation, ctl restore --verify. Hot A/B packed tp 1
# and tp 2 rank 1 (6 runs each); original tp 2 rank 1 with 4 vs 8 slots (one build, 4 runs
# each); ceilings; daemon restore (5 each, then one verified); --verify; then the CUDA tests.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux2; mkdir -p $A
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p /tmp/tr/p
TRACE_DIR=/tmp/tr/p RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
RUNS=4 CASES="--tp 2 --rank 1;--tp 2 --rank 1 --slots 8" bash bench/ab.sh $new $new $m > $OUT/ab-slots.jsonl 2>> $A/ab.err
echo "ab slots: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-slots.jsonl $g
for f in /tmp/tr/p/*.json; do l=$(basename $(dirname $f))/$(basename $f .json); python3 bench/gaps.py $f $l; done > $A/gaps.jsonl 2>&1
cut -c1-300 $A/gaps.jsonl; cp $A/gaps.jsonl /tmp/tr/
tar -czf $OUT/traces.tgz -C /tmp tr
timeout 200 env BUILD_DIR=$b STAGES="ceilings restore verify" RUNS_HOT=5 HF=0 PACK=1 MODELS=$M OUT=$A AUX=$A bash bench/packed.sh > $A/stages.log 2>&1
echo "stages rc $?: $(( $(date +%s) - t0 )) s"
cp $A/packed.jsonl $OUT/packed.jsonl
cat $A/verify.txt > $OUT/checks.txt; cat $OUT/checks.txt
grep -h '"restore\|h2d_ceiling' $OUT/packed.jsonl | cut -c1-300
tb=/tmp/hoist-test-build
cmake -S . -B $tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > $A/cmake.log 2>&1
ninja -C $tb transport_tests rank_tests > $A/build.log 2>&1 || grep -A5 error $A/build.log | head -30
echo "tests built: $(( $(date +%s) - t0 )) s"
for t in "transport_tests --gtest_filter=*Cuda*:*Decoder*:Packed*:SpanLog*" "rank_tests --gtest_filter=PackedHostCache*"; do
  timeout 120 $tb/tests/$t > /tmp/t.log 2>&1 && echo "PASS $t" >> $OUT/tests.txt || { echo "FAIL $t" >> $OUT/tests.txt; grep -E "Failure|FAILED|error" -A3 /tmp/t.log | head -30 >> $OUT/tests.txt; }
  grep -E "^\[ +(OK|PASSED|SKIPPED|FAILED) " /tmp/t.log >> $OUT/tests.txt || true
done
grep -E "PASS|FAIL" $OUT/tests.txt | head -5
echo "done: $(( $(date +%s) - t0 )) s"
