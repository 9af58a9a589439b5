"""GPU check of the example engine (examples/tp_engine/run.py) against transformers itself.

On the GPU box (torch + transformers 5.x + safetensors, no network; hoist built, its Python
package importable): writes small random checkpoints with transformers' own save_pretrained
(bf16, seeded), one per case: a Qwen3 (tied, 2 kv heads), a Qwen3-MoE (untied, 8 experts, top-2,
a dense layer), a Qwen3-MoE with decoder_sparse_step 2 (experts on layers 1 and 3), a Mixtral,
a GPT-OSS with BF16 experts (loaded in hoist's hf layout; sliding window shorter than the
sequence, random biases and sinks so every term counts, some SwiGLU inputs past the clamp) and
a DeepSeek-V2 (MLA without q_lora, shared experts, first_k_dense_replace 1,
routed_scaling_factor != 1). It takes transformers' from_pretrained model as the reference
(greedy decoding by full recompute, eager attention); of up to 24 seeds it keeps the first whose
float32 reference has clear top-2 and router margins and whose bf16 reference decodes the same
tokens (a bf16 tie would otherwise decide a token). Then it runs the engine at tp 1, and at tp 2
(and ep 2 for the mixtures of experts) with NCCL under mpirun when 2 GPUs are visible, in
bfloat16 and float32 arithmetic over the same bf16 weights. Pass: greedy tokens identical and
logits within tolerance of the reference's (max |diff| / max |logit|: 5e-2 in bf16, 2e-3 in
float32). Prints a table (with the max absolute logit difference); writes engine_check.md and
engine_check.jsonl under --out.

    python3 bench/engine_check.py --out $OUT [--work DIR] [--steps 8] [--only mixtral,gpt_oss]

Before any engine run, each checkpoint's MoE layout is checked three ways and printed: the layers
where transformers built a sparse block, the layers whose tensors in the saved files are a
router + experts, and the layers the engine's config rule (examples/tp_engine/models.py picks
the family; for Qwen3-MoE the same rule as vLLM's and hoist's planner) makes sparse from the
saved config.json. A disagreement fails that model's preparation naming the layers.

Diagnostics (printed, not part of pass/fail): per family, the engine's rotary frequencies and
attention factor against transformers' rotary_emb, and at tp 1 in float32 the max |diff| of
every decoder layer's output on the prompt, engine (loaded by hoist in a child process:
`engine_check.py --layers FOLDER`) against transformers, so a failure points at its layer.

Every step prints what it does; a failure prints why and the run goes on to the next case.
Exit status: 0 all pass, 1 a case failed, 2 the environment cannot run the check."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE_DIR = os.path.join(ROOT, "examples", "tp_engine")
RUN = os.path.join(ENGINE_DIR, "run.py")
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "decoder_sparse_step",
            "mlp_only_layers", "first_k_dense_replace", "n_shared_experts", "num_experts_per_tok",
            "moe_intermediate_size", "norm_topk_prob", "topk_method", "routed_scaling_factor",
            "layer_types", "sliding_window")
PROMPT = [3, 17, 92, 250, 511, 7, 800, 42]
TOL = {"bfloat16": 5e-2, "float32": 2e-3}
SEEDS = range(24)
MIN_MARGIN = 0.03  # relative top-2 logit gap (and router gap) a seed must have in float32


def log(msg):
    print(f"[engine_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def dense_config(transformers):
    return transformers.Qwen3Config(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
        attention_bias=False)


def moe_config(transformers, layers=3, step=1, mlp_only=(1,)):
    return transformers.Qwen3MoeConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
        num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=step,
        mlp_only_layers=list(mlp_only), max_position_embeddings=1024, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=False, attention_bias=False)


def moe_step2_config(transformers):
    """Experts on layers 1 and 3 only (vLLM's and transformers' rule)."""
    return moe_config(transformers, layers=4, step=2, mlp_only=())


def mixtral_config(transformers):
    return transformers.AutoConfig.for_model(
        "mixtral", vocab_size=1000, hidden_size=256, intermediate_size=256, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=4, head_dim=32, num_local_experts=8,
        num_experts_per_tok=2, max_position_embeddings=1024, rms_norm_eps=1e-5,
        rope_theta=1000000.0, tie_word_embeddings=False)


def gpt_oss_config(transformers):
    """Alternating sliding (window 4: shorter than prompt + steps) and full attention, YaRN rope
    as transformers' GptOssConfig writes it by default."""
    return transformers.AutoConfig.for_model(
        "gpt_oss", vocab_size=1000, hidden_size=256, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, head_dim=32, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=4, max_position_embeddings=1024,
        tie_word_embeddings=False)


