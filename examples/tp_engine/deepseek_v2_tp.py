"""DeepSeek-V2 (DeepseekV2ForCausalLM without q_lora_rank) for the example engine, from hoist's
fused layout (vLLM's names, docs/LAYOUT.md's deepseek_v2 table): multi-head latent attention
(MLA) and a MoE with shared experts after the first `first_k_dense_replace` dense layers.

  model.layers.L.self_attn.q_proj              [Hq/tp*(nope+rope), H]   column-parallel
  model.layers.L.self_attn.kv_a_proj_with_mqa  [kv_lora+rope, H]        replicated
  model.layers.L.self_attn.kv_a_layernorm      [kv_lora]                replicated
  model.layers.L.self_attn.kv_b_proj           [Hq/tp*(nope+v), kv_lora] column-parallel (heads)
  model.layers.L.self_attn.o_proj              [H, Hq/tp*v]             row-parallel
  model.layers.L.mlp.{gate_up_proj,down_proj}  dense layers (intermediate_size), as Qwen3
  model.layers.L.mlp.gate                      [E, H]                   router, replicated
  model.layers.L.mlp.shared_experts.{gate_up_proj,down_proj}  moe_intermediate_size x
                                                n_shared_experts, tp-sliced as a dense MLP
  model.layers.L.mlp.experts.{w13_weight,w2_weight}  routed experts, as Qwen3-MoE

As transformers' modeling_deepseek_v2: per head, q = [q_nope, q_pe]; the latent
c = kv_a_proj_with_mqa(x) = [c_kv, k_pe]; [k_nope, v] = kv_b_proj(RMSNorm(c_kv)); k_pe (one per
token, shared by every head) and q_pe get interleaved rotary over qk_rope_head_dim; softmax
scale (nope+rope)^-0.5. Routing: softmax over the experts in float32, top-k (greedy) or top-k
within the best topk_group of n_group groups (group_limited_greedy), weights times
routed_scaling_factor, plus the shared experts. This example caches the expanded keys and values
(vLLM caches the latent). Rope scaling (DeepSeek's YaRN), q_lora_rank (DeepSeek-V3-style q) and
attention biases are refused by name.

Failure: ValueError naming the config key or the parallel sizes a model cannot take.
Threading: one thread per process; the collectives are torch.distributed's."""
import torch
import torch.nn.functional as F
from torch import nn

from layers import (CausalLM, DenseMLP, Experts, Rotary, Weight, attend, default_rope_only,
                    expert_intermediate, extend_cache, need, rms_norm)


class DeepseekV2Config:
    def __init__(self, cfg):
        self.model_type = need(cfg, "model_type")
        self.hidden = need(cfg, "hidden_size")
        self.layers = need(cfg, "num_hidden_layers")
        self.heads = need(cfg, "num_attention_heads")
        self.vocab = need(cfg, "vocab_size")
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.rope_theta = default_rope_only(cfg, "DeepSeek-V2")
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        for key in ("q_lora_rank", "attention_bias"):
            if cfg.get(key):
                raise ValueError(f"config.json: {key} {cfg[key]!r} is not supported by this "
                                 "example's DeepSeek-V2 (it takes q_proj without LoRA, no biases)")
        self.kv_lora = need(cfg, "kv_lora_rank")
        self.nope = need(cfg, "qk_nope_head_dim")
        self.rope_dim = need(cfg, "qk_rope_head_dim")
        self.v_dim = need(cfg, "v_head_dim")
        self.intermediate = need(cfg, "intermediate_size")
        self.experts = cfg.get("n_routed_experts") or 0
        self.top_k = cfg.get("num_experts_per_tok") or 0
        self.moe_intermediate = cfg.get("moe_intermediate_size") or 0
        self.shared = cfg.get("n_shared_experts") or 0
        self.first_dense = cfg.get("first_k_dense_replace") or 0
        self.moe_every = cfg.get("moe_layer_freq") or 1
        self.scaling_factor = float(cfg.get("routed_scaling_factor") or 1.0)
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", False))
        self.topk_method = cfg.get("topk_method") or "greedy"
        self.groups, self.topk_group = cfg.get("n_group") or 1, cfg.get("topk_group") or 1
        if self.topk_method not in ("greedy", "group_limited_greedy"):
            raise ValueError(f"config.json: topk_method '{self.topk_method}' is not supported "
                             "by this example's DeepSeek-V2 (greedy, group_limited_greedy)")
        if self.experts and (self.experts % self.groups or self.top_k > self.experts):
            raise ValueError(f"config.json: {self.experts} experts, n_group {self.groups}, "
                             f"num_experts_per_tok {self.top_k}: not a valid routing")

    def sparse(self, layer):
        """vLLM's DeepseekV2DecoderLayer rule (transformers: layer >= first_k_dense_replace)."""
        return (self.experts > 0 and layer >= self.first_dense
                and layer % self.moe_every == 0)

    def layer_map(self):
        kinds = "".join("E" if self.sparse(i) else "d" for i in range(self.layers))
        return (f"layers {kinds} (E moe, d dense): n_routed_experts {self.experts}, "
                f"first_k_dense_replace {self.first_dense}, n_shared_experts {self.shared}, "
                f"topk_method {self.topk_method}, routed_scaling_factor {self.scaling_factor}")


