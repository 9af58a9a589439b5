#!/usr/bin/env python3
"""Why the copy engine idled in one load, from its Chrome trace (hoist load --trace).

    bench/gaps.py TRACE.json LABEL   -> one JSON line on stdout

Each idle gap on lane h2d-0 before a slot's copies (span "slot K seq Q") is put down to one of:
  - fill: its submit (lane "submit", span "seq Q": it begins as the slot's last read ends) began
    after the engine went idle (the reads were late);
  - submit: its submit began in time but ended after the engine went idle (the submit lock, or
    the calls that enqueue the copies);
  - device: it was submitted before the engine went idle, yet its copies began later (a wait on
    the device: packed loads wait for the decode that last read the device slot).
For fill gaps: how long after its staging slot was free (the copies of the slot's previous
sequence done) the slot's first read began, and how long its reads took from first start to last
end. Also: the gap before the first copy, submit time per slot (median, p90, max), for packed
loads how long after its copies each slot's decode began and ran, and when the decoder was made
(lane "decoder") against the first read, the device's steps of that making, and how fast the
copies ran while it did."""
import json
import re
import statistics
import sys

from lanes import spans_by_lane  # bench/lanes.py, beside this script


def seq_of(name):
    m = re.search(r"seq (\d+)", name)
    return int(m.group(1)) if m and " x" not in name else None


def quantiles(xs):
    if not xs:
        return None
    xs = sorted(xs)
    return {"median": round(statistics.median(xs), 1), "p90": round(xs[int(0.9 * (len(xs) - 1))], 1),
            "max": round(xs[-1], 1)}


def during_making(lanes, h2d):
    """The copies that overlapped the decoder's making: their count, rate and the slowest."""
    made = [e for e in lanes.get("decoder", []) if e["name"] == "decoder made"]
    if not made:
        return None
    a, z = made[0]["ts"], made[0]["ts"] + made[0]["dur"]
    inside = [e for e in h2d if e["ts"] < z and e["ts"] + e["dur"] > a]
    busy = sum(e["dur"] for e in inside)
    moved = sum(e.get("args", {}).get("bytes", 0) for e in inside)
    return {"copies": len(inside), "gib_s": round(moved / busy / 1.073741824e3, 1) if busy else None,
            "slowest_us": round(max((e["dur"] for e in inside), default=0), 1)}


def main():
    path, label = sys.argv[1], sys.argv[2]
    lanes = spans_by_lane(path)
    h2d = sorted(lanes.get("h2d-0", []), key=lambda e: e["ts"])
    submit = {seq_of(e["name"]): e for e in lanes.get("submit", [])}
    reads = {}  # seq -> (first start, last end) of its reads (ungrouped spans only)
    for lane, spans in lanes.items():
        if lane.startswith("fill-"):
            for e in spans:
                q = seq_of(e["name"])
                if q is not None:
                    a, z = reads.get(q, (e["ts"], e["ts"] + e["dur"]))
                    reads[q] = (min(a, e["ts"]), max(z, e["ts"] + e["dur"]))
    h2d_by_seq = {seq_of(e["name"]): e for e in h2d}
    ring = len({re.search(r"slot (\d+)", e["name"]).group(1) for e in h2d if "slot " in e["name"]})
    late_start, read_time = [], []
    cause = {"fill": 0.0, "submit": 0.0, "device": 0.0, "unknown": 0.0}
    count = dict.fromkeys(cause, 0)
    for prev, e in zip(h2d, h2d[1:]):
        idle_from = prev["ts"] + prev["dur"]
        gap = e["ts"] - idle_from
        if gap <= 5:  # microseconds: back to back
            continue
        q = seq_of(e["name"])
        s = submit.get(q)
        if q is None or s is None:
            c = "unknown"
        elif s["ts"] > idle_from:
            c = "fill"
            prev_use = h2d_by_seq.get(q - ring) if ring else None
            if q in reads:
                if prev_use is not None:
                    late_start.append(reads[q][0] - (prev_use["ts"] + prev_use["dur"]))
                read_time.append(reads[q][1] - reads[q][0])
        elif s["ts"] + s["dur"] > idle_from:
            c = "submit"
        else:
            c = "device"
        cause[c] += gap
        count[c] += 1
    decode_wait, decode_run = [], []
    for e in lanes.get("decode-0", []):
        copy = h2d_by_seq.get(seq_of(e["name"]))
        if copy is not None:
            decode_wait.append(e["ts"] - (copy["ts"] + copy["dur"]))
            decode_run.append(e["dur"])
    first_read = min((e["ts"] for lane, v in lanes.items() if lane.startswith("fill-") for e in v),
                     default=None)
    print(json.dumps({
        "kind": "gaps", "label": label, "slots": len(h2d),
        "h2d_busy_ms": round(sum(e["dur"] for e in h2d) / 1e3, 2),
        "h2d_extent_ms": round((h2d[-1]["ts"] + h2d[-1]["dur"] - h2d[0]["ts"]) / 1e3, 2) if h2d else 0,
        "first_copy_after_first_read_ms": round((h2d[0]["ts"] - first_read) / 1e3, 3)
        if h2d and first_read is not None else None,
        "gap_ms": {c: round(v / 1e3, 2) for c, v in cause.items()}, "gaps": count,
        "fill_gap_read_start_after_slot_free_us": quantiles(late_start),
        "fill_gap_reads_us": quantiles(read_time),
        "decoder_made": [{"after_first_read_ms": round((e["ts"] - first_read) / 1e3, 3)
                          if first_read is not None else None, "ms": round(e["dur"] / 1e3, 3)}
                         for e in lanes.get("decoder", []) if e["name"] == "decoder made"],
        "decoder_steps_ms": {e["name"]: round(e["dur"] / 1e3, 3)
                             for e in lanes.get("decoder", []) if e["name"] != "decoder made"},
        "copies_during_making": during_making(lanes, h2d),
        "submit_us": quantiles([e["dur"] for e in submit.values()]),
        "decode_start_after_copy_us": quantiles(decode_wait), "decode_us": quantiles(decode_run)}))


if __name__ == "__main__":
    main()
