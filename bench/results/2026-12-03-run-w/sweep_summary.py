"""Summarizes a run W rounds.jsonl: each load against its own round's pinned-H2D ceiling, and the
median start of every phase before the first copy (ms into `total`)."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
ceil = {r["round"]: r["gib_s"] for r in rows if r["label"] == "ceiling"}
print("ceilings GiB/s", [round(ceil[k], 2) for k in sorted(ceil)])
labels = []
for r in rows:
    if r["label"] != "ceiling" and r["label"] not in labels:
        labels.append(r["label"])
for label in labels:
    rs = [r for r in rows if r["label"] == label]
    ratio = [r["bytes"] / 2**30 / (r["ms"] / 1e3) / ceil[r["round"]] for r in rs]
    med = lambda f: statistics.median(f(r) for r in rs)
    print(f"{label:14} thr {rs[0]['threads']:2} ms {[round(r['ms'], 1) for r in rs]} median {med(lambda r: r['ms']):.1f}; "
          f"vs round ceiling median {statistics.median(ratio):.1%} [{min(ratio):.0%}-{max(ratio):.0%}]; "
          f"busy {med(lambda r: r['h2d_busy']):.0%}; fill busy {med(lambda r: r['limit'].get('fill_busy', 0)):.0%}; "
          f"limits {[r['limit']['kind'] for r in rs]} ok {all(r['ok'] for r in rs)}")
    starts = {k: med(lambda r: r["phases"][k][0]) for k in rs[0]["phases"]}
    secs = {k: med(lambda r: r["phases"][k][1]) for k in rs[0]["phases"]}
    print("    phase start/ms:", ", ".join(f"{k} {starts[k]:.2f}+{secs[k]:.2f}" for k in starts))