def deepseek_v2_config(transformers):
    return transformers.AutoConfig.for_model(
        "deepseek_v2", vocab_size=1000, hidden_size=256, intermediate_size=512,
        num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=None,
        kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
        n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
        topk_method="greedy", routed_scaling_factor=1.5, max_position_embeddings=1024,
        tie_word_embeddings=False)


# name -> config maker; the order of the table
MODELS = {"qwen3": dense_config, "qwen3-moe": moe_config, "qwen3-moe-step2": moe_step2_config,
          "mixtral": mixtral_config, "gpt_oss": gpt_oss_config,
          "deepseek_v2": deepseek_v2_config}


def experts_of(cfg):
    """Routed experts of a transformers config (0: dense), under any family's key."""
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if getattr(cfg, key, None):
            return getattr(cfg, key)
    return 0


def saved_tensor_names(folder):
    """Every tensor name in the folder's safetensors files (headers only)."""
    import struct
    names = set()
    for f in os.listdir(folder):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                names |= {k for k in json.loads(fh.read(n)) if k != "__metadata__"}
    return names


def moe_layout(name, model, folder):
    """Checks that transformers' model, the saved tensors and the engine's rule over the saved
    config.json agree on which layers are MoE; prints all three and the deciding keys. Returns
    the layout string ('E' moe, 'd' dense); raises RuntimeError naming the layers otherwise."""
    sys.path.insert(0, ENGINE_DIR)
    import models  # the engine's own choice of family and parsing of config.json
    with open(os.path.join(folder, "config.json")) as fh:
        saved = json.load(fh)
    keys = {k: saved[k] for k in MOE_KEYS if k in saved}
    log(f"{name}: config.json: model_type {saved.get('model_type')}, "
        f"num_hidden_layers {saved.get('num_hidden_layers')}, {keys}")
    layers = model.model.layers
    hf = "".join("E" if any(n.split(".")[-1] == "experts" for n, _ in layer.named_modules())
                 else "d" for layer in layers)
    names = saved_tensor_names(folder)
    files = ""
    for i in range(len(layers)):
        mine = [n for n in names if n.startswith(f"model.layers.{i}.")]
        moe = any(".experts." in n for n in mine)
        dense = f"model.layers.{i}.mlp.gate_proj.weight" in mine
        files += "E" if moe and not dense else "d" if dense and not moe else "?"
    try:
        cfg, model_class = models.family(saved)
        engine = "".join("E" if cfg.sparse(i) else "d" for i in range(cfg.layers))
        log(f"{name}: engine family {model_class.__name__} (hoist layout {model_class.LAYOUT})")
    except ValueError as e:
        engine = f"(config.json rejected: {e})"
    log(f"{name}: MoE layers (E moe, d dense): transformers {hf}, saved tensors {files}, "
        f"engine rule on config.json {engine}; tensors of layer {len(layers) - 1}: "
        f"{sorted(n for n in names if n.startswith(f'model.layers.{len(layers) - 1}.'))[:8]}")
    if not (hf == files == engine):
        raise RuntimeError(f"MoE layers disagree: transformers built {hf}, the saved tensors are "
                           f"{files}, the engine's rule on the saved config.json gives {engine} "
                           f"(config keys {keys})")
    return hf


