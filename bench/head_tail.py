"""A load's head and tail from its Chrome trace (hoist load --trace), in ms from `bind`'s start
(the trace has no `total`; bind starts it):
the set-up, sources and teardown spans, when each fill lane began its first read (the first and
the last lane to begin), the first and last device copy. Usage: head_tail.py TRACE LABEL"""
import json
import sys

events = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
xs = [e for e in events if e.get("ph") == "X"]
t0 = next(e for e in xs if e.get("name") == "bind" and e.get("tid", 0) == 0)["ts"]
ms = lambda us: round((us - t0) / 1e3, 3)
lanes = {}
for e in xs:
    if e.get("tid", 0) != 0:
        lanes.setdefault(names.get((e["pid"], e["tid"]), ""), []).append(e)
out = {"label": sys.argv[2],
       "phases": {e["name"]: [ms(e["ts"]), round(e["dur"] / 1e3, 3)] for e in xs if e.get("tid", 0) == 0}}
for lane in ("sources", "setup", "teardown"):
    out[lane] = [[e["name"], ms(e["ts"]), round(e["dur"] / 1e3, 3)] for e in sorted(lanes.get(lane, []), key=lambda e: e["ts"])]
firsts = sorted(min(e["ts"] for e in es) for l, es in lanes.items() if l.startswith("fill"))
if firsts:
    out["fill_first_read"] = [ms(firsts[0]), ms(firsts[len(firsts) // 2]), ms(firsts[-1])]
    out["fill_lanes"] = len(firsts)
h2d = sorted((e for l, es in lanes.items() if l.startswith("h2d") for e in es), key=lambda e: e["ts"])
if h2d:
    out["h2d_first"] = [ms(h2d[0]["ts"]), round(h2d[0]["dur"] / 1e3, 3), h2d[0]["name"]]
    out["h2d_last_end"] = ms(max(e["ts"] + e["dur"] for e in h2d))
    out["h2d_spans"] = len(h2d)
print(json.dumps(out))
