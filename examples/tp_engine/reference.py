"""The independent reference for the example engine: a plain single-process Qwen3 / Qwen3-MoE
forward in float64, written directly from a Hugging Face checkpoint's unfused tensors (q_proj,
k_proj, v_proj, gate_proj, up_proj, per-expert weights), read with the tiny safetensors reader
below. It shares no code with qwen3_tp.py or hoist; no KV cache (every step recomputes the whole
sequence), no parallelism, no fusion, no padding.

    python3 reference.py MODEL_DIR [--prompt 3,17,92] [--tokens 6] [--out ref.npz]

Failure: KeyError / ValueError naming the tensor or config key. Threading: single-threaded use."""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}


def read_safetensors(folder):
    """name -> float64 torch tensor for every tensor of every *.safetensors file in `folder`."""
    out = {}
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, fname), "rb") as fh:
            data = fh.read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            if meta["dtype"] not in _NP:
                raise ValueError(f"{fname}: {name} has dtype {meta['dtype']}")
            lo, hi = meta["data_offsets"]
            raw = np.frombuffer(data[8 + n + lo:8 + n + hi], dtype=_NP[meta["dtype"]])
            if meta["dtype"] == "BF16":  # the high half of a float32
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
            out[name] = torch.from_numpy(raw.astype(np.float64).reshape(meta["shape"]))
    return out


class Reference:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as fh:
            self.c = json.load(fh)
        self.w = read_safetensors(folder)
        c = self.c
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.hd = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        theta = c.get("rope_theta")
        if theta is None:
            theta = c["rope_parameters"]["rope_theta"]
        self.theta = float(theta)

    def norm(self, x, name):
        var = (x * x).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(var + self.eps) * self.w[name]

    def rope(self, x):
        """x [T, heads, hd]: rotate pairs (i, i + hd/2) by position * theta^(-2i/hd)."""
        T, half = x.shape[0], self.hd // 2
        out = x.clone()
        for i in range(half):
            freq = self.theta ** (-2.0 * i / self.hd)
            ang = torch.arange(T, dtype=torch.float64)[:, None] * freq
            a, b = x[:, :, i], x[:, :, i + half]
            out[:, :, i] = a * torch.cos(ang) - b * torch.sin(ang)
            out[:, :, i + half] = b * torch.cos(ang) + a * torch.sin(ang)
        return out

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def attention(self, x, p):
        T = x.shape[0]
        q = self.linear(x, p + "q_proj").reshape(T, self.heads, self.hd)
        k = self.linear(x, p + "k_proj").reshape(T, self.kv_heads, self.hd)
        v = self.linear(x, p + "v_proj").reshape(T, self.kv_heads, self.hd)
        q = self.rope(self.norm(q, p + "q_norm.weight"))
        k = self.rope(self.norm(k, p + "k_norm.weight"))
        out = torch.zeros(T, self.heads, self.hd, dtype=torch.float64)
        per_kv = self.heads // self.kv_heads
        for h in range(self.heads):
            kh, vh = k[:, h // per_kv], v[:, h // per_kv]
            for t in range(T):
                s = (kh[:t + 1] @ q[t, h]) / np.sqrt(self.hd)
                out[t, h] = torch.softmax(s, dim=0) @ vh[:t + 1]
        return self.linear(out.reshape(T, self.heads * self.hd), p + "o_proj")

    def mlp(self, x, p):
        return self.linear(torch.nn.functional.silu(self.linear(x, p + "gate_proj")) *
                           self.linear(x, p + "up_proj"), p + "down_proj")

    def moe(self, x, p):
        c = self.c
        probs = torch.softmax(x @ self.w[p + "gate.weight"].T, dim=-1)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            top = torch.topk(probs[t], c["num_experts_per_tok"])
            weights = top.values
            if c.get("norm_topk_prob", False):
                weights = weights / weights.sum()
            for wgt, e in zip(weights, top.indices.tolist()):
                out[t] += wgt * self.mlp(x[t:t + 1], f"{p}experts.{e}.")[0]
        return out

    def logits(self, ids):
        """[T, vocab] float64 logits of the whole sequence `ids`."""
        c = self.c
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        for layer in range(c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            x = x + self.attention(self.norm(x, p + "input_layernorm.weight"), p + "self_attn.")
            h = self.norm(x, p + "post_attention_layernorm.weight")
            if p + "mlp.gate.weight" in self.w:
                x = x + self.moe(h, p + "mlp.")
            else:
                x = x + self.mlp(h, p + "mlp.")
        x = self.norm(x, "model.norm.weight")
        head = self.w.get("lm_head.weight")
        if head is None or c.get("tie_word_embeddings", False):
            head = self.w["model.embed_tokens.weight"]
        return x @ head.T

    def greedy(self, prompt, steps):
        """(tokens, prompt logits [P, V], logits that chose each token [steps, V])."""
        seq, tokens, rows, prefill = list(prompt), [], [], None
        for _ in range(steps):
            logits = self.logits(seq)
            if prefill is None:
                prefill = logits
            rows.append(logits[-1])
            tokens.append(int(torch.argmax(logits[-1])))
            seq.append(tokens[-1])
        return tokens, prefill, torch.stack(rows)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--prompt", default="3,17,92,250,511,7,800,42")
    p.add_argument("--tokens", type=int, default=6)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    tokens, prefill, steps = Reference(a.model).greedy([int(x) for x in a.prompt.split(",")],
                                                       a.tokens)
    print("tokens: " + " ".join(map(str, tokens)))
    if a.out:
        np.savez(a.out, tokens=np.array(tokens), prefill=prefill.numpy(), steps=steps.numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
