#!/usr/bin/env python3
"""Summarises bench/packed.sh's packed.jsonl as Markdown: sizes, the codec's GPU decode rate,
this call's ceilings, and original against packed loads (hot, cold per read mode, restore,
tp 2 per rank) as medians with effective GiB/s of original bytes."""
import json
import statistics
import sys
from collections import defaultdict

GIB = 1024.0 ** 3
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
by = defaultdict(list)
for r in rows:
    by[r.get("kind")].append(r)
med = statistics.median

h2d = med([r["gib_s"] for r in by["h2d_ceiling"]]) if by["h2d_ceiling"] else float("nan")
print(f"Pinned H2D ceiling of this call: {h2d:.1f} GiB/s (median of {len(by['h2d_ceiling'])} runs)\n")

print("| checkpoint | original GB | packed GB | packed/original | pack s |")
print("|---|---|---|---|---|")
for r in by["pack"]:
    print(f"| {r['model']} | {r['original']/1e9:.3f} | {r['packed']/1e9:.3f} | "
          f"{r['packed']/r['original']:.1%} | {r['seconds']:.1f} |")
print()
dec = [r for r in by["codec"] if r.get("what") == "decode" and "gpu_decode_gib_s" in r]
if dec:
    print("| checkpoint | codec size | GPU decode GiB/s | x H2D ceiling |")
    print("|---|---|---|---|")
    for r in dec:
        print(f"| {r.get('model', r['source'])} | {r['compressed_bytes']/r['original_bytes']:.1%} | "
              f"{r['gpu_decode_gib_s']:.0f} | {r['gpu_decode_gib_s']/h2d:.1f}x |")
    print()
if by["io_ceiling"]:
    print("O_DIRECT rate of this call (cold, 16 threads x 16 queued 4 MiB requests): " + ", ".join(
        f"{r['model']} {r['gib_s']:.2f} GiB/s" for r in by["io_ceiling"]) + "\n")
rounds = defaultdict(list)
for r in by["io_round"]:
    rounds[(r["model"], r.get("files", "original"))].append(r)
for (model, files), rs in sorted(rounds.items()):
    runs = ", ".join("%.2f" % r["gib_s"] for r in rs)
    print(f"O_DIRECT reader in the cold rounds, {model} {files} files: median "
          f"{med([r['gib_s'] for r in rs]):.2f} GiB/s, {med([r['seconds'] for r in rs]):.2f} s "
          f"(runs {runs})")
if rounds:
    print()

loads = defaultdict(list)
for r in by["load"]:
    if r.get("failed"):
        loads[(r["label"], r["temp"], -1)].append(None)
        continue
    loads[(r["label"], r["temp"], r["rank"])].append(r)
print("| load | temp | rank | runs | median total s | effective GiB/s | % of H2D | read GB | h2d GB | decode s |")
print("|---|---|---|---|---|---|---|---|---|---|")
eff = {}
for (label, temp, rank), rs in sorted(loads.items()):
    ok = [r for r in rs if r]
    if not ok:
        print(f"| {label} | {temp} | | FAILED {len(rs)} | | | | | | |")
        continue
    t = med([r["total_s"] for r in ok])
    e = ok[0]["payload"] / GIB / t
    eff[(label, temp, rank)] = (t, e)
    print(f"| {label} | {temp} | {rank} | {len(ok)} | {t:.3f} | {e:.1f} | {e/h2d:.0%} | "
          f"{med([r['bytes_read'] for r in ok])/1e9:.2f} | {med([r['bytes_h2d'] for r in ok])/1e9:.2f} | "
          f"{med([r['phases'].get('decode', 0) for r in ok]):.3f} |")
print()
print("Packed against original, same call, same temperature and read mode (median total time):\n")
for (label, temp, rank), (t, e) in sorted(eff.items()):
    if "/packed" not in label:
        continue
    base = (label.replace("/packed", "/original"), temp, rank)
    if base in eff:
        print(f"- {label} {temp} rank {rank}: {eff[base][0]/t:.2f}x faster "
              f"({eff[base][0]:.3f} s -> {t:.3f} s)")
print()
rest = defaultdict(list)
for r in by["restore"]:
    rest[r["label"]].append(r["gib_s"])
for label, v in rest.items():
    m = med(v)
    print(f"- restore {label}: {m:.1f} GiB/s effective (median of {len(v)}), {m/h2d:.0%} of H2D")
both = by["h2d_ceiling_both"]
if both:
    print("\nH2D with both GPUs copying at once: " + ", ".join(f"GPU {r['gpu']} {r['gib_s']:.1f} GiB/s" for r in both))
hc = by["host_copy_both"]
if hc:
    print("\nHost copy (page cache -> user memory) with two readers at once: " + ", ".join(
        f"{r['model']} reader {r['reader']} {r['gib_s']:.1f} GiB/s" for r in hc))
