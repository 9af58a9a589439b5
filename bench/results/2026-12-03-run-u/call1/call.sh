# Run U call 1 (tree 6bb78aa, branch fill-kernel: main + HOIST_FILL_KERNEL to pick the fill's copy
# kernel; unset = memcpy = main's code). Ran as: cd .bench-src && bash call.sh
# 1. hoist-bench-fill on qwen3-4b's hot files: copy kernels x patterns x 8/16 threads, fresh
#    mappings; memcpy with populated mappings; the same fill beside a running pinned H2D copy.
# 2. The loader, tp 2 rank 1: fill threads 8 (default) against --cpu-bind none --threads 12/16.
# 3. The loader A/B: default kernel against movsb, pf-head, pf-next (env on the same binary).
# 4. Traces of tp 1 and tp 2 rank 1 (start-up, gaps).
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"; tail -3 $A/setup.log
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
lscpu > $OUT/cpu.txt; nvidia-smi > $OUT/gpu.txt 2>&1
cat $m/*.safetensors > /dev/null
timeout 150 $b/bench/hoist-bench-fill --threads 8,16 --kernels memcpy,movsb,pf-next,pf-head \
  --patterns contig,rows:4096:8192,rows:9728:19456 --runs 3 --gib 4 $m/*.safetensors > $OUT/fill.jsonl 2>&1
timeout 60 $b/bench/hoist-bench-fill --threads 8,16 --kernels memcpy --populate \
  --patterns contig,rows:9728:19456 --runs 3 --gib 4 $m/*.safetensors >> $OUT/fill.jsonl 2>&1
echo "fill: $(( $(date +%s) - t0 )) s"
start=$(( $(date +%s) + 6 ))
HOIST_BENCH_START=$start $b/bench/hoist-bench-h2d 8 40 > $OUT/h2d-beside-fill.json 2>&1 &
hp=$!
while [[ $(date +%s) -lt $start ]]; do sleep 0.05; done
timeout 60 $b/bench/hoist-bench-fill --threads 8 --kernels memcpy,pf-head,memcpy,pf-head \
  --patterns contig,rows:9728:19456 --runs 2 --gib 4 $m/*.safetensors > $OUT/fill-beside-h2d.jsonl 2>&1
wait $hp
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d-alone.json 2>&1
echo "fill+h2d: $(( $(date +%s) - t0 )) s"
RUNS=4 CASES="--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16;--tp 2 --rank 1 --cpu-bind none --threads 12" \
  bash bench/ab.sh $h $h $m > $OUT/threads.jsonl 2> $A/ab.err
echo "threads: $(( $(date +%s) - t0 )) s"
for k in pf-head movsb pf-next; do
  printf '#!/bin/sh\nHOIST_FILL_KERNEL=%s exec %s "$@"\n' $k $h > /tmp/k-$k.sh; chmod +x /tmp/k-$k.sh
  cases="--tp 2 --rank 1;--read auto"; [[ $k == pf-next ]] && cases="--tp 2 --rank 1"
  RUNS=5 CASES="$cases" bash bench/ab.sh $h /tmp/k-$k.sh $m > $OUT/kernel-$k.jsonl 2>> $A/ab.err
  echo "kernel $k: $(( $(date +%s) - t0 )) s"
done
cat $m/*.safetensors > /dev/null
$h load --model $m --trace $OUT/trace-tp1.json --log-level warn > /dev/null 2>&1
$h load --model $m --tp 2 --rank 1 --trace $OUT/trace-tp2r1.json --timeline $OUT/tp2r1.svg --log-level warn > /dev/null 2>&1
for f in tp1 tp2r1; do python3 bench/gaps.py $OUT/trace-$f.json $f; done > $OUT/gaps.jsonl 2>&1
gzip -f $OUT/trace-*.json
g=$(python3 -c "import json;print(max(json.loads(l)['gib_s'] for l in open('$OUT/h2d-alone.json') if 'gib_s' in l))" 2>/dev/null || echo 51.3)
echo "ceiling $g"
cut -c1-200 $OUT/fill.jsonl $OUT/fill-beside-h2d.jsonl
cut -c1-300 $OUT/h2d-beside-fill.json $OUT/h2d-alone.json
for f in threads kernel-pf-head kernel-movsb kernel-pf-next; do echo "== $f"; python3 bench/summarize_ab.py $OUT/$f.jsonl $g; done
cut -c1-330 $OUT/gaps.jsonl
tail -5 $A/ab.err
echo "done: $(( $(date +%s) - t0 )) s"
