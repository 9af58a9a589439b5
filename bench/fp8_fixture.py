#!/usr/bin/env python3
"""FP8 and transformers-like fixtures for measuring `hoist pack` (docs/CODEC.md, "Measuring
the ratio"). numpy only (torch is used, when it has float8, to cross-check the rounding).

  fp8_fixture.py quantize IN OUT
      Block-quantizes IN's BF16/F16/F32 linear weights (2-D tensors named *_proj.weight or
      *kv_a_proj_with_mqa.weight: not embeddings, norms, routers or lm_head) to F8_E4M3 with a
      F32 `<name>_scale_inv` of 128 x 128 blocks (scale = block amax / 448, the weight is
      E4M3(w / scale), round to nearest even), as DeepSeek-V3 and Qwen3-FP8 store them. Other
      tensors are copied; config.json gains quantization_config (fp8, weight_block_size
      [128, 128]); the safetensors index (if any) is rewritten; other files are copied.
  fp8_fixture.py like-hf IN OUT [--seed S]
      Rewrites the content of IN's tensors as transformers initialises a model (the Linear and
      Embedding weights N(0, initializer_range), 0.02 by default; norm weights 1; biases 0),
      rounded to the tensor's dtype, same names, shapes, dtypes and files. IN may be a
      header-only hoist-mkckpt folder (`hoist-mkckpt --preset qwen3-4b --header-only`). For
      machines without transformers; with it, bench/make_hf_qwen3.py writes the real thing.

Exit 0 on success, 1 on an error (a message on stderr), 2 on bad arguments."""
import argparse
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

BLOCK = 128
E4M3_MAX = 448.0
LINEAR = re.compile(r"(_proj|kv_a_proj_with_mqa)\.weight$")
CHUNK = 1 << 24  # values per generated or converted piece


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header, 8 + n


def tensors_of(header):
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    return sorted(items, key=lambda kv: kv[1]["data_offsets"][0])


