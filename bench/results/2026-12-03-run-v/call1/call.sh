# Run V call 1 (tree: main + bench/zero_copy.cc). Ran as: cd .bench-src && bash call.sh
# Can the copy engine read a hot checkpoint straight from the page cache? hoist-bench-zc registers
# qwen3-4b's file mappings (cudaHostRegisterReadOnly) and copies from them, against the pinned ceiling.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"; tail -3 $A/setup.log
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
ls -la $m > $OUT/files.txt; uname -a >> $OUT/files.txt; cat /proc/cmdline >> $OUT/files.txt
cat /sys/kernel/mm/transparent_hugepage/enabled >> $OUT/files.txt 2>&1
cat $m/*.safetensors > /dev/null
$b/bench/hoist-bench-h2d 8 5 > $OUT/h2d.json 2>&1
for args in "--threads 8 --chunk-mib 64 --rows 4096,9728" "--threads 16 --chunk-mib 64" "--threads 8 --chunk-mib 16" \
            "--threads 4 --chunk-mib 256" "--threads 1 --chunk-mib 64" "--threads 8 --chunk-mib 64"; do
  cat $m/*.safetensors > /dev/null
  echo "$args" >> $OUT/zc.jsonl
  timeout 60 $b/bench/hoist-bench-zc $args $m/*.safetensors >> $OUT/zc.jsonl 2>&1
  echo "zc $args: $(( $(date +%s) - t0 )) s"
done
$b/bench/hoist-bench-h2d 8 5 >> $OUT/h2d.json 2>&1
for i in 1 2 3; do
  cat $m/*.safetensors > /dev/null
  $h load --model $m --log-level error --no-progress --report-json $OUT/tp1-$i.json > /dev/null 2>&1
  cat $m/*.safetensors > /dev/null
  $h load --model $m --tp 2 --rank 1 --log-level error --no-progress --report-json $OUT/tp2r1-$i.json > /dev/null 2>&1
done
python3 - $OUT <<'PY' > $OUT/loads.txt
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/tp*.json")):
    r = json.load(open(f))["ranks"][0]
    print(f.split("/")[-1], round(r["phases"]["total"]["seconds"] * 1e3, 1), "ms", r["bytes_h2d"], r["limit"]["kind"])
PY
rm -f $OUT/tp*-*.json
cat $OUT/h2d.json $OUT/zc.jsonl $OUT/loads.txt
echo "done: $(( $(date +%s) - t0 )) s"
