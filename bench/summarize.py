#!/usr/bin/env python3
"""Turns bench/bench.sh's results.jsonl into the markdown table of docs/BENCHMARKS.md.

Times are medians over runs with [min-max]. hoist's time is `load`: the rank's `total` phase
(arena and staging set-up included; process start, MPI/CUDA context creation and plan excluded),
`e2e`: plan + load (headers read, plan built, everything after the CUDA context exists), and
`process`: from hoist's main() to the report (CUDA context creation included, overlapped with
planning).
Ratios: hot runs against the pinned-H2D ceiling measured in the same call (ceiling time for the
same bytes / hoist time); cold runs against the best O_DIRECT read rate measured in the same
call; and safetensors' time over hoist's.
"""
import json
import statistics
import sys
from collections import defaultdict

GiB = 1024 ** 3


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def codec_table(rows, ceil_gibs):
    """hoist-bench-codec's lines (kind "codec"): sizes per dtype, decode rates on the "all" row."""
    sizes = [r for r in rows if r["kind"] == "codec" and r.get("what") == "size"]
    decode = {r["source"]: r for r in rows if r["kind"] == "codec" and r.get("what") == "decode"}
    if not sizes:
        return []
    out = ["", "| codec (hoist-bench-codec) | dtype | tensors (coded) | original GiB | compressed | "
               "CPU decode GiB/s | GPU decode GiB/s | GPU decode / H2D ceiling | H2D of compressed: GiB/s of original |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(sizes, key=lambda r: (r["source"], r["dtype"] == "all", r["dtype"])):
        d = decode.get(r["source"]) if r["dtype"] == "all" else None
        cells = ["", "", "", ""]
        if d:
            cells[0] = f"{d['cpu_decode_gib_s']:.2f} ({d['cpu_threads']} thr; 1 thr {d['cpu_decode_1thread_gib_s']:.2f})"
            if "gpu_decode_gib_s" in d:
                cells[1] = f"{d['gpu_decode_gib_s']:.1f}"
                cells[2] = f"{d['gpu_decode_gib_s'] / ceil_gibs:.1f}x" if ceil_gibs else ""
                cells[3] = f"{d['effective_h2d_gib_s']:.2f} (compressed {d['h2d_compressed_gib_s']:.2f})"
        out.append(f"| {r['source'].rstrip('/').split('/')[-1]} | {r['dtype']} | {r['tensors']} ({r['coded_tensors']}) | "
                   f"{r['original_bytes'] / GiB:.2f} | {r['ratio'] * 100:.1f}% | " + " | ".join(cells) + " |")
    return out


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    machine = open(sys.argv[2]).read().strip() if len(sys.argv) > 2 else ""
    h2d = [r for r in rows if r["kind"] == "h2d_ceiling"]
    ceil_gibs = med([r["gib_s"] for r in h2d])
    io_cold = [r for r in rows if r["kind"] == "io_ceiling" and r["temp"] == "cold"]
    best_io = max(io_cold, key=lambda r: r["gib_s"]) if io_cold else None
    io_hot = [r for r in rows if r["kind"] == "io_ceiling" and r["temp"] == "hot"]
    groups = defaultdict(list)
    for r in rows:
        if r["kind"] == "hoist" and not r.get("failed"):
            groups[(r["label"], r["temp"])].append(r)
    failed = [r for r in rows if r.get("failed")]
    peers = defaultdict(list)
    for r in rows:
        if r["kind"] == "peer":
            peers[r["temp"]].append(r)
    peer_med = {t: med([r["seconds"] for r in v]) for t, v in peers.items()}

    out = []
    out.append("Machine: " + machine.replace("\n", "; "))
    out.append("")
    if h2d:
        out.append(f"Pinned H2D ceiling: {ceil_gibs:.2f} GiB/s (median of {len(h2d)} x 7 runs of 8 GiB); "
                   f"cudaMallocHost 256 MiB: {med([r['mallochost_256mib_ms'] for r in h2d]):.1f} ms, "
                   f"touch+cudaHostRegister 256 MiB: {med([r['register_256mib_ms'] for r in h2d]):.1f} ms.")
    if best_io:
        out.append(f"O_DIRECT cold read ceiling (hoist-bench-io, best of a threads x request-size sweep): "
                   f"{best_io['gib_s']:.2f} GiB/s (" + ", ".join(
                       f"{r['threads']} thr x {r.get('chunk_mib', 8)} MiB"
                       + (f" x {r['depth']} queued" if r.get("depth", 1) > 1 else "")
                       + f" {r['gib_s']:.2f}" for r in io_cold) + ").")
    ring = [r for r in rows if r["kind"] == "ring_ceiling"]
    if ring:
        out.append("Ring DMA ceiling (hoist-bench-ring: a " + f"{ring[0]['slots']} x {ring[0]['slot_mib']} MiB"
                   " ring copied into an 8 GiB arena, no reading), warm arena / fresh arena: " + ", ".join(
                       f"{r['host']} {r['gib_s']:.2f} / {r['fresh_gib_s']:.2f} GiB/s"
                       + (f" ({r['ring_huge_kib'] >> 10} MiB on huge pages)" if r["ring_huge_kib"] >= 0 else "")
                       for r in ring) + ".")
    if io_hot:
        out.append(f"Buffered pread from page cache, 16 threads, to a plain buffer: {io_hot[0]['gib_s']:.2f} GiB/s.")
    out.append("")
    out.append("| run | cache | n | bytes | load ms (median [min-max]) | e2e ms | process ms | GiB/s (load) | vs ceiling | resident at start | safetensors / hoist (e2e) |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (label, temp), rs in sorted(groups.items(), key=lambda kv: (kv[0][1] != "hot", kv[0][0])):
        if label == "warmup":
            continue
        load = [r["phases"].get("total", float("nan")) for r in rs]
        e2e = [r["phases"].get("total", 0) + r["phases"].get("plan", 0) for r in rs]
        nbytes = rs[0]["bytes"]
        lm = med(load)
        rate = nbytes / GiB / lm
        if temp == "hot":
            vs = f"{(nbytes / GiB / ceil_gibs) / lm * 100:.0f}% of H2D" if h2d else "-"
            if io_hot:
                vs += f", {rate / io_hot[0]['gib_s'] * 100:.0f}% of host copy"
        else:
            vs = f"{rate / best_io['gib_s'] * 100:.0f}% of O_DIRECT" if best_io else "-"
        res = med([r["resident"] / max(1, r["bytes_read"]) for r in rs]) * 100
        peer = f"{peer_med[temp] / med(e2e):.1f}x" if temp in peer_med and label.startswith("tp1") else "-"
        out.append(f"| hoist {label} | {temp} | {len(rs)} | {nbytes / 1e9:.2f} GB | {lm * 1e3:.1f} [{min(load) * 1e3:.1f}-{max(load) * 1e3:.1f}] "
                   f"| {med(e2e) * 1e3:.1f} | {med([r['wall_s'] for r in rs]) * 1e3:.1f} | {rate:.2f} | {vs} | {res:.0f}% | {peer} |")
    for temp, rs in sorted(peers.items()):
        s = [r["seconds"] for r in rs]
        nbytes = rs[0]["bytes"]
        out.append(f"| safetensors.load_file(cuda) | {temp} | {len(rs)} | {nbytes / 1e9:.2f} GB | {med(s) * 1e3:.1f} [{min(s) * 1e3:.1f}-{max(s) * 1e3:.1f}] "
                   f"| - | - | {nbytes / GiB / med(s):.2f} | - | - | 1.0x |")
    out.append("")
    # Per-phase medians for the default mode, where the time goes.
    for label, temp in (("tp1-auto", "hot"), ("tp1-auto", "cold"), ("tp2r1-auto", "hot")):
        rs = groups.get((label, temp))
        if not rs:
            continue
        names = [n for n in rs[0]["phases"].keys()]
        cells = [f"{n} {med([r['phases'].get(n, 0) for r in rs]) * 1e3:.1f}" for n in names]
        out.append(f"Phases, {label} {temp} (median ms): " + ", ".join(cells) +
                   f"; read busy (summed over threads) {med([r['read_busy_s'] for r in rs]) * 1e3:.0f} ms.")
    reload = defaultdict(list)
    for r in rows:
        if r["kind"] == "reload":
            reload[(r["tp"], r["rank"])].append(r)
    if reload:
        out.append("")
        out.append("| repeated loads in one process (hoist::Load, hot) | bytes | first load ms (staging_alloc) "
                   "| later loads ms, median [min-max] (staging_alloc) | GiB/s later | vs H2D |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for (tp, rank), rs in sorted(reload.items()):
            first, later = rs[0], rs[1:]
            tot = [r["phases_ms"]["total"] for r in later]
            stg = med([r["phases_ms"].get("staging_alloc", 0) for r in later])
            rate = first["bytes"] / GiB / (med(tot) / 1e3) if tot else float("nan")
            vs = f"{rate / ceil_gibs * 100:.0f}%" if h2d else "-"
            out.append(f"| tp {tp} rank {rank} | {first['bytes'] / 1e9:.2f} GB | {first['phases_ms']['total']:.1f} "
                       f"({first['phases_ms'].get('staging_alloc', 0):.1f}) | {med(tot):.1f} [{min(tot):.1f}-{max(tot):.1f}] "
                       f"({stg:.1f}) | {rate:.2f} | {vs} |")
    attach = [r for r in rows if r["kind"] == "attach_engine"]
    attach_py = [r for r in rows if r["kind"] == "attach_py"]
    restore = [r for r in rows if r["kind"] == "restore"]
    if attach or attach_py or restore:
        out.append("")
        out.append("| daemon (`hoist serve --host-cache`, qwen3-4b tp 1) | n | median [min-max] | note |")
        out.append("| --- | --- | --- | --- |")
    if attach:
        ms = [r["ms"] for r in attach]
        out.append(f"| engine attach: every tensor usable, after its CUDA context exists (examples/engine_startup) | {len(ms)} | "
                   f"{med(ms):.1f} ms [{min(ms):.1f}-{max(ms):.1f}] | GEMM check {'PASS' if all(r['ok'] for r in attach) else 'FAIL'} |")
    if attach_py:
        ms = [r["attach_ms"] for r in attach_py]
        out.append(f"| Python `hoist.attach` -> dict of torch CUDA tensors ({attach_py[0]['tensors']} tensors) | {len(ms)} | "
                   f"{med(ms):.1f} ms [{min(ms):.1f}-{max(ms):.1f}] | {attach_py[0]['checked']} tensors equal to safetensors slices: "
                   f"{'yes' if all(r['ok'] for r in attach_py) else 'NO'} |")
    if restore:
        g = [r["gib_s"] for r in restore]
        s_ = [r["seconds"] for r in restore]
        vs = f"{med(g) / ceil_gibs * 100:.0f}% of the pinned-H2D ceiling" if h2d else ""
        out.append(f"| `hoist ctl restore` from the pinned host cache | {len(g)} | {med(s_) * 1e3:.1f} ms [{min(s_) * 1e3:.1f}-{max(s_) * 1e3:.1f}], "
                   f"{med(g):.2f} GiB/s | {vs} |")
        dma = [r for r in restore if "dma_s" in r]
        if dma:
            d = med([r["dma_s"] for r in dma])
            rate = restore[0]["gib_s"] * restore[0]["seconds"] / d
            vs_d = f", {rate / ceil_gibs * 100:.0f}% of the ceiling" if h2d else ""
            out.append(f"| the same restores, DMA alone (events on the stream) / new arena's allocation | {len(dma)} | "
                       f"{d * 1e3:.1f} ms ({rate:.2f} GiB/s{vs_d}) / {med([r['alloc_ms'] for r in dma]):.1f} ms | "
                       f"host-side overhead {(med(s_) - d) * 1e3:.1f} ms |")
    out += codec_table(rows, ceil_gibs if h2d else None)
    if failed:
        out.append("")
        out.append("Failed runs: " + ", ".join(f"{r['label']} {r['temp']}" for r in failed))
    print("\n".join(out))


if __name__ == "__main__":
    main()
