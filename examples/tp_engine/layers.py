"""The pieces every family of the example engine shares: the parallel layout (Parallel), empty
parameters named as hoist's output (Weight), RMSNorm, rotary embeddings (plain and YaRN, neox
and interleaved), causal attention over a KV cache (sliding window and attention sinks
optional), the merged dense MLP, the vocab-parallel embedding, and the decoding loop
(CausalLM.forward / generate) that each family's model inherits.

Parameters are created empty; hoist.torch.load_into fills them (the names and per-rank shapes
of docs/LAYOUT.md). Batch 1, one sequence; every rank runs the same tokens.

Failure: ValueError naming the size that does not split over the parallel sizes.
Threading: one thread per process; the collectives are torch.distributed's."""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB_PADDING = 64


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def need(cfg, key):
    """cfg[key], or a ValueError naming the missing config.json key."""
    if cfg.get(key) is None:
        raise ValueError(f"config.json: missing '{key}'")
    return cfg[key]


def rope_parameters(cfg):
    """(theta, scaling dict) from config.json: transformers 5 keeps both in rope_parameters,
    older configs have rope_theta and rope_scaling at the top level."""
    rope = dict(cfg.get("rope_parameters") or {})
    rope.update(cfg.get("rope_scaling") or {})
    theta = cfg.get("rope_theta", rope.get("rope_theta"))
    if theta is None:
        raise ValueError("config.json: no rope_theta (nor rope_parameters.rope_theta)")
    kind = rope.get("rope_type", rope.get("type")) or "default"
    rope["rope_type"] = kind
    return float(theta), rope


def default_rope_only(cfg, family):
    """The theta of a config without rope scaling; a ValueError naming any other kind."""
    theta, rope = rope_parameters(cfg)
    if rope["rope_type"] != "default":
        raise ValueError(f"config.json: rope scaling '{rope['rope_type']}' is not supported by "
                         f"this example's {family}")
    return theta


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

    def split(self, n, what):
        """n / tp, or a ValueError naming `what`."""
        if n % self.tp:
            raise ValueError(f"{what} {n} does not split over tp {self.tp}")
        return n // self.tp

    def local_experts(self, experts):
        """Global expert ids this rank holds, in the order of its expert rows."""
        if not self.ep:
            return list(range(experts))
        if experts % self.ep:
            raise ValueError(f"{experts} experts do not split over ep {self.ep}")
        n = experts // self.ep
        if self.placement == "round_robin":
            return [self.rank + i * self.ep for i in range(n)]
        return list(range(self.rank * n, (self.rank + 1) * n))

    def reduce_experts(self, x):
        """Sums routed-expert outputs: owned experts over the world under ep, tp slices else."""
        return self.all_reduce_world(x) if self.ep else self.all_reduce_tp(x)


def param(shape, dtype, device):
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class Weight(nn.Module):
    """A module holding one `weight` (and optionally `bias`), named as vLLM's layers are."""

    def __init__(self, shape, dtype, device, bias_shape=None):
        super().__init__()
        self.weight = param(shape, dtype, device)
        if bias_shape is not None:
            self.bias = param(bias_shape, dtype, device)

    def forward(self, x):  # as a linear layer
        return F.linear(x, self.weight, getattr(self, "bias", None))


def rms_norm(x, weight, eps, scale_in_float32=False):
    """HF's RMSNorm: normalise in float32; then cast back and scale (Llama, Qwen3, Mixtral,
    DeepSeek), or scale in float32 and cast (scale_in_float32: GPT-OSS)."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if scale_in_float32:
        return (weight.float() * h).to(dtype)
    return weight * h.to(dtype)


def yarn_inv_freq(dim, theta, rope):
    """transformers' _compute_yarn_parameters: (inv_freq [dim/2], attention factor)."""
    factor = float(rope["factor"])
    original = rope["original_max_position_embeddings"]
    beta_fast, beta_slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1
    attention = rope.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0

    def correction_dim(rotations):
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos = theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolate = 1 - ramp
    inv = (1.0 / (factor * pos)) * (1 - extrapolate) + (1.0 / pos) * extrapolate
    return inv, float(attention)


