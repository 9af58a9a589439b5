"""GPT-OSS (GptOssForCausalLM, BF16 experts) for the example engine, from hoist's `hf` layout
(checkpoint names, each rank's slice: docs/LAYOUT.md's gpt_oss table). hoist's fused layout
refuses gpt_oss's BF16 experts (vLLM transposes them at load), so this family binds to:

  model.layers.L.self_attn.{q,k,v}_proj.{weight,bias}  column-parallel (k/v: kv heads replicated
                                                      when tp > Hkv), biases sliced alike
  model.layers.L.self_attn.o_proj.{weight,bias}      row-parallel; the bias whole, added once
  model.layers.L.self_attn.sinks                     [Hq/tp]  per-head attention sinks
  model.layers.L.mlp.router.{weight,bias}            [E, H], [E]  replicated
  model.layers.L.mlp.experts.gate_up_proj            [E_local, H, 2*I_local]  gate and up
                                                      interleaved along the last dim
  model.layers.L.mlp.experts.gate_up_proj_bias       [E_local, 2*I_local]
  model.layers.L.mlp.experts.down_proj               [E_local, I_local, H]
  model.layers.L.mlp.experts.down_proj_bias          [E_local, H]  under tp: tp rank 0's is the
                                                      bias, the others' zeros (summed once)

E_local = E and I_local = I/tp (rank t holds the contiguous range [t*I/tp, (t+1)*I/tp) of I,
i.e. the interleaved pairs 2s..2e of the last dim), or E/ep whole experts under ep (linear
placement: hoist refuses round_robin for experts stored in one tensor).

As transformers' modeling_gpt_oss: attention with q/k/v/o biases, a sink logit per head joining
the softmax, layer_types alternating sliding_window and full attention, YaRN rope (neox); a
router with a bias (top-k over the logits, softmax over the k), experts with the clamped SwiGLU
(gate clamped above at `limit`, up clamped to +-limit, (up + 1) * gate * sigmoid(alpha * gate))
and the routing weight applied after the down bias; RMSNorm scaled in float32.

Failure: ValueError naming the config key or the parallel sizes a model cannot take.
Threading: one thread per process; the collectives are torch.distributed's."""
import torch
import torch.nn.functional as F
from torch import nn

from layers import (CausalLM, Rotary, Weight, attend, expert_intermediate, extend_cache, need,
                    param, rms_norm, rope_parameters)

ALPHA, LIMIT = 1.702, 7.0  # GptOssExperts.alpha / .limit (fixed in transformers and vLLM)


class GptOssConfig:
    final_norm_in_float32 = True

    def __init__(self, cfg):
        self.model_type = need(cfg, "model_type")
        self.hidden = need(cfg, "hidden_size")
        self.layers = need(cfg, "num_hidden_layers")
        self.heads = need(cfg, "num_attention_heads")
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.vocab = need(cfg, "vocab_size")
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.rope_theta, self.rope = rope_parameters(cfg)
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.attention_bias = bool(cfg.get("attention_bias", True))
        self.experts = need(cfg, "num_local_experts")
        self.top_k = need(cfg, "num_experts_per_tok")
        self.moe_intermediate = need(cfg, "intermediate_size")
        self.sliding_window = cfg.get("sliding_window")
        # transformers' GptOssConfig default: sliding on even layers, full on odd ones
        self.layer_types = cfg.get("layer_types") or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(self.layers)]
        if len(self.layer_types) != self.layers:
            raise ValueError(f"config.json: {len(self.layer_types)} layer_types for "
                             f"{self.layers} layers")
        if cfg.get("quantization_config"):
            raise ValueError("config.json: quantized gpt_oss (MXFP4) is not supported by this "
                             "example; use BF16 experts")

    def sparse(self, layer):
        return True

    def window(self, layer):
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None

    def layer_map(self):
        kinds = "".join("s" if self.window(i) else "f" for i in range(self.layers))
        return (f"layers {'E' * self.layers} (E moe, d dense): num_local_experts {self.experts}, "
                f"top-{self.top_k}; attention {kinds} (s sliding window "
                f"{self.sliding_window}, f full); rope {self.rope['rope_type']}")


