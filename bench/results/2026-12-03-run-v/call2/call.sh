# Run V call 2 (tree 1cd11d9, branch pin-lane, main + the pinned lane; HOIST_PIN_SHARE / HOIST_PIN_UNIT_MIB pick its share
# and unit on one binary). Ran as: cd .bench-src && bash call.sh
# Each round: the pinned-H2D ceiling, then every case (page cache read again before each load).
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
if [[ ! -x $b/launch/hoist || ! -d $M/qwen3-4b ]]; then
  OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
else
  cmake --build $b > $A/rebuild.log 2>&1
fi
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
one() {  # round, label, share, unit, args...
  local round=$1 label=$2 share=$3 unit=$4; shift 4
  cat $m/*.safetensors > /dev/null
  HOIST_PIN_SHARE=$share HOIST_PIN_UNIT_MIB=$unit $h load --model $m --log-level error --no-progress --report-json /tmp/r.json "$@" > /dev/null 2>&1
  python3 - "$round" "$label" <<'PY' >> $OUT/rounds.jsonl
import json, sys
r = json.load(open("/tmp/r.json"))["ranks"][0]; p = r["phases"]
print(json.dumps({"round": int(sys.argv[1]), "label": sys.argv[2], "ok": r["ok"], "ms": p["total"]["seconds"] * 1e3,
  "bytes": r["bytes_h2d"], "limit": r["limit"]["kind"], "h2d_busy": p["h2d"]["busy_s"] / max(p["h2d"]["seconds"], 1e-9),
  "h2d_start_ms": p["h2d"]["start_s"] * 1e3 if "start_s" in p["h2d"] else None, "threads": r["fill_threads"]}))
PY
}
cases=(
 "tp2r1-8-s0|0|8|--tp 2 --rank 1"
 "tp2r1-8-s25|0.25|8|--tp 2 --rank 1"
 "tp2r1-8-s35|0.35|8|--tp 2 --rank 1"
 "tp2r1-8-s45|0.45|8|--tp 2 --rank 1"
 "tp2r1-8-s35-u4|0.35|4|--tp 2 --rank 1"
 "tp2r1-8-s35-u16|0.35|16|--tp 2 --rank 1"
 "tp1-s0|0|8|"
 "tp1-s20|0.2|8|"
 "tp1-s35|0.35|8|"
 "tp2r1-16-s0|0|8|--tp 2 --rank 1 --cpu-bind none --threads 16"
 "tp2r1-16-s25|0.25|8|--tp 2 --rank 1 --cpu-bind none --threads 16"
)
for i in 1 2 3 4; do
  $b/bench/hoist-bench-h2d 8 3 | python3 -c "import json,sys;d=json.loads(sys.stdin.read().strip().splitlines()[-1]);print(json.dumps({'round':$i,'label':'ceiling','gib_s':d['gib_s']}))" >> $OUT/rounds.jsonl
  for c in "${cases[@]}"; do IFS='|' read -r label share unit args <<< "$c"; one $i $label $share $unit $args; done
  echo "round $i: $(( $(date +%s) - t0 )) s"
done
cat $m/*.safetensors > /dev/null
HOIST_PIN_SHARE=0.35 $h load --model $m --tp 2 --rank 1 --log-level error --no-progress --timeline $OUT/tp2r1-s35.svg --trace /tmp/tr.json > /dev/null 2>&1
for a in "--tp 2 --rank 1" "" "--tp 2 --rank 0 --read mmap"; do
  HOIST_PIN_SHARE=0.5 $h load --model $m $a --verify --log-level warn --no-progress --report-json /tmp/v.json > /tmp/v.txt 2>&1
  echo "verify [$a] rc=$? $(python3 -c "import json;r=json.load(open('/tmp/v.json'))['ranks'][0];print(r['verified'], r['ok'], r['bytes_h2d'])")" >> $OUT/verify.txt
done
cat $OUT/verify.txt
python3 - $OUT/rounds.jsonl <<'PY' | tee $OUT/summary.txt
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ceil = {r["round"]: r["gib_s"] for r in rows if r["label"] == "ceiling"}
print("ceilings", [round(ceil[k], 2) for k in sorted(ceil)])
labels = []
for r in rows:
    if r["label"] != "ceiling" and r["label"] not in labels: labels.append(r["label"])
for label in labels:
    rs = [r for r in rows if r["label"] == label]
    ratio = [r["bytes"] / 2**30 / (r["ms"] / 1e3) / ceil[r["round"]] for r in rs]
    print(f"{label:17} ms {[round(r['ms'], 1) for r in rs]} median {statistics.median(r['ms'] for r in rs):.1f}; "
          f"vs round ceiling median {statistics.median(ratio):.1%}; busy {statistics.median(r['h2d_busy'] for r in rs):.0%}; "
          f"limits {[r['limit'] for r in rs]} ok {all(r['ok'] for r in rs)}")
PY
echo "done: $(( $(date +%s) - t0 )) s"
