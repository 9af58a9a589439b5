# Run U call 6 (same tree and warm machine as calls 4-5). Ran as: cd .bench-src && bash call.sh
# Call 5's ceiling, measured once after its loads, was 47.6 GiB/s against 50.7 in call 4 minutes
# before. Here each round measures the pinned-H2D ceiling (hoist-bench-h2d 8 3) and then, page cache
# read again before each, tp 2 rank 1 with 8 threads, with --cpu-bind none --threads 16, and tp 1:
# every load against the ceiling of its own round. 5 rounds.
set -uo pipefail
export OUT
b=/tmp/build-bench; m=/tmp/hoist-models/qwen3-4b; h=$b/launch/hoist
one() {  # round, label, args...
  local round=$1 label=$2; shift 2
  cat $m/*.safetensors > /dev/null
  $h load --model $m --log-level error --no-progress --report-json /tmp/r.json "$@" > /dev/null 2>&1
  python3 - "$round" "$label" <<'PY' >> $OUT/rounds.jsonl
import json, sys
r = json.load(open("/tmp/r.json"))["ranks"][0]
print(json.dumps({"round": int(sys.argv[1]), "label": sys.argv[2], "ms": r["phases"]["total"]["seconds"] * 1e3,
                  "bytes": r["bytes_h2d"], "limit": r["limit"]}))
PY
}
for i in 1 2 3 4 5; do
  $b/bench/hoist-bench-h2d 8 3 | python3 -c "import json,sys;d=json.loads(sys.stdin.read().strip().splitlines()[-1]);print(json.dumps({'round':$i,'label':'ceiling','gib_s':d['gib_s'],'runs_ms':d['runs_ms']}))" >> $OUT/rounds.jsonl
  one $i tp2r1-8 --tp 2 --rank 1
  one $i tp2r1-16 --tp 2 --rank 1 --cpu-bind none --threads 16
  one $i tp1
done
python3 - $OUT/rounds.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ceil = {r["round"]: r["gib_s"] for r in rows if r["label"] == "ceiling"}
print("ceilings", [round(ceil[k], 2) for k in sorted(ceil)])
for label in ("tp2r1-8", "tp2r1-16", "tp1"):
    rs = [r for r in rows if r["label"] == label]
    ratio = [r["bytes"] / 2**30 / (r["ms"] / 1e3) / ceil[r["round"]] for r in rs]
    print(f"{label:9} ms {[round(r['ms'], 1) for r in rs]} median {statistics.median(r['ms'] for r in rs):.1f}; "
          f"vs own round's ceiling {[f'{x:.0%}' for x in ratio]} median {statistics.median(ratio):.0%}; "
          f"limits {[r['limit']['kind'] for r in rs]}")
PY
