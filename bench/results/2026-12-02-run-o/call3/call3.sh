# Run O call 3: build (new = 99c8867, old = 4aa65b6), CUDA tests, pack, codec bench old/new.
set -uo pipefail
export OUT
t0=$(date +%s)
STAGES="env tests codec" HF=0 PACK=1 bash bench/packed.sh > $OUT/call3.log 2>&1
echo "packed.sh: $(( $(date +%s) - t0 )) s"; cat $OUT/tests.txt
cp $OUT/packed.jsonl $OUT/call3-packed.jsonl
build-bench/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl; cat $OUT/h2d.jsonl
ob=/tmp/hb-old
{ cmake -S .old -B $ob -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include && ninja -C $ob hoist hoist-bench-codec; } > $OUT/oldbuild.log 2>&1 || tail -20 $OUT/oldbuild.log
echo "old built: $(( $(date +%s) - t0 )) s"
m=/tmp/hoist-models/qwen3-4b
for b in old new; do
  bin=$ob/bench/hoist-bench-codec; [[ $b == new ]] && bin=build-bench/bench/hoist-bench-codec
  $bin --model $m --runs 5 --sub-streams 1024 2>/dev/null | sed "s/^{/{\"build\":\"$b\",/" >> $OUT/codec-ab.jsonl
  echo "codec $b: $(( $(date +%s) - t0 )) s"
done
grep -h decode $OUT/codec-ab.jsonl
