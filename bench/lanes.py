#!/usr/bin/env python3
"""Where a load's device lanes spent their time, from a Chrome trace (hoist load --trace).

    bench/lanes.py TRACE.json LABEL   -> one JSON line per lane (h2d-*, decode-*) on stdout

Per lane: spans, bytes, the lane's extent (first start to last end), busy time and its share of
the extent, the idle gaps between spans (count, sum, the largest), and the per-span rate
(GiB/s: median, p10, p90) of spans of at least 1 MiB."""
import json
import statistics
import sys


def spans_by_lane(trace):
    """A trace's spans ("X" events off the phases row), grouped by their lane's name."""
    events = json.load(open(trace))["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lanes = {}
    for e in events:
        if e.get("ph") == "X" and e.get("tid", 0) != 0:
            lanes.setdefault(names.get((e["pid"], e["tid"]), ""), []).append(e)
    return lanes


def main():
    trace, label = sys.argv[1], sys.argv[2]
    lanes = {lane: spans for lane, spans in spans_by_lane(trace).items()
             if lane.startswith(("h2d", "decode"))}
    for lane, spans in sorted(lanes.items()):
        spans.sort(key=lambda e: e["ts"])
        busy = sum(e["dur"] for e in spans)
        start, end = spans[0]["ts"], max(e["ts"] + e["dur"] for e in spans)
        gaps, reach = [], spans[0]["ts"]
        for e in spans:
            if e["ts"] > reach:
                gaps.append(e["ts"] - reach)
            reach = max(reach, e["ts"] + e["dur"])
        rates = sorted(e["args"]["bytes"] / (e["dur"] * 1e-6) / 2**30 for e in spans
                       if e["dur"] > 0 and e["args"]["bytes"] >= 1 << 20)
        q = lambda f: round(rates[int(f * (len(rates) - 1))], 2) if rates else None
        print(json.dumps({
            "kind": "lane", "label": label, "lane": lane, "spans": len(spans),
            "bytes": sum(e["args"]["bytes"] for e in spans),
            "extent_ms": round((end - start) / 1e3, 2), "busy_ms": round(busy / 1e3, 2),
            "busy_share": round(busy / max(end - start, 1e-9), 4),
            "gaps": len(gaps), "gap_ms": round(sum(gaps) / 1e3, 2),
            "max_gap_ms": round(max(gaps, default=0) / 1e3, 3),
            "rate_gib_s": {"median": round(statistics.median(rates), 2) if rates else None,
                           "p10": q(0.1), "p90": q(0.9)}}))


if __name__ == "__main__":
    main()