class GptOssAttention(nn.Module):
    def __init__(self, cfg, par, layer, dtype, device):
        super().__init__()
        if par.tp > cfg.kv_heads and par.tp % cfg.kv_heads:
            raise ValueError(f"tp {par.tp} is not a multiple of {cfg.kv_heads} kv heads")
        self.cfg, self.par, self.window = cfg, par, cfg.window(layer)
        self.q_heads = par.split(cfg.heads, "attention heads")
        # one replicated kv head per rank when tp exceeds the kv heads, else an even share
        self.kv_heads = 1 if par.tp > cfg.kv_heads else par.split(cfg.kv_heads, "kv heads")
        hd, H, bias = cfg.head_dim, cfg.hidden, cfg.attention_bias
        for name, heads in (("q_proj", self.q_heads), ("k_proj", self.kv_heads),
                            ("v_proj", self.kv_heads)):
            setattr(self, name, Weight([heads * hd, H], dtype, device,
                                       [heads * hd] if bias else None))
        self.o_proj = Weight([H, self.q_heads * hd], dtype, device, [H] if bias else None)
        self.sinks = param([self.q_heads], dtype, device)
        self.rotary = Rotary(hd, cfg.rope_theta, device, cfg.rope)

    def forward(self, x, positions, cache):
        T, hd = x.shape[0], self.cfg.head_dim
        q, k, v = (proj(x).view(T, -1, hd) for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        k, v = extend_cache(cache, k, v)
        out = attend(q, k, v, positions, hd**-0.5, self.window, self.sinks)
        out = self.par.all_reduce_tp(F.linear(out, self.o_proj.weight))
        return out + self.o_proj.bias if self.cfg.attention_bias else out


class GptOssExperts(nn.Module):
    """The hf-layout expert tensors (names as the checkpoint's); forward: this rank's part."""

    def __init__(self, n_local, i_local, hidden, dtype, device):
        super().__init__()
        self.gate_up_proj = param([n_local, hidden, 2 * i_local], dtype, device)
        self.gate_up_proj_bias = param([n_local, 2 * i_local], dtype, device)
        self.down_proj = param([n_local, i_local, hidden], dtype, device)
        self.down_proj_bias = param([n_local, hidden], dtype, device)

    def forward(self, x, ids, chosen, weights):
        out = torch.zeros_like(x)
        for local, expert in enumerate(ids):
            token, slot = (chosen == expert).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            gate_up = x[token] @ self.gate_up_proj[local] + self.gate_up_proj_bias[local]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate, up = gate.clamp(max=LIMIT), up.clamp(min=-LIMIT, max=LIMIT)
            glu = gate * torch.sigmoid(gate * ALPHA)
            y = ((up + 1) * glu) @ self.down_proj[local] + self.down_proj_bias[local]
            out.index_add_(0, token, (y * weights[token, slot, None]).to(x.dtype))
        return out


class GptOssMLP(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.ids = par.local_experts(cfg.experts)
        self.router = Weight([cfg.experts, cfg.hidden], dtype, device, [cfg.experts])
        self.experts = GptOssExperts(len(self.ids), expert_intermediate(cfg.moe_intermediate, par),
                                     cfg.hidden, dtype, device)

    def forward(self, x):
        top, chosen = self.router(x).topk(self.cfg.top_k, dim=-1)
        weights = top.float().softmax(dim=-1).to(x.dtype)
        return self.par.reduce_experts(self.experts(x, self.ids, chosen, weights))


class GptOssDecoderLayer(nn.Module):
    def __init__(self, cfg, par, layer, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = Weight([cfg.hidden], dtype, device)
        self.self_attn = GptOssAttention(cfg, par, layer, dtype, device)
        self.post_attention_layernorm = Weight([cfg.hidden], dtype, device)
        self.mlp = GptOssMLP(cfg, par, dtype, device)

    def forward(self, x, positions, cache):
        eps = self.cfg.eps
        h = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, eps, True), positions,
                               cache)
        return h + self.mlp(rms_norm(h, self.post_attention_layernorm.weight, eps, True))


class GptOssForCausalLM(CausalLM):
    LAYOUT = "hf"

    def __init__(self, cfg, par, dtype=torch.float32, device="cpu"):
        super().__init__(cfg, par, dtype, device,
                         lambda i: GptOssDecoderLayer(cfg, par, i, dtype, device))
