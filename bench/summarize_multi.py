#!/usr/bin/env python3
"""Turns bench/multi.sh's multi.jsonl into the several-GPU tables of docs/BENCHMARKS.md.

Per configuration (tp N, dp N, ep N; dedup none/node/auto; hot/cold): the slowest rank's load
(its `total` phase) as median [min-max] over the runs, each rank's GiB/s (its arena bytes:
read + received, over its load), each rank's PCIe rate (its host-to-device bytes over its load)
against that GPU's pinned H2D ceiling measured in the same call with every GPU copying at once,
the bytes read from storage, and the process wall (mpirun to exit) minus the slowest rank's
load. The host copy rate (bench/io_ceiling.cc, one process per rank at once) is printed beside
them, and flagged when hoist itself reads the page cache faster: then it is no ceiling. Then the
ratios the targets name.
"""
import json
import statistics
import sys
from collections import defaultdict

GiB = 1024 ** 3


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def span(xs, scale=1.0, fmt="%.1f"):
    if not xs:
        return "-"
    return (fmt + " [" + fmt + "-" + fmt + "]") % (med(xs) * scale, min(xs) * scale,
                                                    max(xs) * scale)


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    by = defaultdict(list)
    for r in rows:
        by[r["kind"]].append(r)
    h2d_alone = {r["gpu"]: r["gib_s"] for r in by["h2d_alone"]}
    h2d_conc = {r["gpu"]: r["gib_s"] for r in by["h2d_concurrent"]}
    mem_alone = med([r["gib_s"] for r in by["memcpy_alone"]])
    mem_conc = {r["rank"]: r["gib_s"] for r in by["memcpy_concurrent"]}
    out = []
    out.append("Pinned H2D ceiling per GPU (GiB/s, median of the timed copies): alone " +
               ", ".join("gpu%d %.2f" % (g, v) for g, v in sorted(h2d_alone.items())) +
               "; all GPUs at once " +
               ", ".join("gpu%d %.2f" % (g, v) for g, v in sorted(h2d_conc.items())) + ".")
    out.append("Host copy ceiling (page cache -> memory, buffered pread): one process %.2f GiB/s; "
               "one process per rank at once on disjoint cores " % mem_alone +
               ", ".join("rank%d %.2f" % (k, v) for k, v in sorted(mem_conc.items())) +
               " GiB/s.")
    out.append("")

    groups = defaultdict(list)
    for r in by["hoist"]:
        if r.get("failed") or r["label"] == "warmup":
            continue
        groups[(r["label"], r["temp"])].append(r)
    failed = [r for r in by["hoist"] if r.get("failed")]
    out.append("| run | cache | n | dedup chosen | slowest rank load ms | per-rank GiB/s (median) "
               "| PCIe GiB/s per rank, vs H2D ceiling (hot) | storage bytes | process - load ms (mpirun start; exit) "
               "| fill threads / cpus |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    slowest = {}
    fastest_read = {}  # rank -> hoist's best page-cache read rate (storage bytes / load), hot
    for (label, temp), rs in sorted(groups.items(), key=lambda kv: (kv[0][1] != "hot", kv[0])):
        loads = [max(k["load_s"] for k in r["ranks"]) for r in rs]
        slowest[(label, temp)] = loads
        ranks = sorted({k["rank"] for r in rs for k in r["ranks"]})
        rates, vs = [], []
        for rank in ranks:
            mine = [k for r in rs for k in r["ranks"] if k["rank"] == rank and k["load_s"] > 0]
            rates.append("r%d %.1f" % (rank, med([k["bytes"] / GiB / k["load_s"] for k in mine])))
            if temp != "hot":
                continue
            pcie = med([k["bytes_h2d"] / GiB / k["load_s"] for k in mine])
            if h2d_conc.get(rank):
                vs.append("r%d %.1f = %.0f%%" % (rank, pcie, 100 * pcie / h2d_conc[rank]))
            read = med([k["storage"] / GiB / k["load_s"] for k in mine])
            fastest_read[rank] = max(fastest_read.get(rank, 0.0), read)
        storage = med([sum(k["storage"] for k in r["ranks"]) for r in rs])
        gap = [r["process_s"] - max(k["load_s"] for k in r["ranks"]) for r in rs]
        launch = med([r.get("launch_s", float("nan")) for r in rs])
        leave = med([r.get("exit_s", float("nan")) for r in rs])
        k0 = rs[0]["ranks"]
        cpus = "; ".join("%d / %s" % (k["threads"], k["cpus"]) for k in k0)
        out.append("| hoist %s | %s | %d | %s | %s | %s | %s | %.2f GB | %s | %s |" % (
            label, temp, len(rs), rs[0]["dedup"], span(loads, 1e3), ", ".join(rates),
            ", ".join(vs) if vs else "-", storage / 1e9,
            "%s (%.0f; %.0f)" % (span(gap, 1e3, "%.0f"), launch * 1e3, leave * 1e3), cpus))
    for temp in ("hot", "cold"):
        alone = [r["load_s"] for r in by["alone"] if r["temp"] == temp]
        if alone:
            out.append("| hoist one rank alone, whole model | %s | %d | - | %s | %.1f | - | - | - "
                       "| - |" % (temp, len(alone), span(alone, 1e3),
                                  med([r["bytes"] / GiB / r["load_s"] for r in by["alone"]
                                       if r["temp"] == temp])))
    st = defaultdict(list)
    for r in by["peer_multi"]:
        st[(r["temp2"], r["run"])].append(r["seconds"])
    for temp in ("hot", "cold"):
        runs = [max(v) for (t, _), v in st.items() if t == temp]
        if runs:
            out.append("| safetensors.load_file, one process per GPU at once (whole model each) | "
                       "%s | %d | - | %s (slowest process) | - | - | - | - | - |" %
                       (temp, len(runs), span(runs, 1e3)))
    out.append("")
    for rank, rate in sorted(fastest_read.items()):
        if rank in mem_conc and rate > mem_conc[rank]:
            out.append("- rank %d: hoist reads the page cache at %.1f GiB/s over a whole load, "
                       "faster than the host copy tool's %.1f GiB/s: that tool is no ceiling" %
                       (rank, rate, mem_conc[rank]))
    reasons = sorted({(r["label"], r["dedup_reason"]) for r in by["hoist"]
                      if r.get("dedup_reason") and r["label"].endswith("auto")})
    for label, reason in reasons:
        out.append("- %s: dedup %s" % (label, reason))

    def ratio(a, b, temp="hot"):
        x, y = slowest.get((a, temp)), slowest.get((b, temp))
        if not x or not y:
            return None
        return med(x) / med(y)

    out.append("")
    for cfg in sorted({l.split("-")[0] for (l, _) in groups}):
        for dd in ("node", "auto"):
            for temp in ("hot", "cold"):
                r = ratio("%s-%s" % (cfg, dd), "%s-none" % cfg, temp)
                if r is not None:
                    out.append("- %s %s, dedup %s / dedup none (slowest rank's load): %.2f" %
                               (cfg, temp, dd, r))
    alone_cold = [r["load_s"] for r in by["alone"] if r["temp"] == "cold"]
    for cfg in sorted({l.split("-")[0] for (l, _) in groups}):
        x = slowest.get(("%s-node" % cfg, "cold"))
        if x and alone_cold and cfg.startswith("dp"):
            out.append("- %s cold dedup node / one rank reading the model alone: %.2f" %
                       (cfg, med(x) / med(alone_cold)))
    for r in failed:
        out.append("- FAILED: %s %s" % (r["label"], r["temp"]))
    print("\n".join(out))


if __name__ == "__main__":
    main()