def split_fused_experts(folder):
    """If save_pretrained wrote experts fused (mlp.experts.gate_up_proj [E, 2I, H], down_proj
    [E, H, I]) rather than the Hub's per-expert tensors, rewrite them per expert. Returns the
    number of tensors rewritten (0: already per expert, as transformers 5 reverses its fusion)."""
    from safetensors.torch import load_file, save_file
    with open(os.path.join(folder, "config.json")) as fh:
        hidden = json.load(fh)["hidden_size"]
    changed = 0
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(folder, f)
        tensors = load_file(path)
        fused = [n for n in tensors if n.endswith(("mlp.experts.gate_up_proj",
                                                  "mlp.experts.down_proj"))]
        if not fused:
            continue
        out = {}
        for name, t in tensors.items():
            if name in fused and (t.dim() != 3 or (t.shape[2] if "gate_up" in name
                                                   else t.shape[1]) != hidden):
                raise RuntimeError(f"{f}: {name} has shape {list(t.shape)}, not [E, 2I, "
                                   f"{hidden}] / [E, {hidden}, I]: unknown fused layout")
            if name.endswith("mlp.experts.gate_up_proj"):
                base, inter = name[:-len("gate_up_proj")], t.shape[1] // 2
                for e in range(t.shape[0]):
                    out[f"{base}{e}.gate_proj.weight"] = t[e, :inter].contiguous()
                    out[f"{base}{e}.up_proj.weight"] = t[e, inter:].contiguous()
                changed += 1
            elif name.endswith("mlp.experts.down_proj"):
                base = name[:-len("down_proj")]
                for e in range(t.shape[0]):
                    out[f"{base}{e}.down_proj.weight"] = t[e].contiguous()
                changed += 1
            else:
                out[name] = t
        save_file(out, path, metadata={"format": "pt"})
    index = os.path.join(folder, "model.safetensors.index.json")
    if changed and os.path.exists(index):
        raise RuntimeError("fused experts in a sharded checkpoint: rewrite the index too "
                           "(not needed for these sizes)")
    return changed


