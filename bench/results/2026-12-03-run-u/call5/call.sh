# Run U call 5 (same tree and warm machine as call 4). Ran as: cd .bench-src && bash call.sh
# tp 2 rank 1 with its default 8 fill threads against --cpu-bind none --threads 16, one binary,
# alternating run by run (bench/ab.sh with the same hoist on both sides: 12 runs a case), the
# page cache read again (cat) before every run.
set -uo pipefail
export OUT
b=/tmp/build-bench; m=/tmp/hoist-models/qwen3-4b; h=$b/launch/hoist
RUNS=6 CASES="--tp 2 --rank 1;--tp 2 --rank 1 --cpu-bind none --threads 16" bash bench/ab.sh $h $h $m > $OUT/threads.jsonl 2> /tmp/ab.err
$b/bench/hoist-bench-h2d 8 7 > $OUT/h2d.json 2>&1
g=$(python3 -c "import json;print(max(json.loads(l)['gib_s'] for l in open('$OUT/h2d.json') if 'gib_s' in l))")
echo "ceiling $g"
python3 - $OUT/threads.jsonl $g <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
g = float(sys.argv[2])
for case in dict.fromkeys(r["case"] for r in rows):
    rs = [r for r in rows if r["case"] == case and not r.get("failed")]
    ms = sorted(r["ms"] for r in rs)
    med = statistics.median(ms)
    gib = rs[0]["bytes"] / 2**30 / (med / 1e3)
    busy = statistics.median(r["busy"]["h2d"] / r["phases"]["h2d"] for r in rs)
    fill = statistics.median(r["busy"]["read"] / r["phases"]["read"] for r in rs)
    print(f"{case:45} n {len(rs)} median {med:.1f} ms [{ms[0]:.1f}-{ms[-1]:.1f}] = {gib:.2f} GiB/s = {gib/g:.0%}; engine busy {busy:.2f}; fill threads busy {fill:.1f}")
PY
