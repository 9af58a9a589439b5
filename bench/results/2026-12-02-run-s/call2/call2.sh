# Run S call 2: how long the post-free slowdown lasts, whether a sync or a second copy engine
# avoids it, and whether a release-threshold-0 pool really gives the memory back.
set -uo pipefail
t0=$(date +%s)
cmake -S . -B /tmp/bf -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/cmake.log 2>&1 || { tail -30 /tmp/cmake.log; exit 1; }
ninja -C /tmp/bf bench/hoist-bench-free > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built: $(( $(date +%s) - t0 )) s"
f=/tmp/bf/bench/hoist-bench-free
$f 8 fresh,fresh/2,malloc,malloc/2,sync,sleep10,sleep20,sleep40,sleep80,pool,pool/2,other/2,malloc | tee $OUT/free-d.jsonl
$f 8 pool,malloc/2,sleep20,malloc,sleep40,pool | tee $OUT/free-e.jsonl
echo "done: $(( $(date +%s) - t0 )) s"