class HfReference:
    """transformers' model from the saved folder: greedy decoding by full recompute."""

    def __init__(self, transformers, torch, folder, dtype):
        kw = {"attn_implementation": "eager"}
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw)
        except TypeError:  # transformers 4.x spelling
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype,
                                                                      **kw)
        self.torch, self.model = torch, model.cuda().eval()
        self.router_inputs = []
        for _, mod in self.model.named_modules():  # a MoE block: the input of its router
            routers = [getattr(mod, a, None) for a in ("gate", "router")]
            router = next((r for r in routers if isinstance(r, torch.nn.Module)), None)
            if router is not None and hasattr(mod, "experts") and \
                    getattr(router, "weight", None) is not None and router.weight.dim() == 2:
                mod.register_forward_pre_hook(self._capture(router), with_kwargs=True)

    def _capture(self, router):
        """DeepSeek-V2's block reads its gate's weight without calling the gate: hook the block
        and take the router's weight (and bias) from it."""
        def hook(_, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            bias = getattr(router, "bias", None)
            self.router_inputs.append((x.detach().float(), router.weight.detach().float(),
                                       None if bias is None else bias.detach().float()))
        return hook

    def greedy(self, prompt, steps):
        torch = self.torch
        seq, rows, tokens, prefill = list(prompt), [], [], None
        with torch.no_grad():
            for _ in range(steps):
                ids = torch.tensor([seq], device="cuda")
                logits = self.model(input_ids=ids, use_cache=False).logits[0].float()
                if prefill is None:
                    prefill = logits
                rows.append(logits[-1])
                tokens.append(int(logits[-1].argmax()))
                seq.append(tokens[-1])
        return tokens, prefill.cpu().numpy(), torch.stack(rows).cpu().numpy()

    def router_margin(self, k):
        """Smallest gap between the k-th and (k+1)-th router logit over every routed token,
        relative to the largest router logit (inf without MoE layers)."""
        worst = float("inf")
        for h, w, b in self.router_inputs:
            logits = h.reshape(-1, h.shape[-1]) @ w.T
            logits = logits if b is None else logits + b
            top = logits.topk(k + 1, dim=-1).values
            gap = (top[:, k - 1] - top[:, k]).min() / logits.abs().max()
            worst = min(worst, float(gap))
        return worst


def top2_margin(steps):
    import numpy as np
    s = np.sort(steps, axis=-1)
    return float((s[:, -1] - s[:, -2]).min() / np.abs(steps).max())


def randomize(model, torch):
    """Routers wider than init, so bf16 rounding does not pick experts; GPT-OSS's biases and
    sinks (zero or tiny at init) random, with expert gate/up biases wide enough that some SwiGLU
    inputs pass the clamp."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight",
                           "mlp.router.weight")):
                p.mul_(8.0)
            elif n.endswith("sinks"):
                p.normal_(0.0, 1.0)
            elif n.endswith("gate_up_proj_bias"):
                p.normal_(0.0, 3.0)
            elif n.endswith("bias") and model.config.model_type == "gpt_oss":
                p.normal_(0.0, 0.1)


def save_seed(name, make_cfg, transformers, torch, folder, seed):
    """The model for `seed` saved into `folder` (bf16, save_pretrained). Returns its config."""
    torch.manual_seed(seed)
    cfg = make_cfg(transformers)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    randomize(model, torch)
    shutil.rmtree(folder, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    # Every attribute, as Hub configs carry them (save_pretrained's diff leaves out keys equal to
    # the base defaults). Written as transformers spells them: transformers 5 stores Qwen3-MoE's
    # num_experts as num_local_experts (attribute_map), which the engine and hoist must read.
    model.config.to_json_file(os.path.join(folder, "config.json"), use_diff=False)
    if cfg.model_type != "gpt_oss":  # GPT-OSS stores its experts fused: [E, H, 2I], [E, I, H]
        n = split_fused_experts(folder)
        if n:
            log(f"{name}: save_pretrained wrote fused experts; rewrote {n} tensors per expert")
    if seed == SEEDS[0]:
        moe_layout(name, model, folder)
    return cfg


def make_checkpoint(name, make_cfg, transformers, torch, folder, steps):
    """Saves the first seed whose float32 reference has clear greedy (and routing) margins and
    whose bf16 reference decodes the same tokens (so no bf16 tie decides a token), else the best
    seed (token agreement first, then the margins), with a warning. Returns
    (seed, (greedy margin, router margin))."""
    best = None
    for seed in SEEDS:
        cfg = save_seed(name, make_cfg, transformers, torch, folder, seed)
        ref = HfReference(transformers, torch, folder, torch.float32)
        tokens, _, rows = ref.greedy(PROMPT, steps)
        margins = (top2_margin(rows), ref.router_margin(cfg.num_experts_per_tok)
                   if experts_of(cfg) else float("inf"))
        del ref
        ref = HfReference(transformers, torch, folder, torch.bfloat16)
        agree = ref.greedy(PROMPT, steps)[0] == tokens
        del ref
        torch.cuda.empty_cache()
        log(f"{name}: seed {seed}: greedy margin {margins[0]:.4f}, router margin "
            f"{margins[1]:.4f}, bf16 tokens {'equal' if agree else 'differ from'} float32's")
        if agree and min(margins) >= MIN_MARGIN:
            return seed, margins
        if best is None or (agree, min(margins)) > (best[2], min(best[1])):
            best = (seed, margins, agree)
    log(f"{name}: WARNING no seed reached margin {MIN_MARGIN} with bf16 tokens equal to float32's; "
        f"using seed {best[0]}")
    save_seed(name, make_cfg, transformers, torch, folder, best[0])
    return best[:2]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_engine(folder, nproc, dtype, par, out, build_pkg, steps, logf):
    env = dict(os.environ, PYTHONPATH=build_pkg + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               NCCL_NVLS_ENABLE="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    args = [RUN, "--model", folder, "--device", "cuda", "--dtype", dtype, "--prompt",
            ",".join(map(str, PROMPT)), "--tokens", str(steps), "--out", out, *par]
    cmd = [sys.executable, *args]
    if nproc > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(nproc),
               sys.executable, *args]
    log("run: " + " ".join(cmd))
    t0 = time.time()
    if os.path.exists(out):
        os.remove(out)
    with open(logf, "w") as fh:
        p = subprocess.run(cmd, env=dict(env, PYTHONFAULTHANDLER="1"), stdout=fh,
                           stderr=subprocess.STDOUT, timeout=600)
    with open(logf) as fh:
        text = fh.read()
    for line in text.splitlines():
        if any(k in line for k in ("hoist:", "tokens:", "layers ")) or "error" in line.lower():
            print("    " + line, flush=True)
    last = "\n".join(text.splitlines()[-25:])
    if p.returncode != 0 and not (os.path.exists(out) and f"wrote {out}" in text):
        raise RuntimeError(f"engine exited {p.returncode} after {time.time() - t0:.1f}s; last "
                           "lines:\n" + last)
    import numpy as np
    got = dict(np.load(out))
    if p.returncode != 0:  # compared all the same, and the case fails on the exit status
        log(f"WARNING: the engine wrote its results, then exited {p.returncode}; last lines:\n"
            + last)
    got["exit_code"] = p.returncode
    return got


def compare(got, want, dtype):
    import numpy as np
    tokens, prefill, steps = want
    res = {"tokens_engine": got["tokens"].tolist(), "tokens_hf": tokens,
           "tokens_equal": got["tokens"].tolist() == tokens}
    for key, ref in (("prefill", prefill), ("steps", steps)):
        if got[key].shape != ref.shape:
            res[f"{key}_err"] = float("inf")
            continue
        res[f"{key}_abs"] = float(np.abs(got[key] - ref).max())
        res[f"{key}_err"] = res[f"{key}_abs"] / float(np.abs(ref).max())
    err = max(res["prefill_err"], res["steps_err"])
    res["max_abs"] = max(res.get("prefill_abs", float("inf")), res.get("steps_abs", float("inf")))
    res["rel_err"] = err
    res["tolerance"] = TOL[dtype]
    res["pass"] = bool(res["tokens_equal"] and err <= TOL[dtype])
    if not res["tokens_equal"]:
        first = next(i for i, (a, b) in enumerate(zip(res["tokens_engine"], tokens)) if a != b)
        s = np.sort(steps[first])
        res["why"] = (f"tokens differ from step {first}; the reference's top-2 gap there is "
                      f"{float((s[-1] - s[-2]) / np.abs(steps).max()):.4f} of the logit scale")
    elif err > TOL[dtype]:
        res["why"] = f"logits differ by {err:.3g} of their scale (> {TOL[dtype]})"
    return res


def rope_check(engine, hf_model):
    """The engine's rotary frequencies and factor against transformers' rotary_emb (a line)."""
    mine = engine.model.layers[0].self_attn.rotary
    theirs = getattr(hf_model.model, "rotary_emb", None)
    if theirs is None:
        return "transformers' model has no model.rotary_emb: not compared"
    inv = theirs.inv_freq.float().cpu()
    ours = mine.inv_freq.float().cpu()
    if inv.shape != ours.shape:
        return f"inv_freq shapes differ: engine {list(ours.shape)}, transformers {list(inv.shape)}"
    rel = float(((ours - inv).abs() / inv.abs()).max())
    return (f"inv_freq max rel. diff {rel:.2e}; attention factor engine {mine.scale:.6f}, "
            f"transformers {float(getattr(theirs, 'attention_scaling', 1.0)):.6f}")


def capture(modules, out, width):
    """Forward hooks appending each module's output (first element of a tuple) as [T, width]."""
    def hook(_, __, o):
        o = o[0] if isinstance(o, tuple) else o
        out.append(o.detach().float().reshape(-1, width))
    return [m.register_forward_hook(hook) for m in modules]


def sublayers(layer):
    """(attention, mlp or MoE block) of a decoder layer, transformers' or the engine's."""
    mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
    return layer.self_attn, mlp


def layer_diffs(folder):
    """Child-process mode (--layers): the engine at tp 1, float32, loaded by hoist on cuda:0,
    and transformers' float32 model on the prompt; prints the rope check and, per decoder layer,
    the max |diff| of the attention output, the MLP/MoE output and the layer output."""
    import torch
    import transformers
    sys.path.insert(0, ENGINE_DIR)
    import hoist.torch
    import models
    from layers import Parallel
    with open(os.path.join(folder, "config.json")) as fh:
        cfg, model_class = models.family(json.load(fh))
    engine = model_class(cfg, Parallel(0, 1, 1), torch.float32, torch.device("cuda:0"))
    hoist.torch.load_into(engine, model=folder, tp=1, rank=0, comm=None, device="cuda",
                          layout=model_class.LAYOUT)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = HfReference(transformers, torch, folder, torch.float32)
    print(f"rope: {rope_check(engine, ref.model)}", flush=True)
    got, want = {k: [] for k in ("attn", "mlp", "out")}, {k: [] for k in ("attn", "mlp", "out")}
    for side, layers in ((got, engine.model.layers), (want, ref.model.model.layers)):
        capture(layers, side["out"], cfg.hidden)
        capture([sublayers(x)[0] for x in layers], side["attn"], cfg.hidden)
        capture([sublayers(x)[1] for x in layers], side["mlp"], cfg.hidden)
    ids = torch.tensor(PROMPT, device="cuda")
    with torch.no_grad():
        engine.forward(ids, 0, engine.new_cache())
        ref.model(input_ids=ids[None], use_cache=False)
    for i in range(cfg.layers):
        parts = []
        for key in ("attn", "mlp", "out"):
            a, b = got[key][i], want[key][i]
            diff = float((a - b).abs().max()) if a.shape == b.shape else float("inf")
            parts.append(f"{key} {diff:.2e} (of {float(b.abs().max()):.2e})")
        print(f"layer {i}: max |diff| " + ", ".join(parts), flush=True)
    return 0


def run_layer_diffs(name, folder, build_pkg):
    """Runs layer_diffs in a child process and prints its lines (diagnostics only)."""
    env = dict(os.environ, PYTHONPATH=build_pkg + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.abspath(__file__), "--layers", folder]
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300)
        lines = [x for x in p.stdout.splitlines() if x.startswith(("rope:", "layer "))]
        if p.returncode != 0:
            lines += p.stdout.splitlines()[-15:]
    except subprocess.TimeoutExpired:
        lines = ["timed out"]
    for line in lines:
        log(f"{name}: tp 1 float32 diagnostics: {line}")


