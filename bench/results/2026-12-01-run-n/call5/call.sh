# Cold, with the fixed rotation: 4 rounds over 4 items (original and packed, auto and direct), so
# every item leads a round once; the reader over both file sets first in every round.
R=$OUT && export AUX=/tmp/aux MODELS=/tmp/hoist-models PYTHONUNBUFFERED=1 HF=0 BUILD_DIR=/tmp/hb
OUT=$R/cold PACK=1 RUNS_COLD=4 STAGES="ceilings cold" COLD_MODES="auto;direct" bash bench/packed.sh > $R/log-cold.txt 2>&1
python3 - $R/cold/packed.jsonl <<'PY' > $R/order.txt
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("kind") == "load": print(r["label"], round(r["total_s"], 3), r.get("deep"), r.get("threads"))
    elif r.get("kind") == "io_round": print("reader", r["files"], r["round"], r["gib_s"])
PY
grep -E "reader|cold \| 0|faster|ceiling" $R/cold/PACKED.md; cat $R/order.txt
