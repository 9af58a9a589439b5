# Run O call 5 (same warm machine as call 4; bench/ab.sh fixed): hot A/B of the packed copy.
set -uo pipefail
export OUT
b=/tmp/build-bench-new; m=/tmp/hoist-models/qwen3-4b
source tools/env.sh
RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh /tmp/hb-old/launch/hoist $b/launch/hoist $m-packed > $OUT/ab-packed.jsonl 2> $OUT/ab.err
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g
