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

Parameters are created empty; hoist.torch.load_into fills them. Batch 1, one sequence, a KV
cache per layer; every rank runs the same tokens (under ep the experts a rank owns are summed
over the whole world, so dp replicas of the attention each compute the same thing).

Failure: ValueError naming the config key or the parallel sizes a model cannot take.
Threading: one thread per process; the collectives are torch.distributed's."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB_PADDING = 64


class Config:
    """What the forward needs from config.json (HF's key names; transformers 5 may move
    rope_theta into rope_parameters)."""

    def __init__(self, cfg):
        def need(key):
            if key not in cfg:
                raise ValueError(f"config.json: missing '{key}'")
            return cfg[key]

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
        rope = cfg.get("rope_parameters") or {}
        theta = cfg.get("rope_theta", rope.get("rope_theta"))
        if theta is None:
            raise ValueError("config.json: no rope_theta (nor rope_parameters.rope_theta)")
        self.rope_theta = float(theta)
        scaling = cfg.get("rope_scaling") or {}
        kind = scaling.get("rope_type", scaling.get("type")) or rope.get("rope_type", "default")
        if kind != "default":
            raise ValueError(f"config.json: rope scaling '{kind}' is not supported by this example")
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self.attention_bias = bool(cfg.get("attention_bias", False))
        self.experts = cfg.get("num_experts", 0) if self.model_type == "qwen3_moe" else 0
        self.top_k = cfg.get("num_experts_per_tok", 0)
        self.moe_intermediate = cfg.get("moe_intermediate_size", 0)
        self.norm_topk_prob = bool(cfg.get("norm_topk_prob", False))
        self.sparse_step = cfg.get("decoder_sparse_step", 1) or 1
        self.mlp_only = set(cfg.get("mlp_only_layers") or [])

    def sparse(self, layer):
        return (self.experts > 0 and layer not in self.mlp_only
                and (layer + 1) % self.sparse_step == 0)

    @property
    def padded_vocab(self):
        return (self.vocab + VOCAB_PADDING - 1) // VOCAB_PADDING * VOCAB_PADDING