class Rotary:
    """Rotary embedding over `dim` dims: neox (rotate halves: Llama, Qwen3, Mixtral, GPT-OSS) or
    interleaved pairs (DeepSeek); 'default' or 'yarn' frequencies (cos/sin times YaRN's
    attention factor, as transformers applies it). Computed in float32, cast to x's dtype."""

    def __init__(self, dim, theta, device, rope=None, interleaved=False):
        kind = (rope or {}).get("rope_type", "default")
        if kind == "yarn":
            inv, self.scale = yarn_inv_freq(dim, theta, rope)
        elif kind == "default":
            inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
            self.scale = 1.0
        else:
            raise ValueError(f"config.json: rope scaling '{kind}' is not supported by this "
                             "example")
        self.inv_freq = inv.to(device)
        self.interleaved = interleaved

    def __call__(self, x, positions):  # x [T, heads, dim]
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        cos, sin = (freqs.cos() * self.scale)[:, None, :], (freqs.sin() * self.scale)[:, None, :]
        if self.interleaved:  # DeepSeek: pairs (2i, 2i+1) as complex numbers, in float32
            a, b = x.float()[..., 0::2], x.float()[..., 1::2]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(
                x.dtype)
        cos, sin = torch.cat((cos, cos), -1).to(x.dtype), torch.cat((sin, sin), -1).to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


def attend(q, k, v, positions, scale, window=None, sinks=None):
    """Causal attention of queries q [T, Hq, d] at `positions` over keys/values k [S, Hkv, d],
    v [S, Hkv, dv] at positions 0..S-1 (Hq a multiple of Hkv). window: a key is seen when it is
    among the last `window` positions (transformers' sliding_window). sinks [Hq]: a per-head
    logit that joins the softmax and is dropped after it (GPT-OSS). Returns [T, Hq * dv]."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (torch.einsum("thd,shd->hts", q, k) * scale).float()  # as HF: scale first
    key_pos = torch.arange(k.shape[0], device=q.device)
    hidden = key_pos[None, None, :] > positions[None, :, None]
    if window is not None:
        hidden |= key_pos[None, None, :] <= positions[None, :, None] - window
    scores.masked_fill_(hidden, float("-inf"))
    if sinks is not None:
        sink = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
        probs = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
    else:
        probs = scores.softmax(dim=-1)
    out = torch.einsum("hts,shd->thd", probs.to(v.dtype), v)
    return out.reshape(q.shape[0], -1)


def extend_cache(cache, k, v):
    """Appends this step's keys and values to a layer's cache; returns the whole sequence's."""
    if cache:
        k, v = torch.cat((cache["k"], k)), torch.cat((cache["v"], v))
    cache["k"], cache["v"] = k, v
    return k, v


class DenseMLP(nn.Module):
    """vLLM's merged MLP: gate_up_proj [2*I/tp, H] (gate rows, then up rows), down_proj
    [H, I/tp], SiLU; the partial sums are reduced over tp. Also DeepSeek's shared experts."""

    def __init__(self, hidden, intermediate, par, dtype, device):
        super().__init__()
        i = par.split(intermediate, "intermediate size")
        self.par = par
        self.gate_up_proj = Weight([2 * i, hidden], dtype, device)
        self.down_proj = Weight([hidden, i], dtype, device)

    def forward(self, x):
        gate, up = F.linear(x, self.gate_up_proj.weight).chunk(2, dim=-1)
        return self.par.all_reduce_tp(F.linear(F.silu(gate) * up, self.down_proj.weight))


