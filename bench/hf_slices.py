#!/usr/bin/env python3
"""What rank R of a tp / ep job must hold for a checkpoint, computed with torch from the
checkpoint's own tensors by vLLM's loading rules, and compared with a hoist rank dump
(`hoist load --dump DIR` writes DIR/rank-R.safetensors). Written from vLLM's model files and
linear layers (docs/LAYOUT.md), sharing no code with hoist or tests/reference.

    hf_slices.py MODEL_DIR DUMP.safetensors --tp T [--ep E] --rank R [--layout fused|hf]
    hf_slices.py --batch LIST   (lines: LABEL MODEL_DIR DUMP TP EP RANK LAYOUT)

Prints one line per dump: "PASS <n> tensors" or "FAIL <what differs>"; exit 1 if any failed.
Threading: single-threaded. Failure: an unknown tensor name is a FAIL naming it.
"""
import argparse
import json
import os
import re
import sys

import torch
from safetensors.torch import load_file

COLUMN = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "q_b_proj", "kv_b_proj",
          "in_proj_qkvz", "in_proj_ba", "in_proj_z", "in_proj_b", "in_proj_a", "w1", "w3"}
ROW = {"o_proj", "down_proj", "out_proj", "w2"}
GPT_OSS = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj|gate_up_proj_bias|"
                     r"down_proj_bias|gate_up_proj_blocks|gate_up_proj_scales|down_proj_blocks|"
                     r"down_proj_scales)$")
GPT_OSS_VLLM = {"gate_up_proj_bias": "w13_bias", "down_proj_bias": "w2_bias",
                "gate_up_proj_blocks": "w13_weight", "gate_up_proj_scales": "w13_weight_scale",
                "down_proj_blocks": "w2_weight", "down_proj_scales": "w2_weight_scale"}
LLAMA4 = re.compile(r"^model\.layers\.\d+\.feed_forward\.experts\.(gate_up_proj|down_proj)$")
EXPERT = re.compile(r"^(model\.layers\.\d+\.(?:mlp|block_sparse_moe)\.experts\.)(\d+)\.(\w+)\.(\w+)$")


def load_dir(folder):
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, f)))
    return out


