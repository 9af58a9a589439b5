# Run Q call 3 (tree ca620df): the CUDA tests (batched decoder, codec kernel, CUDA pipeline, packed
# loads) on the GPU, after the decoder's upload change (831702f) and the teardown span (ca620df).
set -uo pipefail
t0=$(date +%s)
source tools/env.sh
tb=/tmp/hoist-test-build
cmake -S . -B $tb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > $OUT/cmake.log 2>&1
ninja -C $tb transport_tests codec_tests > $OUT/build.log 2>&1 || grep -A5 error $OUT/build.log | head -30
echo "built: $(( $(date +%s) - t0 )) s"
for t in "transport_tests --gtest_filter=*Cuda*:*Decoder*:Packed*" "codec_tests --gtest_filter=CodecGpu*"; do
  $tb/tests/$t > /tmp/t.log 2>&1 && echo "PASS $t" >> $OUT/tests.txt || { echo "FAIL $t" >> $OUT/tests.txt; grep -E "Failure|FAILED|error" -A3 /tmp/t.log | head -30 >> $OUT/tests.txt; }
  grep -E "^\[ +(OK|PASSED|SKIPPED|FAILED) " /tmp/t.log >> $OUT/tests.txt || true
done
cat $OUT/tests.txt
echo "done: $(( $(date +%s) - t0 )) s"
