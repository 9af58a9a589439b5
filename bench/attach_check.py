#!/usr/bin/env python3
"""Attaches to a running `hoist serve` of a tp-1 fused qwen3 checkpoint from Python with torch and
compares tensors with safetensors slices of the checkpoint (read independently, on the CPU).

Usage: attach_check.py SOCKET MODEL_DIR  -> JSON line {attach_ms, checked, ok}
"""
import glob
import json
import os
import sys
import time

import torch
from safetensors import safe_open

import hoist


def main():
    sock, model = sys.argv[1], sys.argv[2]
    torch.zeros(1, device="cuda")  # the CUDA context exists before the clock starts
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    w = hoist.attach(sock).tensors()
    torch.cuda.synchronize()
    attach_ms = (time.perf_counter() - t0) * 1e3
    src = {}
    for f in sorted(glob.glob(os.path.join(model, "*.safetensors"))):
        h = safe_open(f, framework="pt", device="cpu")
        for k in h.keys():
            src[k] = (h, k)

    def get(name):
        h, k = src[name]
        return h.get_tensor(k)

    checks = {
        "model.norm.weight": get("model.norm.weight"),
        "model.embed_tokens.weight": get("model.embed_tokens.weight"),
        "model.layers.0.mlp.down_proj.weight": get("model.layers.0.mlp.down_proj.weight"),
        "model.layers.17.self_attn.qkv_proj.weight": torch.cat(
            [get(f"model.layers.17.self_attn.{p}_proj.weight") for p in "qkv"]),
        "model.layers.35.mlp.gate_up_proj.weight": torch.cat(
            [get(f"model.layers.35.mlp.{p}_proj.weight") for p in ("gate", "up")]),
    }
    ok = True
    for name, ref in checks.items():
        got = w[name]
        same = got.is_cuda and got.dtype == ref.dtype and tuple(got.shape) == tuple(ref.shape) \
            and torch.equal(got.cpu(), ref)
        ok = ok and same
        print(f"{name}: {'equal' if same else 'DIFFERENT'} {tuple(got.shape)} {got.dtype}",
              file=sys.stderr)
    print(json.dumps({"kind": "attach_py", "attach_ms": attach_ms, "tensors": len(w),
                      "checked": len(checks), "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
