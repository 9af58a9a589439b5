#!/usr/bin/env python3
"""Holds a cross-host load's --report-json to what its dedup mode promises.

Usage: check_report.py REPORT COUNTS MODE HOST...  (COUNTS: plan_bytes.py's output for the groups
of ranks on each HOST, in the same order; MODE: job, node or none; HOST: the host each group's
ranks must report, in rank order of the groups). Prints the per-host figures; exits 1 naming the
first broken promise:
  - every rank ran on the host the topology gave it (the report's host: its gethostname), and
    the report's per-host figures (`hosts`) are its ranks' sums;
  - each rank's needed bytes were read by it or received: storage + received = needed;
  - bytes sent = bytes received, over the job;
  - job: the whole job read the union of what its ranks need, once, and, over several hosts,
    bytes crossed hosts (some host read less than it needs); node: each host read the union of
    its own ranks' needs
    and nothing crossed hosts; none: every rank read all it needs, nothing was forwarded.
"""
import json
import sys


def fail(msg):
    print("check_report: FAIL: " + msg)
    sys.exit(1)


def per_host(report, hosts, counts):
    ranks = report["ranks"]
    figures, r = [], 0
    for g, host in enumerate(hosts):
        fig = {"host": host, "storage": 0, "sent": 0, "received": 0, "union": counts["union"][g]}
        while r < len(ranks) and ranks[r]["host"] == host:
            rep = ranks[r]
            need = counts["needed"][r]
            if rep["bytes_read_from_storage"] + rep["bytes_received"] != need:
                fail(f"rank {r}: read {rep['bytes_read_from_storage']} + received "
                     f"{rep['bytes_received']} != the {need} bytes its copies need")
            for k, key in (("storage", "bytes_read_from_storage"), ("sent", "bytes_sent"),
                           ("received", "bytes_received")):
                fig[k] += rep[key]
            r += 1
        figures.append(fig)
    if r != len(ranks):
        fail(f"rank {r} reports host {ranks[r]['host']!r}; expected ranks on {hosts} in order")
    return figures


def check_hosts_section(report, figures):
    """The report's own per-host figures (`hosts`) are the sums of its ranks'."""
    if len(report["hosts"]) != len(figures):
        fail(f"the report's hosts {report['hosts']} are not the {len(figures)} hosts")
    for got, want in zip(report["hosts"], figures):
        for k, key in (("host", "host"), ("storage", "bytes_read_from_storage"),
                       ("sent", "bytes_sent"), ("received", "bytes_received")):
            if got[key] != want[k]:
                fail(f"the report's hosts entry {got} says {key} {got[key]}, its ranks {want[k]}")


def main():
    report = json.load(open(sys.argv[1]))
    counts = json.load(open(sys.argv[2]))
    mode, hosts = sys.argv[3], sys.argv[4:]
    if report["dedup"] != mode:
        fail(f"the plan's dedup is {report['dedup']!r}, not {mode!r}")
    figures = per_host(report, hosts, counts)
    check_hosts_section(report, figures)
    for f in figures:
        print("  {host}: read {storage} B from storage (its ranks need {union} B distinct), "
              "sent {sent} B, received {received} B".format(**f))
    storage = sum(f["storage"] for f in figures)
    if sum(f["sent"] for f in figures) != sum(f["received"] for f in figures):
        fail("bytes sent != bytes received over the job")
    if mode == "job":
        if storage != counts["union_all"]:
            fail(f"job read {storage} B, not the {counts['union_all']} B its ranks need once")
        if len(figures) > 1 and not any(f["storage"] < f["union"] for f in figures):
            fail("no host read less than it needs: nothing was forwarded between hosts")
    elif mode == "node":
        for f in figures:
            if f["storage"] != f["union"]:
                fail(f"{f['host']} read {f['storage']} B, not the {f['union']} B its ranks need")
    elif sum(f["received"] for f in figures) != 0:
        fail("dedup none forwarded bytes")
    elif storage != sum(counts["needed"]):
        fail("dedup none: the ranks did not each read all they need")
    print(f"check_report: {mode}: ok")


if __name__ == "__main__":
    main()
