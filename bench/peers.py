#!/usr/bin/env python3
"""Peer loaders on the same files, for side-by-side ratios: safetensors.torch.load_file(device="cuda").

Usage: peers.py MODEL_DIR {hot|cold} RUNS  -> one JSON line per run on stdout.
The CUDA context is created before timing (process start excluded, as for hoist). Cold runs drop
the page cache first (root only).
"""
import glob
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    model, temp, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    files = sorted(glob.glob(os.path.join(model, "*.safetensors")))
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    for r in range(runs):
        if temp == "cold":
            drop_caches()
        t0 = time.perf_counter()
        total = 0
        tensors = []
        for f in files:
            sd = load_file(f, device="cuda")
            total += sum(t.numel() * t.element_size() for t in sd.values())
            tensors.append(sd)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        print(json.dumps({"peer": "safetensors.load_file(cuda)", "temp": temp, "run": r,
                          "seconds": dt, "bytes": total}), flush=True)
        del tensors
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
