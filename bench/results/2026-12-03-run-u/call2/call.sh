# Run U call 2 (tree of branch fill-kernel with HOIST_FILL_DEMOTE; unset env = main's code).
# Ran as: cd .bench-src && bash call.sh
# Hot A/B on one binary, the fill variants by environment against the default, alternating run by
# run (6 runs each, tp 2 rank 1 and tp 1): pf-head (prefetch the next strided row's first KiB),
# demote (cldemote every line of a task's slot bytes once read, so the DMA finds them in L3, not
# in a core's L2), and both. Traces of the default and of both (tp 2 rank 1), their gaps.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
mk() { printf '#!/bin/sh\n%s exec %s "$@"\n' "$2" $h > /tmp/v-$1.sh; chmod +x /tmp/v-$1.sh; }
mk pf "HOIST_FILL_KERNEL=pf-head"; mk dm "HOIST_FILL_DEMOTE=1"; mk pfdm "HOIST_FILL_KERNEL=pf-head HOIST_FILL_DEMOTE=1"
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.json 2>&1
for v in dm pfdm pf; do
  RUNS=6 CASES="--tp 2 --rank 1;--read auto" bash bench/ab.sh $h /tmp/v-$v.sh $m > $OUT/ab-$v.jsonl 2>> $A/ab.err
  echo "$v: $(( $(date +%s) - t0 )) s"
done
mkdir -p /tmp/tr; cat $m/*.safetensors > /dev/null
for v in base pfdm; do
  x=$h; [[ $v != base ]] && x=/tmp/v-$v.sh
  for i in 1 2; do $x load --model $m --tp 2 --rank 1 --trace /tmp/tr/$v-$i.json --log-level warn > /dev/null 2>&1; done
done
for f in /tmp/tr/*.json; do python3 bench/gaps.py $f $(basename $f .json); done > $OUT/gaps.jsonl 2>&1
g=$(python3 -c "import json;print(max(json.loads(l)['gib_s'] for l in open('$OUT/h2d.json') if 'gib_s' in l))" 2>/dev/null || echo 51.3)
echo "ceiling $g"
for v in dm pfdm pf; do echo "== $v"; python3 bench/summarize_ab.py $OUT/ab-$v.jsonl $g; done
cut -c1-420 $OUT/gaps.jsonl
tail -5 $A/ab.err
echo "done: $(( $(date +%s) - t0 )) s"
