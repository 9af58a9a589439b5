"""A small tensor-parallel decoder for Qwen3 (dense) and Qwen3-MoE, written from hoist's fused
layout (docs/LAYOUT.md), i.e. vLLM's parameter names and per-rank shapes:

  model.embed_tokens.weight            [Vp/tp, H]    vocab-parallel, V padded to Vp (x64)
  model.layers.L.self_attn.qkv_proj    [(Hq/tp + 2*Hkv_local)*hd, H]  column-parallel; kv heads
                                                     replicated when tp > Hkv (1 per rank)
  model.layers.L.self_attn.o_proj      [H, Hq/tp*hd] row-parallel, all-reduce
  model.layers.L.self_attn.{q,k}_norm  [hd]          replicated (RMSNorm per head)
  model.layers.L.mlp.gate_up_proj      [2*I/tp, H]   merged column-parallel
  model.layers.L.mlp.down_proj         [H, I/tp]     row-parallel, all-reduce
  model.layers.L.mlp.gate              [E, H]        router, replicated
  model.layers.L.mlp.experts.w13_weight [E_local, 2*I_local, H]  tp-sliced (ep off: E_local=E,
  model.layers.L.mlp.experts.w2_weight  [E_local, H, I_local]    I_local=I/tp) or owned (ep on)
  model.norm.weight, lm_head.weight    [Vp/tp, H]    (tied: lm_head is embed_tokens, as vLLM)

The fused-QKV attention here (Attention) also serves Mixtral (mixtral_tp.py: no q/k norm, an
optional sliding window). The shared pieces (parallel layout, RMSNorm, rotary, attention core,
MLP, experts, embedding, decoding loop) are in layers.py.

Failure: ValueError naming the config key or the parallel sizes a model cannot take.
Threading: one thread per process; the collectives are torch.distributed's."""
import torch
import torch.nn.functional as F
from torch import nn

import layers
from layers import (CausalLM, DenseMLP, Experts, Parallel, Rotary, Weight,  # noqa: F401
                    attend, expert_intermediate, extend_cache, is_int, rms_norm)


class Config:
    """What the forward needs from config.json (HF's key names; transformers 5 may move
    rope_theta into rope_parameters and writes num_experts as num_local_experts). Which layers
    are MoE follows vLLM and transformers exactly (sparse() below); hoist's planner checks the
    checkpoint against the same rule (planner/rules.h)."""

    def __init__(self, cfg):
        def need(key):
            return layers.need(cfg, key)

        self.model_type = need("model_type")
        if self.model_type not in ("qwen3", "qwen3_moe"):
            raise ValueError(f"config.json: model_type '{self.model_type}' is not qwen3 or "
                             "qwen3_moe")
        self.hidden = need("hidden_size")
        self.layers = need("num_hidden_layers")
        self.heads = need("num_attention_heads")
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.intermediate = cfg.get("intermediate_size", 0)
        self.vocab = need("vocab_size")
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.rope_theta = layers.default_rope_only(cfg, "Qwen3")
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.attention_bias = bool(cfg.get("attention_bias", False))
        self.experts = self._experts(cfg) if self.model_type == "qwen3_moe" else 0
        self.top_k = cfg.get("num_experts_per_tok", 0)
        self.moe_intermediate = cfg.get("moe_intermediate_size", 0)
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", False))
        self.sparse_step = cfg.get("decoder_sparse_step")
        if self.sparse_step is None:
            self.sparse_step = 1
        if not is_int(self.sparse_step) or self.sparse_step < 1:
            raise ValueError(f"config.json: decoder_sparse_step {self.sparse_step!r} is not a "
                             "positive integer")
        only = cfg.get("mlp_only_layers")
        if only is None:
            only = []
        if not isinstance(only, list) or not all(is_int(x) for x in only):
            raise ValueError(f"config.json: mlp_only_layers {only!r} is not a list of integers")
        self.mlp_only = set(only)
        if self.experts:
            for key, value in (("num_experts_per_tok", self.top_k),
                               ("moe_intermediate_size", self.moe_intermediate)):
                if not is_int(value) or value < 1:
                    raise ValueError(f"config.json: {self.experts} experts need a positive "
                                     f"'{key}', got {value!r}")
            if self.top_k > self.experts:
                raise ValueError(f"config.json: num_experts_per_tok {self.top_k} exceeds "
                                 f"{self.experts} experts")

    @staticmethod
    def _experts(cfg):
        """Qwen3-MoE's expert count. transformers 5 maps `num_experts` to `num_local_experts`
        (Qwen3MoeConfig.attribute_map), so the config.json it saves spells it
        num_local_experts; Hub configs spell it num_experts; vLLM reads either through the
        config object. Both present and different is ambiguous; neither is an error (transformers
        would silently assume 128)."""
        found = {k: cfg[k] for k in ("num_experts", "num_local_experts") if cfg.get(k) is not None}
        for key, value in found.items():
            if not is_int(value) or value < 0:
                raise ValueError(f"config.json: {key} {value!r} is not a non-negative integer")
        if len(set(found.values())) > 1:
            raise ValueError(f"config.json: num_experts {found['num_experts']} disagrees with "
                             f"num_local_experts {found['num_local_experts']}")
        if not found:
            raise ValueError("config.json: qwen3_moe without 'num_experts' (nor "
                             "'num_local_experts', as transformers 5 writes it)")
        return next(iter(found.values()))

    def sparse(self, layer):
        """vLLM's and transformers' Qwen3MoeDecoderLayer rule: a sparse MoE block when the model
        has experts, the layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step
        == 0; a dense MLP (intermediate_size) otherwise."""
        return (self.experts > 0 and layer not in self.mlp_only
                and (layer + 1) % self.sparse_step == 0)

    def layer_map(self):
        """One line for logs: which layers are MoE and why."""
        kinds = "".join("E" if self.sparse(i) else "d" for i in range(self.layers))
        return (f"layers {kinds} (E moe, d dense): num_experts {self.experts}, "
                f"decoder_sparse_step {self.sparse_step}, mlp_only_layers "
                f"{sorted(self.mlp_only)}")

    @property
    def padded_vocab(self):
        return layers.padded(self.vocab)