def write_safetensors(path, entries):
    """entries: [(name, dtype, shape, producer)], producer(f) writes the tensor's bytes."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, _ in entries:
        n = int(np.prod(shape, dtype=np.uint64)) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, produce in entries:
            produce(f)


def to_float32(raw, dtype):
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    return raw.view(np.float32).copy()


def from_float32(x, dtype):
    if dtype == "F32":
        return x.astype(np.float32).view(np.uint8)
    if dtype == "F16":
        return x.astype(np.float16).view(np.uint8)
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)  # BF16, round to nearest even
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).view(np.uint8)


def e4m3(x):
    """E4M3 (fn) bytes nearest to x (|x| <= 448 after saturation), ties to even."""
    sign = np.signbit(x).astype(np.uint8) << 7
    a = np.minimum(np.abs(x), E4M3_MAX).astype(np.float32)
    m, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    normal = ((e - 1 + 7).astype(np.int32) << 3) + np.rint((2 * m - 1) * 8).astype(np.int32)
    sub = np.rint(a * 512.0).astype(np.int32)  # below 2^-6: multiples of 2^-9
    q = np.where(a < 2.0**-6, sub, normal)
    return (q.astype(np.uint8) | sign).astype(np.uint8)


def quantize(w):
    """w: rows x cols float32 -> (E4M3 bytes, F32 scale_inv [ceil(r/128), ceil(c/128)])."""
    r, c = w.shape
    pr, pc = -r % BLOCK, -c % BLOCK
    p = np.pad(w, ((0, pr), (0, pc)))
    blocks = p.reshape((r + pr) // BLOCK, BLOCK, (c + pc) // BLOCK, BLOCK)
    amax = np.abs(blocks).max(axis=(1, 3))
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    q = e4m3(blocks / scale[:, None, :, None]).reshape(r + pr, c + pc)[:r, :c]
    return np.ascontiguousarray(q), scale


def check_with_torch(w, q, scale):
    try:
        import torch
    except ImportError:
        return None
    if not hasattr(torch, "float8_e4m3fn"):
        return None
    r, c = w.shape
    s = np.repeat(np.repeat(scale, BLOCK, 0), BLOCK, 1)[:r, :c]
    t = (torch.from_numpy(w) / torch.from_numpy(s)).to(torch.float8_e4m3fn).view(torch.uint8)
    return bool((t.numpy() == q).all())


def copy_others(src, dst, skip):
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and name not in skip and not name.endswith(".safetensors"):
            shutil.copyfile(p, os.path.join(dst, name))


def quantize_dir(src, dst):
    os.makedirs(dst, exist_ok=True)
    weight_map, checks = {}, []
    for fname in sorted(x for x in os.listdir(src) if x.endswith(".safetensors")):
        path = os.path.join(src, fname)
        header, start = read_header(path)
        entries = []
        for name, t in tensors_of(header):
            b, e = t["data_offsets"]
            raw = np.memmap(path, np.uint8, "r", start + b, e - b) if e > b else np.zeros(0, np.uint8)
            shape, dtype = t["shape"], t["dtype"]
            if LINEAR.search(name) and len(shape) == 2 and dtype in ("BF16", "F16", "F32"):
                q, scale = quantize(to_float32(np.asarray(raw), dtype).reshape(shape))
                if len(checks) < 4:
                    checks.append(check_with_torch(to_float32(np.asarray(raw), dtype).reshape(shape), q, scale))
                entries.append((name, "F8_E4M3", shape, lambda f, q=q: f.write(q.tobytes())))
                sname = name[: -len("weight")] + "weight_scale_inv"
                entries.append((sname, "F32", list(scale.shape), lambda f, s=scale: f.write(s.tobytes())))
                weight_map[sname] = fname
            else:
                entries.append((name, dtype, shape, lambda f, raw=raw: f.write(raw.tobytes())))
            weight_map[name] = fname
        write_safetensors(os.path.join(dst, fname), entries)
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                     "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    index = "model.safetensors.index.json"
    if os.path.exists(os.path.join(src, index)):
        with open(os.path.join(dst, index), "w") as f:
            json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    copy_others(src, dst, {"config.json", index})
    done = [c for c in checks if c is not None]
    print(f"fp8_fixture: quantized {src} -> {dst}; torch float8 cross-check: "
          + (("matches" if all(done) else "DIFFERS") if done else "not run (no torch float8)"),
          file=sys.stderr)
    return 0 if all(done) else 1


def like_hf_producer(name, dtype, shape, rng, std):
    n = int(np.prod(shape, dtype=np.uint64))
    if name.endswith("norm.weight") or re.search(r"layernorm\.weight$", name):
        fill = 1.0
    elif name.endswith(".bias"):
        fill = 0.0
    else:
        fill = None

    def produce(f):
        for at in range(0, n, CHUNK):
            k = min(CHUNK, n - at)
            x = np.full(k, fill, np.float32) if fill is not None else (
                rng.standard_normal(k, dtype=np.float32) * np.float32(std))
            f.write(from_float32(x, dtype).tobytes())
    return produce


def like_hf_dir(src, dst, seed):
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "config.json")) as f:
        std = json.load(f).get("initializer_range", 0.02)
    rng = np.random.default_rng(seed)
    for fname in sorted(x for x in os.listdir(src) if x.endswith(".safetensors")):
        header, _ = read_header(os.path.join(src, fname))
        entries = []
        for name, t in tensors_of(header):
            if t["dtype"] not in ("BF16", "F16", "F32"):
                raise SystemExit(f"fp8_fixture: {fname}: {name}: dtype {t['dtype']} (BF16, F16, F32 only)")
            entries.append((name, t["dtype"], t["shape"],
                            like_hf_producer(name, t["dtype"], t["shape"], rng, std)))
        write_safetensors(os.path.join(dst, fname), entries)
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and not name.endswith(".safetensors"):
            shutil.copyfile(p, os.path.join(dst, name))
    print(f"fp8_fixture: transformers-like content (std {std}) {src} -> {dst}", file=sys.stderr)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("src")
    q.add_argument("dst")
    h = sub.add_parser("like-hf")
    h.add_argument("src")
    h.add_argument("dst")
    h.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if os.path.abspath(a.src) == os.path.abspath(a.dst):
        p.error("OUT must differ from IN")
    try:
        return quantize_dir(a.src, a.dst) if a.cmd == "quantize" else like_hf_dir(a.src, a.dst, a.seed)
    except (OSError, ValueError, KeyError) as e:
        print(f"fp8_fixture: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