class Experts(nn.Module):
    """vLLM's fused experts: w13_weight [E_local, 2*I_local, H] (per expert: gate rows, then up
    rows) and w2_weight [E_local, H, I_local]; I_local = I under ep, I/tp otherwise."""

    def __init__(self, n_local, i_local, hidden, dtype, device):
        super().__init__()
        self.w13_weight = param([n_local, 2 * i_local, hidden], dtype, device)
        self.w2_weight = param([n_local, hidden, i_local], dtype, device)

    def forward(self, x, ids, chosen, weights):
        """sum over chosen experts this rank holds of weight * SiLU-gated MLP (partial)."""
        out = torch.zeros_like(x)
        for local, expert in enumerate(ids):
            token, slot = (chosen == expert).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            gate, up = F.linear(x[token], self.w13_weight[local]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.w2_weight[local])
            out.index_add_(0, token, (y * weights[token, slot, None]).to(x.dtype))
        return out


def expert_intermediate(moe_intermediate, par):
    """I_local: the whole expert intermediate size under ep, its tp share otherwise."""
    return moe_intermediate if par.ep else par.split(moe_intermediate, "moe intermediate size")


class VocabEmbedding(nn.Module):
    """Rows [tp_rank*Vp/tp, (tp_rank+1)*Vp/tp) of the padded vocab; ids outside are zero here
    and come from their owner through the all-reduce."""

    def __init__(self, padded_vocab, hidden, par, dtype, device):
        super().__init__()
        self.par = par
        self.weight = param([par.split(padded_vocab, "padded vocab"), hidden], dtype, device)

    def forward(self, ids):
        rows = self.weight.shape[0]
        local = ids - self.par.tp_rank * rows
        inside = (local >= 0) & (local < rows)
        out = F.embedding(local.clamp(0, rows - 1), self.weight) * inside[:, None].to(
            self.weight.dtype)
        return self.par.all_reduce_tp(out)


def padded(vocab):
    return (vocab + VOCAB_PADDING - 1) // VOCAB_PADDING * VOCAB_PADDING


class Model(nn.Module):
    """`model.`: embed_tokens, layers, norm (the names every family shares)."""

    def __init__(self, cfg, par, dtype, device, make_layer):
        super().__init__()
        self.embed_tokens = VocabEmbedding(padded(cfg.vocab), cfg.hidden, par, dtype, device)
        self.layers = nn.ModuleList(make_layer(i) for i in range(cfg.layers))
        self.norm = Weight([cfg.hidden], dtype, device)


class CausalLM(nn.Module):
    """The decoding loop every family shares. A subclass sets self.model (a Model whose layers
    are called as layer(h, positions, cache)), and cfg.final_norm_in_float32 where the final
    norm scales in float32. state_dict(): exactly hoist's names for this rank (a tied lm_head
    aliases the embedding, as in vLLM). LAYOUT: the hoist layout the names are those of."""
    LAYOUT = "fused"

    def __init__(self, cfg, par, dtype, device, make_layer):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.model = Model(cfg, par, dtype, device, make_layer)
        self.lm_head = Weight([padded(cfg.vocab) // par.tp, cfg.hidden], dtype, device)
        if cfg.tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def new_cache(self):
        return [dict() for _ in range(self.cfg.layers)]

    @torch.no_grad()
    def forward(self, ids, start, cache):
        """Logits [T, V] (float32, padded vocab rows dropped) of tokens `ids` at positions
        start..start+T-1, extending `cache`."""
        positions = torch.arange(start, start + ids.shape[0], device=ids.device)
        h = self.model.embed_tokens(ids)
        for layer, c in zip(self.model.layers, cache):
            h = layer(h, positions, c)
        h = rms_norm(h, self.model.norm.weight, self.cfg.eps,
                     getattr(self.cfg, "final_norm_in_float32", False))
        logits = self.par.all_gather_tp(F.linear(h, self.lm_head.weight))
        return logits[:, :self.cfg.vocab].float()

    def generate(self, prompt, steps, on_first_token=None):
        """Greedy: (tokens, prefill logits [P, V], logits of each chosen token [steps, V]).
        Rank 0's choice is broadcast so every rank follows the same sequence. on_first_token() is
        called once the first token is on the host."""
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
            if on_first_token is not None and len(tokens) == 1:
                on_first_token()
            if i + 1 == steps:
                break
            step_logits.append(self.forward(nxt, pos, cache)[-1])
            pos += 1
        return tokens, prefill, torch.stack(step_logits)