class Parallel:
    """rank r of world: tp_rank = r % tp, dp group r // tp (docs/LAYOUT.md). ep > 0: expert
    parallel over the whole world (ep = world = tp x dp), experts placed linear or round_robin."""

    def __init__(self, rank, world, tp, ep=0, placement="linear"):
        if ep:
            if ep != world or world % tp:
                raise ValueError(f"ep {ep} must equal the world ({world}) and be a multiple of "
                                 f"tp {tp}")
        elif world % tp:
            raise ValueError(f"world {world} is not a multiple of tp {tp}")
        self.rank, self.world, self.tp, self.ep = rank, world, tp, ep
        self.placement = placement
        self.tp_rank = rank % tp
        self.dp_rank = rank // tp
        self.tp_group = None
        if world > 1 and tp > 1:
            groups = [dist.new_group(list(range(d * tp, (d + 1) * tp))) for d in range(world // tp)]
            self.tp_group = groups[self.dp_rank]  # every rank creates every group, in order

    @staticmethod
    def _all_reduce(x, group):
        """In place; gloo (as of torch 1.13) has no bfloat16 sum, so it reduces in float32."""
        if x.dtype == torch.bfloat16 and dist.get_backend(group) == "gloo":
            wide = x.float()
            dist.all_reduce(wide, group=group)
            x.copy_(wide)
        else:
            dist.all_reduce(x, group=group)
        return x

    def all_reduce_tp(self, x):
        return self._all_reduce(x, self.tp_group) if self.tp > 1 else x

    def all_reduce_world(self, x):
        return self._all_reduce(x, None) if self.world > 1 else x

    def all_gather_tp(self, x):
        """Concatenates x over the tp group along the last dimension, in tp-rank order."""
        if self.tp == 1:
            return x
        wide = x.dtype == torch.bfloat16 and dist.get_backend(self.tp_group) == "gloo"
        y = x.float() if wide else x.contiguous()  # gloo: no bfloat16 (exact either way)
        parts = [torch.empty_like(y) for _ in range(self.tp)]
        dist.all_gather(parts, y, group=self.tp_group)
        return torch.cat(parts, dim=-1).to(x.dtype)

    def local_experts(self, experts):
        """Global expert ids this rank holds, in the order of its w13/w2 rows."""
        if not self.ep:
            return list(range(experts))
        if experts % self.ep:
            raise ValueError(f"{experts} experts do not split over ep {self.ep}")
        n = experts // self.ep
        if self.placement == "round_robin":
            return [self.rank + i * self.ep for i in range(n)]
        return list(range(self.rank * n, (self.rank + 1) * n))


def _param(shape, dtype, device):
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class Weight(nn.Module):
    """A module holding one `weight` (and optionally `bias`), named as vLLM's layers are."""

    def __init__(self, shape, dtype, device, bias_shape=None):
        super().__init__()
        self.weight = _param(shape, dtype, device)
        if bias_shape is not None:
            self.bias = _param(bias_shape, dtype, device)


def rms_norm(x, weight, eps):
    """As HF's Qwen3RMSNorm: normalise in float32, cast back, then scale."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


class Rotary:
    """Neox-style rotary embedding over the whole head (Qwen3), theta from config."""

    def __init__(self, head_dim, theta, device):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64,
                                                      device=device).float() / head_dim))

    def __call__(self, x, positions):  # x [T, heads, hd]
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[:, None, :], emb.sin().to(x.dtype)[:, None, :]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg, par, dtype, device):
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
        self.q_norm = Weight([hd], dtype, device)
        self.k_norm = Weight([hd], dtype, device)

    def forward(self, x, positions, cache, rotary):
        hd, T = self.cfg.head_dim, x.shape[0]
        qkv = F.linear(x, self.qkv_proj.weight, getattr(self.qkv_proj, "bias", None))
        q, k, v = qkv.split([self.q_heads * hd, self.kv_heads * hd, self.kv_heads * hd], dim=-1)
        q = rms_norm(q.view(T, self.q_heads, hd), self.q_norm.weight, self.cfg.eps)
        k = rms_norm(k.view(T, self.kv_heads, hd), self.k_norm.weight, self.cfg.eps)
        v = v.view(T, self.kv_heads, hd)
        q, k = rotary(q, positions), rotary(k, positions)
        if cache:  # earlier positions of this layer
            k, v = torch.cat((cache["k"], k)), torch.cat((cache["v"], v))
        cache["k"], cache["v"] = k, v
        group = self.q_heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = (torch.einsum("thd,shd->hts", q, k) * hd**-0.5).float()  # as HF: scale first
        key_pos = torch.arange(k.shape[0], device=x.device)
        scores.masked_fill_(key_pos[None, None, :] > positions[None, :, None], float("-inf"))
        probs = scores.softmax(dim=-1).to(v.dtype)
        out = torch.einsum("hts,shd->thd", probs, v).reshape(T, self.q_heads * hd)
        out = self.par.all_reduce_tp(F.linear(out, self.o_proj.weight))
        return out + self.o_proj.bias if self.cfg.attention_bias else out


class DenseMLP(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        if cfg.intermediate % par.tp:
            raise ValueError(f"intermediate_size {cfg.intermediate} does not split over tp "
                             f"{par.tp}")
        i = cfg.intermediate // par.tp
        self.par = par
        self.gate_up_proj = Weight([2 * i, cfg.hidden], dtype, device)
        self.down_proj = Weight([cfg.hidden, i], dtype, device)

    def forward(self, x):
        gate, up = F.linear(x, self.gate_up_proj.weight).chunk(2, dim=-1)
        return self.par.all_reduce_tp(F.linear(F.silu(gate) * up, self.down_proj.weight))


class Experts(nn.Module):
    def __init__(self, n_local, i_local, hidden, dtype, device):
        super().__init__()
        self.w13_weight = _param([n_local, 2 * i_local, hidden], dtype, device)
        self.w2_weight = _param([n_local, hidden, i_local], dtype, device)


class SparseMoE(nn.Module):
    """Qwen3-MoE: softmax router, top-k, renormalised when norm_topk_prob; experts tp-sliced
    (partial sums reduced over tp) or owned under ep (summed over the world)."""

    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.ids = par.local_experts(cfg.experts)
        if not par.ep and cfg.moe_intermediate % par.tp:
            raise ValueError(f"moe_intermediate_size {cfg.moe_intermediate} does not split over "
                             f"tp {par.tp}")
        i_local = cfg.moe_intermediate if par.ep else cfg.moe_intermediate // par.tp
        self.gate = Weight([cfg.experts, cfg.hidden], dtype, device)
        self.experts = Experts(len(self.ids), i_local, cfg.hidden, dtype, device)

    def forward(self, x):
        logits = F.linear(x, self.gate.weight)
        weights = logits.softmax(dim=-1, dtype=torch.float32)
        weights, chosen = weights.topk(self.cfg.top_k, dim=-1)
        if self.cfg.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        out = torch.zeros_like(x)
        for local, expert in enumerate(self.ids):
            token, slot = (chosen == expert).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up = F.linear(x[token], self.experts.w13_weight[local]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.experts.w2_weight[local])
            out.index_add_(0, token, y * weights[token, slot, None])
        if self.par.ep:
            return self.par.all_reduce_world(out)
        return self.par.all_reduce_tp(out)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, par, layer, dtype, device):
        super().__init__()
        self.cfg = cfg
        self.input_layernorm = Weight([cfg.hidden], dtype, device)
        self.self_attn = Attention(cfg, par, dtype, device)
        self.post_attention_layernorm = Weight([cfg.hidden], dtype, device)
        sparse = cfg.sparse(layer)
        self.mlp = (SparseMoE if sparse else DenseMLP)(cfg, par, dtype, device)

    def forward(self, x, positions, cache, rotary):
        h = x + self.self_attn(rms_norm(x, self.input_layernorm.weight, self.cfg.eps), positions,
                               cache, rotary)
        return h + self.mlp(rms_norm(h, self.post_attention_layernorm.weight, self.cfg.eps))


class VocabEmbedding(nn.Module):
    """Rows [tp_rank*Vp/tp, (tp_rank+1)*Vp/tp) of the padded vocab; ids outside are zero here
    and come from their owner through the all-reduce."""

    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        if cfg.padded_vocab % par.tp:
            raise ValueError(f"padded vocab {cfg.padded_vocab} does not split over tp {par.tp}")
        self.par = par
        self.weight = _param([cfg.padded_vocab // par.tp, cfg.hidden], dtype, device)

    def forward(self, ids):
        rows = self.weight.shape[0]
        local = ids - self.par.tp_rank * rows
        inside = (local >= 0) & (local < rows)
        out = F.embedding(local.clamp(0, rows - 1), self.weight) * inside[:, None].to(
            self.weight.dtype)
        return self.par.all_reduce_tp(out)


class Model(nn.Module):
    def __init__(self, cfg, par, dtype, device):
        super().__init__()
        self.embed_tokens = VocabEmbedding(cfg, par, dtype, device)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, par, i, dtype, device) for i in range(cfg.layers))
        self.norm = Weight([cfg.hidden], dtype, device)


class Qwen3ForCausalLM(nn.Module):
    """state_dict(): exactly hoist's fused-layout names for this rank (tied lm_head aliases the
    embedding, as in vLLM)."""

    def __init__(self, cfg, par, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.model = Model(cfg, par, dtype, device)
        self.lm_head = Weight([cfg.padded_vocab // par.tp, cfg.hidden], dtype, device)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta, device)

    def new_cache(self):
        return [dict() for _ in range(self.cfg.layers)]

    @torch.no_grad()
    def forward(self, ids, start, cache):
        """Logits [T, V] (float32, padded vocab rows dropped) of tokens `ids` at positions
        start..start+T-1, extending `cache`."""
        positions = torch.arange(start, start + ids.shape[0], device=ids.device)
        h = self.model.embed_tokens(ids)
        for layer, c in zip(self.model.layers, cache):
            h = layer(h, positions, c, self.rotary)
        h = rms_norm(h, self.model.norm.weight, self.cfg.eps)
        logits = self.par.all_gather_tp(F.linear(h, self.lm_head.weight))
        return logits[:, :self.cfg.vocab].float()

    def generate(self, prompt, steps):
        """Greedy: (tokens, prefill logits [P, V], logits of each chosen token [steps, V]).
        Rank 0's choice is broadcast so every rank follows the same sequence."""
        cache = self.new_cache()
        device = self.lm_head.weight.device
        ids = torch.tensor(prompt, dtype=torch.int64, device=device)
        logits = self.forward(ids, 0, cache)
        prefill, step_logits, tokens = logits, [logits[-1]], []
        pos = len(prompt)
        for i in range(steps):
            nxt = step_logits[-1].argmax().reshape(1)
            if self.par.world > 1:
                dist.broadcast(nxt, src=0)
            tokens.append(int(nxt.item()))
            if i + 1 == steps:
                break
            step_logits.append(self.forward(nxt, pos, cache)[-1])
            pos += 1
        return tokens, prefill, torch.stack(step_logits)
