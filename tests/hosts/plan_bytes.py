#!/usr/bin/env python3
"""Source bytes a plain plan's ranks need, counted byte range by byte range from its copies.

Usage: plan_bytes.py PLAN_TEXT GROUP...   (PLAN_TEXT: `protoc --decode=hoist.proto.LoadPlan` of a
`hoist plan --dedup none --out` plan; each GROUP a comma-separated list of ranks, e.g. the ranks
of one host). Prints JSON: {"needed": bytes each rank's copies read, in rank order, "union":
[the size of the union of the source bytes each group's ranks need], "union_all": that of every
rank}. Shares no code with hoist's dedup planner: it is the independent count the cross-host
tests hold the reports' bytes_read_from_storage to.
"""
import json
import sys


def parse_ranks(text):
    """Each rank's copies as (file, src_offset, src_pitch, width, rows), in plan order."""
    ranks, stack, copy = [], [], None
    for line in text.splitlines():
        line = line.strip()
        if line.endswith("{"):
            name = line[:-1].strip()
            stack.append(name)
            if stack == ["ranks"]:
                ranks.append([])
            elif stack == ["ranks", "copies"]:
                copy = {}
        elif line == "}":
            if stack == ["ranks", "copies"]:
                ranks[-1].append(tuple(copy.get(k, 0) for k in
                                       ("file", "src_offset", "src_pitch", "width", "rows")))
            stack.pop()
        elif stack == ["ranks", "copies"] and ":" in line:
            key, value = line.split(":", 1)
            copy[key.strip()] = int(value)
    return ranks


def intervals(copies):
    for f, off, pitch, width, rows in copies:
        for r in range(rows):
            yield (f, off + r * pitch, off + r * pitch + width)


def union_size(copies):
    total, last = 0, None  # last: (file, end) of the merged run so far
    for f, lo, hi in sorted(intervals(copies)):
        if last and last[0] == f and lo < last[1]:
            if hi > last[1]:
                total += hi - last[1]
                last = (f, hi)
        else:
            total += hi - lo
            last = (f, hi)
    return total


def main():
    plans = parse_ranks(open(sys.argv[1]).read())
    groups = [[int(r) for r in g.split(",")] for g in sys.argv[2:]]
    # A compact plan (`hoist plan --out`) holds one rank plan per distinct rank: rank r runs plan
    # r % count (dp replicas share their tp rank's).
    world = max([r for g in groups for r in g] + [len(plans) - 1]) + 1
    ranks = [plans[r % len(plans)] for r in range(world)]
    print(json.dumps({
        "needed": [sum(w * n for _, _, _, w, n in c) for c in ranks],
        "union": [union_size([c for r in g for c in ranks[r]]) for g in groups],
        "union_all": union_size([c for cs in ranks for c in cs]),
    }))


if __name__ == "__main__":
    main()
