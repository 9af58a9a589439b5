# Run O call 4: hot A/B old (4aa65b6) against new (99c8867), packed and original; verify.
# (The packed A/B stopped at once: bench/ab.sh warmed *.safetensors only, which a packed copy
# lacks; fixed in the next commit and run again as call 5.)
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench-new
OUT=/tmp/aux-build AUX=/tmp/aux-build BUILD_ONLY=1 BUILD_DIR=$b MODELS=/tmp/hoist-models bash bench/bench.sh > $OUT/build.log 2>&1
echo "built: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=/tmp/hoist-models/qwen3-4b
cat $m-packed/*.bin > /dev/null
RUNS=5 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh /tmp/hb-old/launch/hoist $b/launch/hoist $m-packed > $OUT/ab-packed.jsonl 2> $OUT/ab.err
RUNS=3 CASES="--read auto;--tp 2 --rank 1" bash bench/ab.sh /tmp/hb-old/launch/hoist $b/launch/hoist $m > $OUT/ab-orig.jsonl 2>> $OUT/ab.err
echo "ab: $(( $(date +%s) - t0 )) s"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.jsonl
g=$(python3 -c "import json;print(json.load(open('$OUT/h2d.jsonl'))['gib_s'])")
python3 bench/summarize_ab.py $OUT/ab-packed.jsonl $g; python3 bench/summarize_ab.py $OUT/ab-orig.jsonl $g
BUILD_DIR=$b STAGES="verify" HF=0 PACK=1 bash bench/packed.sh > $OUT/verify.log 2>&1; cat $OUT/verify.txt
echo "done: $(( $(date +%s) - t0 )) s"
