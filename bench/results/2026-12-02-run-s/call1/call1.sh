# Run S call 1: what the first copy after a free pays, six ways of giving device memory back.
set -uo pipefail
t0=$(date +%s)
cmake -S . -B /tmp/bf -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/cmake.log 2>&1 || { tail -30 /tmp/cmake.log; exit 1; }
ninja -C /tmp/bf bench/hoist-bench-free > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built: $(( $(date +%s) - t0 )) s"
f=/tmp/bf/bench/hoist-bench-free
$f 8 fresh,malloc,malloc-wait,other,vmm,vmm-remap,pool | tee $OUT/free-a.jsonl
$f 8 pool,vmm-remap,vmm,other,malloc-wait,malloc,fresh | tee $OUT/free-b.jsonl
$f 8 malloc,vmm,malloc,vmm,other | tee $OUT/free-c.jsonl
$f 24 malloc,vmm,other | tee $OUT/free-24.jsonl
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv > $OUT/gpu.txt
echo "done: $(( $(date +%s) - t0 )) s"
