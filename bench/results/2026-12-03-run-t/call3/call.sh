# Run T call 3 (tree 9304ac6): the final tree on the GPU box's GCC 13 with warnings as errors (the
# README's scripts' setting), every target; CUDA tests (transport: CUDA device, pipeline,
# decoder; codec GPU kernel) and rank tests; the example's steps on the GPU (tools/example.sh
# itself needs apt, which the box cannot reach); --verify loads of qwen3-4b: tp 1, tp 2 rank 1.
set -uo pipefail
t0=$(date +%s)
source tools/env.sh
b=/tmp/hb-final
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_WERROR=ON -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/cmake.log 2>&1 || tail -20 /tmp/cmake.log
ninja -k 0 -C $b > /tmp/build.log 2>&1; echo "build all rc $?"
grep -E "error:|FAILED:" /tmp/build.log | head -20 | cut -c1-300
grep -c "warning:" /tmp/build.log
echo "built: $(( $(date +%s) - t0 )) s"
( $b/tools/hoist-mkckpt --family qwen3 --preset qwen3-4b --out /tmp/q4b > /tmp/mk.log 2>&1 ) &
for t in "transport_tests --gtest_filter=*Cuda*:*Decoder*:Packed*:Pipeline*" "codec_tests --gtest_filter=CodecGpu*" "rank_tests"; do
  $b/tests/$t > /tmp/t.log 2>&1 && echo "PASS $t" || { echo "FAIL $t"; grep -E "Failure|FAILED" -A3 /tmp/t.log | head -30; }
  grep -E "^\[  (PASSED|SKIPPED|FAILED)" /tmp/t.log | head -5
done | tee $OUT/tests.txt
echo "tests: $(( $(date +%s) - t0 )) s"
m=/tmp/qwen3-tiny; o=$OUT/example; mkdir -p $o
$b/tools/hoist-mkckpt --family qwen3 --preset qwen3-tiny --out $m --seed 7 > /dev/null
$b/launch/hoist plan --model $m --tp 2 --json $o/plan.json > $o/plan.txt 2>&1; echo "plan rc $?"
$b/launch/hoist load --model $m --verify --dump $o > $o/load.txt 2>&1; echo "load --verify rc $?"
mpirun -np 2 $b/launch/hoist load --topology configs/example-tp2.yaml --model $m --verify \
  --report-json $o/report.json --timeline $o/timeline.svg > $o/tp2.txt 2>&1; echo "mpirun tp2 rc $?"
rm -f $o/*.safetensors
tail -3 $o/load.txt
wait
cat /tmp/q4b/*.safetensors > /dev/null
$b/launch/hoist load --model /tmp/q4b --verify --report-json $OUT/q4b-tp1.json > $OUT/q4b-tp1.txt 2>&1; echo "qwen3-4b tp1 --verify rc $?"
$b/launch/hoist load --model /tmp/q4b --tp 2 --rank 1 --verify > $OUT/q4b-tp2r1.txt 2>&1; echo "qwen3-4b tp2 rank1 --verify rc $?"
grep -h -i "verif" $OUT/q4b-*.txt | head -4
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; g++ --version | head -1
echo "done: $(( $(date +%s) - t0 )) s"
