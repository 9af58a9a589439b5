# Run U call 4 (tree 90c8a92). Ran as: cd .bench-src && bash call.sh
# Call 3's back-to-back loads were often slow with `limit: handoff`. Are loads started right after
# another process freed its 7.5 GiB arena slower than loads started 3 s later? Six rounds of:
# sleep 3, load ("rested"), load at once ("b2b"); tp 1 hot, then the same for tp 2 rank 1. The
# page cache is read once before (cat), never between loads.
set -uo pipefail
export OUT
t0=$(date +%s)
b=/tmp/build-bench; M=/tmp/hoist-models; A=/tmp/aux; mkdir -p $A
OUT=$A AUX=$A BUILD_DIR=$b STAGES="" HF=0 PACK=0 MODELS=$M bash bench/packed.sh > $A/setup.log 2>&1
echo "setup: $(( $(date +%s) - t0 )) s"
source tools/env.sh
m=$M/qwen3-4b; h=$b/launch/hoist
one() {  # label, args...: one line: label, load ms, limit
  local label=$1; shift
  $h load --model $m --log-level error --no-progress --report-json /tmp/r.json "$@" > /dev/null 2>&1
  python3 - "$label" "$*" <<'PY' >> $OUT/b2b.jsonl
import json, sys
r = json.load(open("/tmp/r.json"))["ranks"][0]
total = r["phases"]["total"]["seconds"]
print(json.dumps({"label": sys.argv[1], "args": sys.argv[2], "ms": round(total * 1e3, 1), "limit": r["limit"]}))
PY
}
cat $m/*.safetensors > /dev/null
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.json 2>&1
for args in "" "--tp 2 --rank 1"; do
  for i in 1 2 3 4 5 6; do sleep 3; one rested $args; one b2b $args; done
done
python3 - $OUT/b2b.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for args in dict.fromkeys(r["args"] for r in rows):
    for label in ("rested", "b2b"):
        rs = [r for r in rows if r["args"] == args and r["label"] == label]
        ms = [r["ms"] for r in rs]
        kinds = [r["limit"]["kind"] for r in rs]
        busy = statistics.median(r["limit"]["engine_busy"] for r in rs)
        print(f"{args or 'tp 1':16} {label:7} median {statistics.median(ms):6.1f} ms  runs {ms}  engine busy {busy:.2f}  limits {kinds}")
PY
echo "done: $(( $(date +%s) - t0 )) s"