def prepare(name, make_cfg, transformers, torch, folder, steps):
    """The checkpoint and transformers' greedy references in bf16 and float32:
    (seed, margins, {dtype: (tokens, prefill, steps)})."""
    log(f"{name}: writing the checkpoint with save_pretrained (bf16) into {folder}")
    seed, margins = make_checkpoint(name, make_cfg, transformers, torch, folder, steps)
    log(f"{name}: files: {sorted(os.listdir(folder))}")
    refs = {}
    for dtype in ("bfloat16", "float32"):
        log(f"{name}: transformers reference in {dtype} (from_pretrained, eager)")
        ref = HfReference(transformers, torch, folder, getattr(torch, dtype))
        refs[dtype] = ref.greedy(PROMPT, steps)
        log(f"{name}: reference tokens ({dtype}): {refs[dtype][0]}")
        del ref
        torch.cuda.empty_cache()
    return seed, margins, refs


def run_cases(name, folder, gpus, seed, margins, refs, a):
    """The engine at tp 1 (tp 2 and, for a MoE, ep 2 on two GPUs) in bf16 and float32 against
    the references. Returns the result rows."""
    cases = [("tp 1", 1, ["--tp", "1"])]
    if gpus >= 2:
        cases.append(("tp 2", 2, ["--tp", "2"]))
        if name != "qwen3":
            cases.append(("ep 2", 2, ["--ep", "2", "--tp", "1"]))
    else:
        log(f"{name}: one GPU visible: tp 2 / ep 2 skipped")
    rows = []
    for label, nproc, par in cases:
        for dtype in ("bfloat16", "float32"):
            tag = f"{name}-{label.replace(' ', '')}-{dtype}"
            row = {"model": name, "case": label, "dtype": dtype, "seed": seed,
                   "greedy_margin": margins[0], "router_margin": margins[1]}
            try:
                got = run_engine(folder, nproc, dtype, par, os.path.join(a.work, tag + ".npz"),
                                 a.build_pkg, a.steps, os.path.join(a.work, tag + ".log"))
                row.update(compare(got, refs[dtype], dtype))
                if got["exit_code"] != 0:
                    row["pass"] = False
                    row["why"] = (row.get("why", "") + f" engine exit status "
                                  f"{got['exit_code']} after writing its results").strip()
            except Exception as e:  # noqa: BLE001
                row.update({"pass": False, "why": str(e)})
            log(f"{tag}: {'PASS' if row['pass'] else 'FAIL'}: tokens equal "
                f"{row.get('tokens_equal')}, max |diff| {row.get('max_abs', float('nan')):.3e}, "
                f"relative {row.get('rel_err', float('nan')):.2e} (tolerance {TOL[dtype]})"
                + (f" ({row['why']})" if "why" in row else ""))
            rows.append(row)
    return rows


