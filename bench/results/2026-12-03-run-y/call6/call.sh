# Run Y call 6 (main; the session's last device seconds): call 5 had the reader ahead of cold
# `direct` by 23% (medians of 6, balanced positions). Does more in flight close it? Sides, rotated
# (a Latin square's first rounds): the reader (16 threads x 16 queued 4 MiB = 1 GiB in flight),
# `--read direct` (64 threads x 8 queued 1 MiB), `--read direct --read-depth-mib 2048 --threads
# 128` (128 x 8 MiB = 1 GiB), `--read auto`. Each line is written as it is measured.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
declare -A args=([direct]="--read direct" [deep]="--read direct --read-depth-mib 2048 --threads 128" [auto]="--read auto")
run() {  # $1 = side, $2 round, $3 position
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [[ $1 == reader ]]; then
    $b/bench/hoist-bench-io --threads 16 --chunk-mib 4 --depth 16 $m/*.safetensors 2>/dev/null | tail -1 |
      python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"side":"reader","round":int(sys.argv[1]),"pos":int(sys.argv[2]),"gib_s":d["gib_s"],"s":d["seconds"]}))' $2 $3
  else
    $h load --model $m ${args[$1]} --log-level warn --no-progress --report-json /tmp/r.json > /dev/null 2>&1
    python3 -c 'import json,sys; r=json.load(open("/tmp/r.json"))["ranks"][0]; t=r["phases"]["total"]["seconds"]
print(json.dumps({"side":sys.argv[3],"round":int(sys.argv[1]),"pos":int(sys.argv[2]),"gib_s":r["bytes_h2d"]/2**30/t,"s":t,"threads":r.get("threads")}))' $2 $3 $1
  fi
}
orders=("reader direct deep auto" "direct deep auto reader" "deep auto reader direct" "auto reader direct deep")
for i in "${!orders[@]}"; do
  p=0; for s in ${orders[$i]}; do p=$((p+1)); run $s $((i+1)) $p | tee -a $OUT/cold.jsonl; done
done
echo "done: $(( $(date +%s) - t0 )) s"
