# Run Y call 5 (main): cold `auto` and `direct` against the O_DIRECT reader with the reader as one
# more side of the rotation. Call 2 (and run X call 3) found the first cold load after a reader
# run or a long pause slower or faster than the next by up to 40%, so a reader run once per round
# is no fair ceiling. Here every round runs the three in one of the six orders (each order once,
# so each side holds each position twice), the page cache dropped before every run.
# Ran as: cd .bench-src && bash call.sh
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
run() {  # $1 = reader | auto | direct; prints one JSON line
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [[ $1 == reader ]]; then
    $b/bench/hoist-bench-io --threads 16 --chunk-mib 4 --depth 16 $m/*.safetensors 2>/dev/null | tail -1 |
      python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps({"side":"reader","round":int(sys.argv[1]),"pos":int(sys.argv[2]),"gib_s":d["gib_s"],"s":d["seconds"]}))' $2 $3
  else
    $h load --model $m --read $1 --log-level warn --no-progress --report-json /tmp/r.json > /dev/null 2>&1
    python3 -c 'import json,sys; r=json.load(open("/tmp/r.json"))["ranks"][0]; t=r["phases"]["total"]["seconds"]
print(json.dumps({"side":sys.argv[3],"round":int(sys.argv[1]),"pos":int(sys.argv[2]),"gib_s":r["bytes_h2d"]/2**30/t,"s":t}))' $2 $3 $1
  fi
}
orders=("reader auto direct" "auto direct reader" "direct reader auto" "reader direct auto" "direct auto reader" "auto reader direct")
for i in "${!orders[@]}"; do
  p=0; for s in ${orders[$i]}; do p=$((p+1)); run $s $((i+1)) $p >> $OUT/cold.jsonl; done
  echo "round $((i+1)): $(( $(date +%s) - t0 )) s"
done
python3 - $OUT/cold.jsonl <<'PY' | tee $OUT/cold.md
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for side in ("reader", "auto", "direct"):
    xs = [r["gib_s"] for r in rows if r["side"] == side]
    print(side, "median %.3f GiB/s" % statistics.median(xs), "runs", " ".join("%.3f" % x for x in xs))
for pos in (1, 2, 3):
    print("position", pos, "median %.3f" % statistics.median(r["gib_s"] for r in rows if r["pos"] == pos))
PY
echo "done: $(( $(date +%s) - t0 )) s"