class Rank:
    def __init__(self, cfg, tp, ep, rank):
        self.c, self.tp, self.ep, self.rank, self.t = cfg, tp, ep, rank, rank % tp
        self.heads = cfg["num_attention_heads"]
        self.kvh = cfg.get("num_key_value_heads") or self.heads
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or \
            cfg.get("num_local_experts") or 0
        kd = (cfg.get("linear_num_key_heads") or 0) * (cfg.get("linear_key_head_dim") or 0)
        vd = (cfg.get("linear_num_value_heads") or 0) * (cfg.get("linear_value_head_dim") or 0)
        self.lin_parts = [kd, kd, vd]
        self.minimax = cfg.get("model_type") == "minimax_m2"

    def rows(self, x):
        n = x.shape[0]
        assert n % self.tp == 0, f"{n} rows vs tp {self.tp}"
        return x[self.t * n // self.tp:(self.t + 1) * n // self.tp]

    def kv(self, x):
        if self.tp <= self.kvh:
            return self.rows(x)
        h = self.t // (self.tp // self.kvh)
        return x[h * self.hd:(h + 1) * self.hd]

    def parts(self, x, sizes, kv):
        out, base = [], 0
        for size, is_kv in zip(sizes, kv):
            part = x[base:base + size]
            out.append(self.kv(part) if is_kv else self.rows(part))
            base += size
        return torch.cat(out)

    def shard(self, name, x):
        mod, param = name.split(".")[-2:]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            v = x.shape[0]
            pad = (v + 63) // 64 * 64
            x = torch.cat([x, torch.zeros((pad - v,) + tuple(x.shape[1:]), dtype=x.dtype)])
            return self.rows(x)
        if param in ("A_log", "dt_bias", "sinks"):
            return self.rows(x)
        if self.minimax and mod in ("q_norm", "k_norm"):
            return self.rows(x) if mod == "q_norm" else self.kv(x)
        if mod in ("k_proj", "v_proj"):
            return self.kv(x)
        if mod in COLUMN:
            return self.rows(x)
        if mod in ROW:
            return x if param == "bias" else x[:, self.t * x.shape[1] // self.tp:
                                                 (self.t + 1) * x.shape[1] // self.tp]
        if mod == "qkv_proj":
            q, kv = self.heads * self.hd, self.kvh * self.hd
            return self.parts(x, [q, kv, kv], [False, True, True])
        if mod == "gate_up_proj":
            return self.parts(x, [x.shape[0] // 2] * 2, [False, False])
        if mod in ("conv1d", "in_proj_qkv"):
            return self.parts(x, self.lin_parts, [False] * 3)
        return x  # norms, routers, shared_expert_gate, MLA's replicated projections, indexer

    def gpt_oss(self, param, x):
        """vLLM's gpt_oss loaders: the rank's experts under EP, else its share of the
        intermediate size (MXFP4: cdiv(I/32, tp) * 32 a rank) on the dim that holds it."""
        if self.ep:
            per = x.shape[0] // self.ep
            return x[self.rank * per:(self.rank + 1) * per]
        if self.tp == 1:
            return x
        if param == "down_proj_bias":
            return x if self.t == 0 else torch.zeros_like(x)
        inter = self.c["intermediate_size"]
        if (self.c.get("quantization_config") or {}).get("quant_method") == "mxfp4":
            per = -(-(inter // 32) // self.tp) * 32
            s, e = self.t * per, min((self.t + 1) * per, inter)
        else:
            s, e = self.t * inter // self.tp, (self.t + 1) * inter // self.tp
        if param == "gate_up_proj":
            return x[:, :, 2 * s:2 * e]
        if param == "down_proj":
            return x[:, s:e, :]
        if param in ("down_proj_blocks", "down_proj_scales"):
            return x[:, :, s // 32:e // 32]
        return x[:, 2 * s:2 * e]

    def llama4(self, param, x):
        """Llama 4's 3-D experts (hf layout): the rank's experts under EP, else its share of the
        intermediate size of each half of gate_up_proj [E, H, 2I] and of down_proj [E, I, H]."""
        if self.ep:
            per = x.shape[0] // self.ep
            return x[self.rank * per:(self.rank + 1) * per]
        inter = self.c["intermediate_size"]
        s, e = self.t * inter // self.tp, (self.t + 1) * inter // self.tp
        if param == "down_proj":
            return x[:, s:e, :]
        return torch.cat([x[:, :, s:e], x[:, :, inter + s:inter + e]], dim=-1)

    def owns(self, e):
        per = self.experts // self.ep
        return self.rank * per <= e < (self.rank + 1) * per


VISION = ("vision_tower.", "multi_modal_projector.", "model.visual.", "model.vision_tower.",
          "vision_model.")


def rotary_permute(w, heads):
    """vLLM's Llama 4 q/k permute: each head's rows 0, 2, 4, ... then 1, 3, 5, ..."""
    hd = w.shape[0] // heads
    return w.view(heads, hd // 2, 2, w.shape[1]).transpose(1, 2).reshape(w.shape)
TEXT = (("model.language_model.", "model."), ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."))


def text_model(cfg, w):
    """A vision-language checkpoint's text model: text_config and the language model's tensors
    under model.* names (vLLM loads the vision tower too; hoist leaves it out)."""
    text = dict(cfg["text_config"])
    for key in ("architectures", "tie_word_embeddings", "quantization_config"):
        if cfg.get(key) is not None:
            text[key] = cfg[key]
    out = {}
    for name, x in w.items():
        if name.startswith(VISION):
            continue
        for old, new in TEXT:
            if name.startswith(old):
                name = new + name[len(old):]
        out[name] = x
    return text, out


def expected(model_dir, tp, ep, rank, fused):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = load_dir(model_dir)
    if "text_config" in cfg:
        cfg, w = text_model(cfg, w)
    r = Rank(cfg, tp, ep, rank)
    out, experts = {}, {}
    for name, x in w.items():
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        if fused and cfg.get("model_type") == "llama4_text" and name.endswith(
                ("self_attn.q_proj.weight", "self_attn.k_proj.weight")):
            x = rotary_permute(x, r.heads if ".q_proj." in name else r.kvh)
        # 3-D BF16 experts: vLLM's loaders narrow them, then .transpose(-1, -2) into w13 / w2.
        layer = name.rsplit(".", 1)[0]
        proj = {"gate_up_proj": ".w13_weight", "down_proj": ".w2_weight"}
        g4 = LLAMA4.match(name)
        if g4:
            y = r.llama4(g4.group(1), x)
            if fused:
                out[layer + proj[g4.group(1)]] = y.transpose(-1, -2).contiguous()
            else:
                out[name] = y
            continue
        g = GPT_OSS.match(name)
        if g:
            vllm = GPT_OSS_VLLM.get(g.group(2))
            y = r.gpt_oss(g.group(2), x)
            if fused and g.group(2) in proj:
                out[layer + proj[g.group(2)]] = y.transpose(-1, -2).contiguous()
            else:
                out[g.group(1) + "." + vllm if fused and vllm else name] = y
            continue
        m = EXPERT.match(name)
        if m:
            e = int(m.group(2))
            if ep and not r.owns(e):
                continue
            y = x if ep else r.shard(name, x)
            experts[name] = (m.group(1), e, m.group(3), m.group(4), y)
            if not fused:
                out[name] = y
            continue
        out[name] = r.shard(name, x)
    if fused:
        fuse(out, experts)
    return out


def cat(out, parts, name):
    if all(p in out for p in parts):
        out[name] = torch.cat([out.pop(p) for p in parts])


def fuse(out, experts):
    for name in list(out):
        if name not in out:
            continue
        base, mod, param = name.rsplit(".", 2)[0], name.split(".")[-2], name.split(".")[-1]
        p = base + "."
        if mod == "q_proj":
            cat(out, [p + s + "." + param for s in ("q_proj", "k_proj", "v_proj")],
                p + "qkv_proj." + param)
        elif mod == "gate_proj":
            cat(out, [p + "gate_proj." + param, p + "up_proj." + param], p + "gate_up_proj." + param)
        elif mod == "q_a_proj":
            cat(out, [p + "q_a_proj." + param, p + "kv_a_proj_with_mqa." + param],
                p + "fused_qkv_a_proj." + param)
        elif mod == "in_proj_qkv":
            cat(out, [p + "in_proj_qkv." + param, p + "in_proj_z." + param],
                p + "in_proj_qkvz." + param)
        elif mod == "in_proj_b":
            cat(out, [p + "in_proj_b." + param, p + "in_proj_a." + param], p + "in_proj_ba." + param)
    stacks = {}
    for prefix, e, proj, param, y in experts.values():
        stacks.setdefault((prefix, param), {}).setdefault(e, {})[proj] = y
    for (prefix, param), by_e in stacks.items():
        suffix = "" if param == "weight" else param[len("weight"):]
        gate, up, down = ("w1", "w3", "w2") if "block_sparse_moe" in prefix else \
            ("gate_proj", "up_proj", "down_proj")
        es = sorted(by_e)
        out[prefix + "w13_weight" + suffix] = torch.stack(
            [torch.cat([by_e[e][gate], by_e[e][up]]) for e in es])
        out[prefix + "w2_weight" + suffix] = torch.stack([by_e[e][down] for e in es])


def compare(model, dump, tp, ep, rank, layout):
    """'PASS n tensors' or 'FAIL ...' for one rank dump."""
    try:
        want = expected(model, tp, ep, rank, layout == "fused")
    except Exception as ex:  # the reference refuses (a bad name or a shape it cannot split)
        return f"FAIL reference: {type(ex).__name__}: {ex}"
    got = load_file(dump)
    bad = []
    if set(want) != set(got):
        bad.append(f"names: missing {sorted(set(want) - set(got))[:4]} "
                   f"extra {sorted(set(got) - set(want))[:4]}")
    for n in sorted(set(want) & set(got)):
        x, y = want[n], got[n]
        if x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
            bad.append(f"{n}: {y.dtype} {tuple(y.shape)} != {x.dtype} {tuple(x.shape)}")
        elif not torch.equal(x.contiguous().flatten().view(torch.uint8),
                             y.contiguous().flatten().view(torch.uint8)):
            bad.append(f"{n}: bytes differ")
    return ("FAIL " + "; ".join(bad[:3])) if bad else f"PASS {len(want)} tensors"


def main():
    a = argparse.ArgumentParser()
    a.add_argument("model", nargs="?")
    a.add_argument("dump", nargs="?")
    a.add_argument("--tp", type=int, default=1)
    a.add_argument("--ep", type=int, default=0)
    a.add_argument("--rank", type=int, default=0)
    a.add_argument("--layout", default="fused")
    a.add_argument("--batch", help="a file of lines 'LABEL MODEL DUMP TP EP RANK LAYOUT'")
    o = a.parse_args()
    if not o.batch:
        line = compare(o.model, o.dump, o.tp, o.ep, o.rank, o.layout)
        print(line)
        sys.exit(0 if line.startswith("PASS") else 1)
    failed = 0
    for row in open(o.batch):
        label, model, dump, tp, ep, rank, layout = row.split()
        line = compare(model, dump, int(tp), int(ep), int(rank), layout)
        failed += not line.startswith("PASS")
        print(f"{label} tp {tp} ep {ep} rank {rank} {layout}: {line}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