class MlaAttention(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.heads = par.split(cfg.heads, "attention heads")
        qk = cfg.nope + cfg.rope_dim
        self.q_proj = Weight([self.heads * qk, cfg.hidden], dtype, device)
        self.kv_a_proj_with_mqa = Weight([cfg.kv_lora + cfg.rope_dim, cfg.hidden], dtype, device)
        self.kv_a_layernorm = Weight([cfg.kv_lora], dtype, device)
        self.kv_b_proj = Weight([self.heads * (cfg.nope + cfg.v_dim), cfg.kv_lora], dtype, device)
        self.o_proj = Weight([cfg.hidden, self.heads * cfg.v_dim], dtype, device)
        self.rotary = Rotary(cfg.rope_dim, cfg.rope_theta, device, interleaved=True)

    def forward(self, x, positions, cache):
        c, T = self.cfg, x.shape[0]
        q_nope, q_pe = self.q_proj(x).view(T, self.heads, -1).split([c.nope, c.rope_dim], -1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([c.kv_lora, c.rope_dim], dim=-1)
        kv = self.kv_b_proj(rms_norm(latent, self.kv_a_layernorm.weight, c.eps))
        k_nope, v = kv.view(T, self.heads, -1).split([c.nope, c.v_dim], dim=-1)
        q_pe = self.rotary(q_pe, positions)
        k_pe = self.rotary(k_pe.view(T, 1, c.rope_dim), positions).expand(-1, self.heads, -1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k, v = extend_cache(cache, torch.cat((k_nope, k_pe), dim=-1), v.contiguous())
        out = attend(q, k, v, positions, (c.nope + c.rope_dim) ** -0.5)
        return self.par.all_reduce_tp(F.linear(out, self.o_proj.weight))


class DeepseekV2MoE(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.ids = par.local_experts(cfg.experts)
        self.gate = Weight([cfg.experts, cfg.hidden], dtype, device)
        self.experts = Experts(len(self.ids), expert_intermediate(cfg.moe_intermediate, par),
                               cfg.hidden, dtype, device)
        if cfg.shared:
            self.shared_experts = DenseMLP(cfg.hidden, cfg.moe_intermediate * cfg.shared, par,
                                           dtype, device)

    def route(self, x):
        """(chosen experts [T, k], float32 weights [T, k]) as transformers' DeepseekV2Moe."""
        c = self.cfg
        scores = F.linear(x.float(), self.gate.weight.float()).softmax(dim=-1)
        if c.topk_method == "group_limited_greedy":
            T = scores.shape[0]
            best = scores.view(T, c.groups, -1).max(dim=-1).values
            keep = torch.zeros_like(best).scatter_(1, best.topk(c.topk_group, dim=-1)[1], 1)
            keep = keep[:, :, None].expand(-1, -1, c.experts // c.groups).reshape(T, -1)
            scores = scores.masked_fill(keep == 0, 0.0)
        weights, chosen = scores.topk(c.top_k, dim=-1)
        if c.norm_topk_prob and c.top_k > 1:  # vLLM's renormalize (DeepSeek-V2 leaves it off)
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights * c.scaling_factor

    def forward(self, x):
        chosen, weights = self.route(x)
        out = self.par.reduce_experts(self.experts(x, self.ids, chosen, weights))
        return out + self.shared_experts(x) if self.cfg.shared else out


class DeepseekV2DecoderLayer(nn.Module):
    def __init__(self, cfg, par, layer, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = Weight([cfg.hidden], dtype, device)
        self.self_attn = MlaAttention(cfg, par, dtype, device)
        self.post_attention_layernorm = Weight([cfg.hidden], dtype, device)
        if cfg.sparse(layer):
            self.mlp = DeepseekV2MoE(cfg, par, dtype, device)
        else:
            self.mlp = DenseMLP(cfg.hidden, cfg.intermediate, par, dtype, device)

    def forward(self, x, positions, cache):
        h = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, self.cfg.eps), positions,
                               cache)
        return h + self.mlp(rms_norm(h, self.post_attention_layernorm.weight, self.cfg.eps))


class DeepseekV2ForCausalLM(CausalLM):
    def __init__(self, cfg, par, dtype=torch.float32, device="cpu"):
        super().__init__(cfg, par, dtype, device,
                         lambda i: DeepseekV2DecoderLayer(cfg, par, i, dtype, device))
