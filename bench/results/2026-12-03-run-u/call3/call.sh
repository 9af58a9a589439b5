# Run U call 3 (tree eb6d7e3: main with the report's `limit` line). Ran as: cd .bench-src && bash call.sh
# The table as a user sees it on the GPU, for each kind of load: tp 1 hot (3), tp 2 rank 1 hot on
# its 8 cores (5) and with --cpu-bind none --threads 16 (3), the packed copy tp 1 hot (2), tp 1
# cold --read auto (1, page cache dropped). All tables in loads.txt; one tp 2 rank 1 report JSON
# and timeline.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=1 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
run() { echo "== hoist load $*"; $h load --log-level warn --no-progress "$@" 2>&1 | grep -v '^phase\|^[a-z_]* *[0-9]' ; }
{
  cat $m/*.safetensors > /dev/null
  for i in 1 2 3; do run --model $m; done
  for i in 1 2 3 4 5; do run --model $m --tp 2 --rank 1; done
  for i in 1 2 3; do run --model $m --tp 2 --rank 1 --cpu-bind none --threads 16; done
  cat $m-packed/*.bin > /dev/null
  for i in 1 2; do run --model $m-packed; done
  sync; echo 3 > /proc/sys/vm/drop_caches
  run --model $m --read auto
  cat $m/*.safetensors > /dev/null
  run --model $m --tp 2 --rank 1 --report-json $OUT/tp2r1.json --timeline $OUT/tp2r1.svg
} > $OUT/loads.txt 2>&1
grep -E "^== |rank 1 |rank 0 |limit:" $OUT/loads.txt
python3 -c "import json;print(json.load(open('$OUT/tp2r1.json'))['ranks'][0]['limit'])"
echo "done: $(( $(date +%s) - t0 )) s"
