"""Mixtral (MixtralForCausalLM) for the example engine, from hoist's fused layout (vLLM's names):
Qwen3's fused-QKV attention without q/k norm (qwen3_tp.Attention; a sliding window when
config.json sets sliding_window) and a sparse MoE block on every layer:

  model.layers.L.block_sparse_moe.gate               [E, H]   router, replicated
  model.layers.L.block_sparse_moe.experts.w13_weight [E_local, 2*I_local, H]  w1 (gate) rows
  model.layers.L.block_sparse_moe.experts.w2_weight  [E_local, H, I_local]    then w3 (up) rows

Routing as transformers' MixtralSparseMoeBlock and vLLM: softmax over the experts in float32,
top-k, always renormalised over the chosen k. I = intermediate_size (each expert's size).

Failure: ValueError naming the config key or the parallel sizes a model cannot take.
Threading: one thread per process; the collectives are torch.distributed's."""
import torch
from torch import nn

from layers import CausalLM, Experts, Weight, default_rope_only, expert_intermediate, need, \
    rms_norm
from qwen3_tp import Attention


class MixtralConfig:
    def __init__(self, cfg):
        self.model_type = need(cfg, "model_type")
        self.hidden = need(cfg, "hidden_size")
        self.layers = need(cfg, "num_hidden_layers")
        self.heads = need(cfg, "num_attention_heads")
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.vocab = need(cfg, "vocab_size")
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.rope_theta = default_rope_only(cfg, "Mixtral")
        self.sliding_window = cfg.get("sliding_window")
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.attention_bias = False
        self.experts = need(cfg, "num_local_experts")
        self.top_k = need(cfg, "num_experts_per_tok")
        self.moe_intermediate = need(cfg, "intermediate_size")
        if self.top_k > self.experts:
            raise ValueError(f"config.json: num_experts_per_tok {self.top_k} exceeds "
                             f"{self.experts} experts")

    def sparse(self, layer):
        return True  # every Mixtral layer is a sparse MoE block

    def layer_map(self):
        return (f"layers {'E' * self.layers} (E moe, d dense): num_local_experts {self.experts}, "
                f"top-{self.top_k}, sliding_window {self.sliding_window}")


class BlockSparseMoE(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.ids = par.local_experts(cfg.experts)
        self.gate = Weight([cfg.experts, cfg.hidden], dtype, device)
        self.experts = Experts(len(self.ids), expert_intermediate(cfg.moe_intermediate, par),
                               cfg.hidden, dtype, device)

    def forward(self, x):
        weights = self.gate(x).softmax(dim=-1, dtype=torch.float32)
        weights, chosen = weights.topk(self.cfg.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)  # float32, as transformers keeps them
        return self.par.reduce_experts(self.experts(x, self.ids, chosen, weights))


class MixtralDecoderLayer(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = Weight([cfg.hidden], dtype, device)
        self.self_attn = Attention(cfg, par, dtype, device, qk_norm=False)
        self.post_attention_layernorm = Weight([cfg.hidden], dtype, device)
        self.block_sparse_moe = BlockSparseMoE(cfg, par, dtype, device)

    def forward(self, x, positions, cache):
        h = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, self.cfg.eps), positions,
                               cache)
        return h + self.block_sparse_moe(rms_norm(h, self.post_attention_layernorm.weight,
                                                  self.cfg.eps))


class MixtralForCausalLM(CausalLM):
    def __init__(self, cfg, par, dtype=torch.float32, device="cpu"):
        super().__init__(cfg, par, dtype, device,
                         lambda i: MixtralDecoderLayer(cfg, par, dtype, device))