def write_report(results, out, torch, transformers, gpus, steps):
    lines = ["| model | case | dtype | tokens identical | max abs. logit diff | max rel. logit "
             "error | tolerance | result |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        verdict = "PASS" if r["pass"] else "FAIL: " + r.get("why", "")
        lines.append(f"| {r['model']} | {r['case']} | {r.get('dtype', '')} | "
                     f"{r.get('tokens_equal', '')} | {r.get('max_abs', float('nan')):.3e} | "
                     f"{r.get('rel_err', float('nan')):.2e} | {r.get('tolerance', '')} | "
                     f"{verdict} |")
    table = "\n".join(lines)
    print(table, flush=True)
    with open(os.path.join(out, "engine_check.md"), "w") as fh:
        fh.write(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpus} "
                 f"GPU(s) {torch.cuda.get_device_name(0)}; prompt {PROMPT}, {steps} greedy "
                 "steps\n\n" + table + "\n")
    with open(os.path.join(out, "engine_check.jsonl"), "w") as fh:
        for r in results:
            fh.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/hoist-engine-check"))
    ap.add_argument("--work", default="/tmp/hoist-engine-check-work")
    ap.add_argument("--build-pkg", default=os.path.join(ROOT, "build", "python", "pkg"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated subset of: "
                    + ", ".join(MODELS) + " (default: all)")
    ap.add_argument("--layers", default="", help=argparse.SUPPRESS)  # child: layer_diffs
    a = ap.parse_args()
    if a.layers:
        return layer_diffs(a.layers)
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import torch
        import transformers
    except ImportError as e:
        log(f"cannot run: {e} (needs torch, transformers, safetensors, numpy)")
        return 2
    if not torch.cuda.is_available():
        log("cannot run: torch sees no CUDA device")
        return 2
    unknown = [n for n in a.only.split(",") if n and n not in MODELS]
    if unknown:
        log(f"--only: unknown {unknown}; the models are {', '.join(MODELS)}")
        return 2
    gpus = torch.cuda.device_count()
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpus} GPU(s): "
        f"{torch.cuda.get_device_name(0)}; hoist package from {a.build_pkg}")
    torch.backends.cuda.matmul.allow_tf32 = False

    results = []
    for name, make_cfg in MODELS.items():
        if a.only and name not in a.only.split(","):
            continue
        folder = os.path.join(a.work, name)
        try:
            seed, margins, refs = prepare(name, make_cfg, transformers, torch, folder, a.steps)
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            log(f"{name}: FAILED to prepare: {e}")
            traceback.print_exc()
            results.append({"model": name, "case": "prepare", "pass": False, "why": str(e)})
            continue
        run_layer_diffs(name, folder, a.build_pkg)
        results += run_cases(name, folder, gpus, seed, margins, refs, a)
    write_report(results, a.out, torch, transformers, gpus, a.steps)
    ok = bool(results) and all(r["pass"] for r in results)
    log("all cases PASS" if ok else "some case FAILED (see the table)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
