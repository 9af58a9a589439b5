# Run P call 3 (tree 5a13804; OLD = 27722b9): the decoder made in one allocation and copy with its
# module loaded at device open, A/B hot packed and original; traces (bench/gaps.py); CUDA tests
# and --verify of packed loads. At most 8 files under $OUT.
# (Written back from the session's record: the .bench-src/ it ran from was replaced by call 4's.)
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux3; mkdir -p $A
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="tests" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p /tmp/tr/p /tmp/tr/o
TRACE_DIR=/tmp/tr/p RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
TRACE_DIR=/tmp/tr/o RUNS=3 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m > $OUT/ab-orig.jsonl 2>> $A/ab.err
echo "ab orig: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-orig.jsonl $g
for f in /tmp/tr/p/*.json /tmp/tr/o/*.json; do l=$(basename $(dirname $f))/$(basename $f .json); python3 bench/gaps.py $f $l; done > $OUT/gaps.jsonl 2>&1
cat $OUT/gaps.jsonl | cut -c1-900
tar -czf $OUT/traces.tgz -C /tmp tr
BUILD_DIR=$b STAGES="verify" HF=0 PACK=1 MODELS=$M OUT=$A AUX=$A bash bench/packed.sh > $A/verify.log 2>&1
cat $A/tests.txt $A/verify.txt > $OUT/checks.txt; cat $OUT/checks.txt
echo "done: $(( $(date +%s) - t0 )) s"
