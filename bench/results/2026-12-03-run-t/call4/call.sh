# Run T call 4 (tree 800a654): every target with GCC 13 and warnings as errors, after the two fixes.
set -uo pipefail
t0=$(date +%s)
b=/tmp/hb-final2
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOIST_WERROR=ON -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/cmake.log 2>&1 || tail -20 /tmp/cmake.log
ninja -k 0 -C $b > /tmp/build.log 2>&1; echo "build all rc $?"
grep -E "error:|FAILED:" /tmp/build.log | head -20 | cut -c1-300
grep -E "warning:" /tmp/build.log | cut -c1-200 | head -5
$b/tests/tools_tests --gtest_filter='Reference*' 2>&1 | tail -1
g++ --version | head -1
echo "done: $(( $(date +%s) - t0 )) s"
