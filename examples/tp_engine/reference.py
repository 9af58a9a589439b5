"""The independent reference for the example engine: a plain single-process forward in float64,
written directly from a Hugging Face checkpoint's unfused tensors (q_proj, k_proj, v_proj,
gate_proj, up_proj, per-expert weights, GPT-OSS's stacked experts), read with the tiny
safetensors reader below, for every family the engine runs: Qwen3 / Qwen3-MoE, Mixtral, GPT-OSS
(BF16 experts: sinks, sliding window, YaRN, clamped SwiGLU) and DeepSeek-V2 (MLA, shared
experts). It shares no code with the engine (layers.py, *_tp.py) or hoist; no KV cache (every
step recomputes the whole sequence), no parallelism, no fusion, no padding.

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
        self.kind = c["model_type"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.hd = c.get("head_dim") or c["hidden_size"] // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        rope = dict(c.get("rope_parameters") or {})
        rope.update(c.get("rope_scaling") or {})
        theta = c.get("rope_theta")
        if theta is None:
            theta = rope["rope_theta"]
        self.theta = float(theta)
        dim = c["qk_rope_head_dim"] if self.kind == "deepseek_v2" else self.hd
        self.freqs, self.rope_scale = self.frequencies(dim, rope)

    def frequencies(self, dim, rope):
        """Per rotated pair i: theta^(-2i/dim), or YaRN's blend of it with its 1/factor
        interpolation (ramp between the dims that turn beta_fast and beta_slow times over the
        original context), and the cos/sin scale 0.1 ln(factor) + 1."""
        base = [self.theta ** (-2.0 * i / dim) for i in range(dim // 2)]
        if rope.get("rope_type", rope.get("type", "default")) != "yarn":
            return base, 1.0
        factor, orig = float(rope["factor"]), rope["original_max_position_embeddings"]

        def dim_of(turns):
            return dim * np.log(orig / (turns * 2 * np.pi)) / (2 * np.log(self.theta))

        low, high = dim_of(rope.get("beta_fast") or 32), dim_of(rope.get("beta_slow") or 1)
        if rope.get("truncate", True):
            low, high = np.floor(low), np.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        high = high + 0.001 if low == high else high
        out = []
        for i, f in enumerate(base):
            keep = 1 - min(max((i - low) / (high - low), 0.0), 1.0)  # 1: extrapolate (as is)
            out.append(f * keep + f / factor * (1 - keep))
        scale = rope.get("attention_factor") or (0.1 * np.log(factor) + 1 if factor > 1 else 1)
        return out, float(scale)

    def norm(self, x, name):
        var = (x * x).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(var + self.eps) * self.w[name]

    def rope(self, x, interleaved=False):
        """x [T, heads, d]: rotate pairs (i, i + d/2) (or (2i, 2i+1), interleaved) by
        position * freqs[i]; cos and sin times the YaRN scale."""
        T, half = x.shape[0], x.shape[-1] // 2
        out = x.clone()
        for i in range(half):
            ang = torch.arange(T, dtype=torch.float64)[:, None] * self.freqs[i]
            cos, sin = torch.cos(ang) * self.rope_scale, torch.sin(ang) * self.rope_scale
            ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
            a, b = x[:, :, ia], x[:, :, ib]
            out[:, :, ia] = a * cos - b * sin
            out[:, :, ib] = b * cos + a * sin
        return out

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def window(self, layer):
        """GPT-OSS: sliding_window on the layers layer_types says (default: the even ones)."""
        if self.kind != "gpt_oss":
            return self.c.get("sliding_window") if self.kind == "mixtral" else None
        types = self.c.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention"
            for i in range(self.c["num_hidden_layers"])]
        return self.c["sliding_window"] if types[layer] == "sliding_attention" else None

    def attention(self, x, p, window=None):
        T = x.shape[0]
        q = self.linear(x, p + "q_proj").reshape(T, self.heads, self.hd)
        k = self.linear(x, p + "k_proj").reshape(T, self.kv_heads, self.hd)
        v = self.linear(x, p + "v_proj").reshape(T, self.kv_heads, self.hd)
        if p + "q_norm.weight" in self.w:
            q, k = self.norm(q, p + "q_norm.weight"), self.norm(k, p + "k_norm.weight")
        q, k = self.rope(q), self.rope(k)
        sinks = self.w.get(p + "sinks")
        out = torch.zeros(T, self.heads, self.hd, dtype=torch.float64)
        per_kv = self.heads // self.kv_heads
        for h in range(self.heads):
            kh, vh = k[:, h // per_kv], v[:, h // per_kv]
            for t in range(T):
                first = 0 if window is None else max(0, t - window + 1)
                s = (kh[first:t + 1] @ q[t, h]) / np.sqrt(self.hd)
                if sinks is None:
                    out[t, h] = torch.softmax(s, dim=0) @ vh[first:t + 1]
                else:  # the sink joins the softmax, then is dropped
                    probs = torch.softmax(torch.cat((s, sinks[h:h + 1])), dim=0)[:-1]
                    out[t, h] = probs @ vh[first:t + 1]
        return self.linear(out.reshape(T, self.heads * self.hd), p + "o_proj")

    def mla(self, x, p):
        """DeepSeek-V2's attention without q LoRA, keys and values expanded per head."""
        c, T = self.c, x.shape[0]
        nope, rope, vd, lora = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"],
                                c["kv_lora_rank"])
        q = self.linear(x, p + "q_proj").reshape(T, self.heads, nope + rope)
        a = self.linear(x, p + "kv_a_proj_with_mqa")
        kv = self.linear(self.norm(a[:, :lora], p + "kv_a_layernorm.weight"), p + "kv_b_proj")
        kv = kv.reshape(T, self.heads, nope + vd)
        q_pe = self.rope(q[:, :, nope:], interleaved=True)
        k_pe = self.rope(a[:, None, lora:], interleaved=True)[:, 0]
        out = torch.zeros(T, self.heads, vd, dtype=torch.float64)
        for h in range(self.heads):
            for t in range(T):
                s = kv[:t + 1, h, :nope] @ q[t, h, :nope] + k_pe[:t + 1] @ q_pe[t, h]
                out[t, h] = torch.softmax(s / np.sqrt(nope + rope), dim=0) @ kv[:t + 1, h, nope:]
        return self.linear(out.reshape(T, self.heads * vd), p + "o_proj")

    def mlp(self, x, p):
        return self.linear(torch.nn.functional.silu(self.linear(x, p + "gate_proj")) *
                           self.linear(x, p + "up_proj"), p + "down_proj")

    def moe(self, x, p, names=("gate_proj", "up_proj", "down_proj"), renormalize=None):
        """Softmax router, top-k (renormalised per norm_topk_prob, or always for Mixtral),
        times DeepSeek's routed_scaling_factor (1 elsewhere), per-expert SwiGLU MLPs."""
        c = self.c
        probs = torch.softmax(x @ self.w[p + "gate.weight"].T, dim=-1)
        if renormalize is None:
            renormalize = c.get("norm_topk_prob", False)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            top = torch.topk(probs[t], c["num_experts_per_tok"])
            weights = top.values
            if renormalize:
                weights = weights / weights.sum()
            weights = weights * c.get("routed_scaling_factor", 1.0)
            for wgt, e in zip(weights, top.indices.tolist()):
                g, u, d = (f"{p}experts.{e}.{n}" for n in names)
                h = torch.nn.functional.silu(self.linear(x[t:t + 1], g)) * self.linear(
                    x[t:t + 1], u)
                out[t] += wgt * self.linear(h, d)[0]
        return out

    def gpt_oss_moe(self, x, p):
        """Router with a bias: top-k logits, softmax over them; experts [E, H, 2I] with gate and
        up interleaved, clamped SwiGLU (limit 7, alpha 1.702), the weight after the down bias."""
        logits = self.linear(x, p + "router")
        gu_w, gu_b = self.w[p + "experts.gate_up_proj"], self.w[p + "experts.gate_up_proj_bias"]
        dn_w, dn_b = self.w[p + "experts.down_proj"], self.w[p + "experts.down_proj_bias"]
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            top = torch.topk(logits[t], self.c["num_experts_per_tok"])
            for wgt, e in zip(torch.softmax(top.values, dim=0), top.indices.tolist()):
                gu = x[t] @ gu_w[e] + gu_b[e]
                gate, up = gu[0::2].clamp(max=7.0), gu[1::2].clamp(-7.0, 7.0)
                h = (up + 1) * gate * torch.sigmoid(1.702 * gate)
                out[t] += wgt * (h @ dn_w[e] + dn_b[e])
        return out

    def feed_forward(self, h, layer):
        p = f"model.layers.{layer}."
        if self.kind == "mixtral":
            return self.moe(h, p + "block_sparse_moe.", ("w1", "w3", "w2"), renormalize=True)
        if self.kind == "gpt_oss":
            return self.gpt_oss_moe(h, p + "mlp.")
        if p + "mlp.gate.weight" not in self.w:
            return self.mlp(h, p + "mlp.")
        out = self.moe(h, p + "mlp.")
        if p + "mlp.shared_experts.gate_proj.weight" in self.w:
            out = out + self.mlp(h, p + "mlp.shared_experts.")
        return out

    def logits(self, ids):
        """[T, vocab] float64 logits of the whole sequence `ids`."""
        c = self.c
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        for layer in range(c["num_hidden_layers"]):
            p = f"model.layers.{layer}."
            h = self.norm(x, p + "input_layernorm.weight")
            if self.kind == "deepseek_v2":
                x = x + self.mla(h, p + "self_attn.")
            else:
                x = x + self.attention(h, p + "self_attn.", self.window(layer))
            x = x + self.feed_forward(self.norm(x, p + "post_attention_layernorm.weight"), layer)
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
