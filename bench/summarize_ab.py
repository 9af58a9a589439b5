#!/usr/bin/env python3
"""Medians of bench/ab.sh's JSON lines: one row per case, old against new, with the phases that
moved most. Usage: summarize_ab.py AB.jsonl [h2d_ceiling_gib_s]
With "ceiling" lines (ab.sh's CEILING_BIN, or READER_BIN for cold runs), a last column rates each
run against the ceiling of its own round: the median of those ratios, with their range."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
ceiling = float(sys.argv[2]) if len(sys.argv) > 2 else None
round_ceiling = {r["round"]: r["gib_s"] for r in rows if r.get("kind") == "ceiling"}


def gib_s(r, ms):
    """Effective GiB/s of a run's line over `ms`: the rank's logical bytes (a packed load moves
    fewer); older lines lack them."""
    return (r.get("logical_bytes") or r["bytes"]) / 2**30 / (ms / 1e3)


def rated(rs):
    """Each run's rate over its round's ceiling, as "median [min-max]"; "-" without ceilings."""
    xs = sorted(gib_s(r, r["ms"]) / round_ceiling[r["round"]] for r in rs
                if r.get("round") in round_ceiling)
    return f"{statistics.median(xs):.0%} [{xs[0]:.0%}-{xs[-1]:.0%}]" if xs else "-"


by = defaultdict(list)
for r in rows:
    if r.get("kind") == "ab" and not r.get("failed"):
        by[(r["case"], r["build"])].append(r)
print("| case | build | n | load ms (median [min-max]) | GiB/s | vs H2D | prepare | read | h2d (busy) "
      "| setup | staging_alloc | vs its round's ceiling |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for case in dict.fromkeys(c for c, _ in by):
    for b in ("old", "new"):
        rs = by.get((case, b), [])
        if not rs:
            continue
        ms = [r["ms"] for r in rs]
        med = statistics.median(ms)
        gib = gib_s(rs[0], med)
        ph = lambda n: statistics.median([r["phases"].get(n, 0) for r in rs])
        busy = lambda n: statistics.median([r.get("busy", {}).get(n, 0) for r in rs])
        vs = f"{gib / ceiling:.0%}" if ceiling else "-"
        print(f"| {case} | {b} | {len(rs)} | {med:.1f} [{min(ms):.1f}-{max(ms):.1f}] | {gib:.2f} | {vs} "
              f"| {ph('prepare'):.1f} | {ph('read'):.1f} | {ph('h2d'):.1f} ({busy('h2d'):.1f}) | {ph('setup'):.1f} "
              f"| {ph('staging_alloc'):.1f} | {rated(rs)} |")
fails = [r for r in rows if r.get("failed")]
if fails:
    print(f"\n{len(fails)} failed runs: " + ", ".join(f"{r['build']} {r['case']}" for r in fails))
