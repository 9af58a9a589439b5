#!/usr/bin/env python3
"""Table of bench/cold_square.sh's runs: per side the median GiB/s with its range, the median
against the reader's median, the median of each run against the reader of its own round, the
ring it used (fill threads x slots, deep or not), and per position the median of every side.

  python3 bench/summarize_cold.py cold.jsonl
"""
import json
import statistics
import sys


def main(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    failed = [r for r in rows if r.get("failed")]
    rows = [r for r in rows if not r.get("failed")]
    sides = list(dict.fromkeys(r["side"] for r in rows))
    reader = {r["round"]: r["gib_s"] for r in rows if r["side"] == "reader"}
    reader_median = statistics.median(reader.values()) if reader else None
    print("| side | n | GiB/s (median [min-max]) | vs reader's median | vs its round's reader "
          "(median [min-max]) | ring |")
    print("| --- | --- | --- | --- | --- | --- |")
    for side in sides:
        mine = [r for r in rows if r["side"] == side]
        xs = [r["gib_s"] for r in mine]
        vs = "-" if reader_median is None else "%.0f%%" % (100 * statistics.median(xs) /
                                                           reader_median)
        own = [r["gib_s"] / reader[r["round"]] for r in mine if r["round"] in reader]
        own_s = "-" if side == "reader" or not own else "%.0f%% [%.0f%%-%.0f%%]" % (
            100 * statistics.median(own), 100 * min(own), 100 * max(own))
        rings = sorted({"%s x %s%s" % (r["threads"], r["slots"], " deep" if r.get("deep") else "")
                        for r in mine if "threads" in r})
        print("| %s | %d | %.3f [%.3f-%.3f] | %s | %s | %s |" % (
            side, len(xs), statistics.median(xs), min(xs), max(xs), vs, own_s,
            ", ".join(rings) or "-"))
    positions = sorted({r["pos"] for r in rows})
    print()
    print("position medians (all sides): " + ", ".join(
        "%d: %.3f" % (p, statistics.median(r["gib_s"] for r in rows if r["pos"] == p))
        for p in positions))
    if failed:
        print("failed runs: " + ", ".join("%s round %d" % (r["side"], r["round"]) for r in failed))


if __name__ == "__main__":
    main(sys.argv[1])
