# Run W call 2: A/B of bc7ed19 (old-src/) against this tree (sources opened and the slot cut made
# while the device opens, the arena allocated beside the set-up), alternated run by run, each round
# against its own pinned-H2D ceiling; traced heads; --verify of this build.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
if [[ ! -x $b/launch/hoist || ! -d $M/qwen3-4b ]]; then
  OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
else
  cmake --build $b > $A/rebuild.log 2>&1
fi
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist; ob=/tmp/hb-old
if [[ ! -x $ob/launch/hoist ]]; then
  cmake -S old-src -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF \
    -DCMAKE_INCLUDE_PATH="$PWD/.gpu-deps/include" > $A/ocmake.log 2>&1 && ninja -C $ob hoist > $A/obuild.log 2>&1 \
    || tail -20 $A/ocmake.log $A/obuild.log
fi
echo "old build: $(( $(date +%s) - t0 )) s"
for a in "--tp 2 --rank 1" ""; do
  $h load --model $m $a --verify --log-level warn --no-progress > /tmp/v.txt 2>&1
  echo "verify [$a] rc=$? $(grep -c ' ok' /tmp/v.txt) ok lines" | tee -a $OUT/verify.txt
done
RUNS=7 CEILING_BIN=$b/bench/hoist-bench-h2d \
  CASES="--read auto;--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16;--tp 2 --rank 1 --cpu-bind none --threads 12" \
  bash bench/ab.sh $ob/launch/hoist $h $m > $OUT/ab.jsonl 2> $A/ab.err
python3 bench/summarize_ab.py $OUT/ab.jsonl | tee $OUT/ab.md
echo "ab: $(( $(date +%s) - t0 )) s"
for a in "--tp 2 --rank 1 --cpu-bind none --threads 16" "--tp 2 --rank 1" ""; do
  for i in 1 2; do
    cat $m/*.safetensors > /dev/null
    $h load --model $m $a --log-level error --no-progress --trace /tmp/tr.json > /dev/null 2>&1
    python3 bench/head_tail.py /tmp/tr.json "[$a] $i" >> $OUT/head_tail.jsonl
  done
done
cat $m/*.safetensors > /dev/null
$h load --model $m --tp 2 --rank 1 --log-level error --no-progress --timeline $OUT/tp2r1.svg > /dev/null 2>&1
echo "done: $(( $(date +%s) - t0 )) s"