class Attention(nn.Module):
    """Fused-QKV attention (vLLM's QKVParallelLinear): qkv_proj column-parallel with kv heads
    replicated when tp exceeds them, o_proj row-parallel; optional q/k RMSNorm per head
    (Qwen3), biases (attention_bias) and sliding window (cfg.sliding_window, Mixtral)."""

    def __init__(self, cfg, par, dtype, device, qk_norm=True):
        super().__init__()
        if cfg.heads % par.tp:
            raise ValueError(f"{cfg.heads} attention heads do not split over tp {par.tp}")
        if par.tp > cfg.kv_heads and par.tp % cfg.kv_heads:
            raise ValueError(f"tp {par.tp} is not a multiple of {cfg.kv_heads} kv heads")
        if par.tp <= cfg.kv_heads and cfg.kv_heads % par.tp:
            raise ValueError(f"{cfg.kv_heads} kv heads do not split over tp {par.tp}")
        self.cfg, self.par = cfg, par
        self.q_heads = cfg.heads // par.tp
        self.kv_heads = max(1, cfg.kv_heads // par.tp)  # one replicated head when tp > kv heads
        hd, H = cfg.head_dim, cfg.hidden
        rows = (self.q_heads + 2 * self.kv_heads) * hd
        self.qkv_proj = Weight([rows, H], dtype, device, [rows] if cfg.attention_bias else None)
        self.o_proj = Weight([H, self.q_heads * hd], dtype, device,
                             [H] if cfg.attention_bias else None)
        if qk_norm:
            self.q_norm = Weight([hd], dtype, device)
            self.k_norm = Weight([hd], dtype, device)
        self.rotary = Rotary(hd, cfg.rope_theta, device)

    def forward(self, x, positions, cache):
        hd, T = self.cfg.head_dim, x.shape[0]
        q, k, v = self.qkv_proj(x).split(
            [self.q_heads * hd, self.kv_heads * hd, self.kv_heads * hd], dim=-1)
        q, k, v = (t.view(T, -1, hd) for t in (q, k, v))
        if hasattr(self, "q_norm"):
            q = rms_norm(q, self.q_norm.weight, self.cfg.eps)
            k = rms_norm(k, self.k_norm.weight, self.cfg.eps)
        q, k = self.rotary(q, positions), self.rotary(k, positions)
        k, v = extend_cache(cache, k, v)
        out = attend(q, k, v, positions, hd**-0.5, getattr(self.cfg, "sliding_window", None))
        out = self.par.all_reduce_tp(F.linear(out, self.o_proj.weight))
        return out + self.o_proj.bias if self.cfg.attention_bias else out


class SparseMoE(nn.Module):
    """Qwen3-MoE: softmax router, top-k, renormalised when norm_topk_prob; experts tp-sliced
    (partial sums reduced over tp) or owned under ep (summed over the world)."""

    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.ids = par.local_experts(cfg.experts)
        i_local = expert_intermediate(cfg.moe_intermediate, par)
        self.gate = Weight([cfg.experts, cfg.hidden], dtype, device)
        self.experts = Experts(len(self.ids), i_local, cfg.hidden, dtype, device)

    def forward(self, x):
        weights = self.gate(x).softmax(dim=-1, dtype=torch.float32)
        weights, chosen = weights.topk(self.cfg.top_k, dim=-1)
        if self.cfg.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = self.experts(x, self.ids, chosen, weights.to(x.dtype))
        return self.par.reduce_experts(out)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, par, layer, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = Weight([cfg.hidden], dtype, device)
        self.self_attn = Attention(cfg, par, dtype, device)
        self.post_attention_layernorm = Weight([cfg.hidden], dtype, device)
        if cfg.sparse(layer):
            self.mlp = SparseMoE(cfg, par, dtype, device)
        else:
            self.mlp = DenseMLP(cfg.hidden, cfg.intermediate, par, dtype, device)

    def forward(self, x, positions, cache):
        h = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, self.cfg.eps), positions,
                               cache)
        return h + self.mlp(rms_norm(h, self.post_attention_layernorm.weight, self.cfg.eps))


class Qwen3ForCausalLM(CausalLM):
    """state_dict(): exactly hoist's fused-layout names for this rank (tied lm_head aliases the
    embedding, as in vLLM)."""

    def __init__(self, cfg, par, dtype=torch.float32, device="cpu"):
        super().__init__(cfg, par, dtype, device,
                         lambda i: DecoderLayer(cfg, par, i, dtype, device))
