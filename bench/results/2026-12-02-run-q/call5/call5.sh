# Run Q call 5 (tree 5596892; OLD = add54a3): a packed load's decode set and slot cut freed on a
# helper thread. Hot A/B packed tp 1 and tp 2 rank 1, 6 runs each, alternating; traces of the
# first round. At most 8 files.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new; M=/tmp/hoist-models; A=/tmp/aux5; mkdir -p $A
( cd .old && cmake -S . -B /tmp/hb-old -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOIST_BUILD_TESTS=OFF -DCMAKE_INCLUDE_PATH=$PWD/.gpu-deps/include > /tmp/old-cmake.log 2>&1 && ninja -C /tmp/hb-old launch/hoist > /tmp/old-build.log 2>&1; echo "old built rc $?" ) &
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
wait
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; old=/tmp/hb-old/launch/hoist; new=$b/launch/hoist
mkdir -p /tmp/tr/p
TRACE_DIR=/tmp/tr/p RUNS=6 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh $old $new $m-packed > $OUT/ab-packed.jsonl 2> $A/ab.err
echo "ab packed: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g
python3 - $OUT/ab-packed.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("failed"): continue
    st, ph = r["starts"], r["phases"]
    print(r["build"], r["case"][:14], "total", round(r["ms"], 1), "tail", round(r["ms"] - st["staging_free"] - ph["staging_free"], 2))
PY
tar -czf $OUT/traces.tgz -C /tmp tr
echo "done: $(( $(date +%s) - t0 )) s"
