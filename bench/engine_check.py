"""GPU check of the example engine (examples/tp_engine/run.py) against transformers itself.

On the GPU box (torch + transformers 5.x + safetensors, no network; hoist built, its Python
package importable): writes a small random Qwen3 (tied, 2 kv heads) and a small Qwen3-MoE
(untied, 8 experts, top-2, a dense layer) checkpoint with transformers' own save_pretrained
(bf16, seeded), plus a Qwen3-MoE with decoder_sparse_step 2 (experts on layers 1 and 3), takes
transformers' from_pretrained model as the reference (greedy decoding by full recompute, eager
attention), then runs the engine at tp 1, and at tp 2 (and ep 2 for the
MoE) with NCCL under mpirun when 2 GPUs are visible, in bfloat16 and float32 arithmetic over the
same bf16 weights. Pass: greedy tokens identical and logits within tolerance of the reference's
(max |diff| / max |logit|: 5e-2 in bf16, 2e-3 in float32). Prints a table; writes
engine_check.md and engine_check.jsonl under --out.

    python3 bench/engine_check.py --out $OUT [--work DIR] [--steps 8]

Before any engine run, each checkpoint's MoE layout is checked three ways and printed: the layers
where transformers built a sparse block, the layers whose tensors in the saved files are a
router + experts, and the layers the engine's config rule (examples/tp_engine/qwen3_tp.py,
the same rule as vLLM's and hoist's planner) makes sparse from the saved config.json, with the
config keys that decide it (num_experts / num_local_experts, decoder_sparse_step,
mlp_only_layers). A disagreement fails that model's preparation naming the layers.

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
MOE_KEYS = ("num_experts", "num_local_experts", "decoder_sparse_step", "mlp_only_layers",
            "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob")
PROMPT = [3, 17, 92, 250, 511, 7, 800, 42]
TOL = {"bfloat16": 5e-2, "float32": 2e-3}
SEEDS = range(10)
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
    from qwen3_tp import Config  # the engine's own parsing of config.json
    with open(os.path.join(folder, "config.json")) as fh:
        saved = json.load(fh)
    keys = {k: saved[k] for k in MOE_KEYS if k in saved}
    log(f"{name}: config.json: model_type {saved.get('model_type')}, "
        f"num_hidden_layers {saved.get('num_hidden_layers')}, {keys}")
    layers = model.model.layers
    hf = "".join("E" if hasattr(layer.mlp, "experts") else "d" for layer in layers)
    names = saved_tensor_names(folder)
    files = ""
    for i in range(len(layers)):
        moe = any(n.startswith(f"model.layers.{i}.mlp.experts.") for n in names)
        dense = f"model.layers.{i}.mlp.gate_proj.weight" in names
        files += "E" if moe and not dense else "d" if dense and not moe else "?"
    try:
        cfg = Config(saved)
        engine = "".join("E" if cfg.sparse(i) else "d" for i in range(cfg.layers))
    except ValueError as e:
        engine = f"(config.json rejected: {e})"
    log(f"{name}: MoE layers (E moe, d dense): transformers {hf}, saved tensors {files}, "
        f"engine rule on config.json {engine}; the mlp tensors of layer 0: "
        f"{sorted(n for n in names if n.startswith('model.layers.0.mlp.'))[:6]}")
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
        for name, mod in self.model.named_modules():
            if name.endswith("mlp.gate") and hasattr(mod, "weight"):
                mod.register_forward_pre_hook(self._capture(mod))

    def _capture(self, mod):
        def hook(_, args):
            self.router_inputs.append((args[0].detach().float(), mod.weight.detach().float()))
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
        for h, w in self.router_inputs:
            logits = h.reshape(-1, h.shape[-1]) @ w.T
            top = logits.topk(k + 1, dim=-1).values
            gap = (top[:, k - 1] - top[:, k]).min() / logits.abs().max()
            worst = min(worst, float(gap))
        return worst


def top2_margin(steps):
    import numpy as np
    s = np.sort(steps, axis=-1)
    return float((s[:, -1] - s[:, -2]).min() / np.abs(steps).max())


def save_seed(name, make_cfg, transformers, torch, folder, seed):
    """The model for `seed` saved into `folder` (bf16, save_pretrained). Returns its config."""
    torch.manual_seed(seed)
    cfg = make_cfg(transformers)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # routers wider than init, so bf16 rounding does not pick experts
        for n, p in model.named_parameters():
            if n.endswith("mlp.gate.weight"):
                p.mul_(8.0)
    shutil.rmtree(folder, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    # Every attribute, as Hub configs carry them (save_pretrained's diff leaves out keys equal to
    # the base defaults). Written as transformers spells them: transformers 5 stores Qwen3-MoE's
    # num_experts as num_local_experts (attribute_map), which the engine and hoist must read.
    model.config.to_json_file(os.path.join(folder, "config.json"), use_diff=False)
    n = split_fused_experts(folder)
    if n:
        log(f"{name}: save_pretrained wrote fused experts; rewrote {n} tensors per expert")
    if seed == SEEDS[0]:
        moe_layout(name, model, folder)
    return cfg


def make_checkpoint(name, make_cfg, transformers, torch, folder, steps):
    """Saves the first seed whose float32 reference has clear greedy (and routing) margins
    (else the best seed, with a warning). Returns (seed, (greedy margin, router margin))."""
    best = None
    for seed in SEEDS:
        cfg = save_seed(name, make_cfg, transformers, torch, folder, seed)
        ref = HfReference(transformers, torch, folder, torch.float32)
        _, _, rows = ref.greedy(PROMPT, steps)
        margins = (top2_margin(rows), ref.router_margin(cfg.num_experts_per_tok)
                   if getattr(cfg, "num_experts", 0) else float("inf"))
        del ref
        torch.cuda.empty_cache()
        log(f"{name}: seed {seed}: greedy margin {margins[0]:.4f}, router margin "
            f"{margins[1]:.4f}")
        if min(margins) >= MIN_MARGIN:
            return seed, margins
        if best is None or min(margins) > min(best[1]):
            best = (seed, margins)
    log(f"{name}: WARNING no seed reached margin {MIN_MARGIN}; using seed {best[0]}")
    save_seed(name, make_cfg, transformers, torch, folder, best[0])
    return best


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
    with open(logf, "w") as fh:
        p = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=600)
    with open(logf) as fh:
        text = fh.read()
    for line in text.splitlines():
        if any(k in line for k in ("hoist:", "tokens:", "layers ")) or "error" in line.lower():
            print("    " + line, flush=True)
    if p.returncode != 0:
        raise RuntimeError(f"engine exited {p.returncode} after {time.time() - t0:.1f}s; last "
                           "lines:\n" + "\n".join(text.splitlines()[-25:]))
    import numpy as np
    return dict(np.load(out))


def compare(got, want, dtype):
    import numpy as np
    tokens, prefill, steps = want
    res = {"tokens_engine": got["tokens"].tolist(), "tokens_hf": tokens,
           "tokens_equal": got["tokens"].tolist() == tokens}
    for key, ref in (("prefill", prefill), ("steps", steps)):
        if got[key].shape != ref.shape:
            res[f"{key}_err"] = float("inf")
            continue
        res[f"{key}_err"] = float(np.abs(got[key] - ref).max() / np.abs(ref).max())
    err = max(res["prefill_err"], res["steps_err"])
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/hoist-engine-check"))
    ap.add_argument("--work", default="/tmp/hoist-engine-check-work")
    ap.add_argument("--build-pkg", default=os.path.join(ROOT, "build", "python", "pkg"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated subset of: qwen3, qwen3-moe, "
                    "qwen3-moe-step2 (default: all)")
    a = ap.parse_args()
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
    gpus = torch.cuda.device_count()
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpus} GPU(s): "
        f"{torch.cuda.get_device_name(0)}; hoist package from {a.build_pkg}")
    torch.backends.cuda.matmul.allow_tf32 = False

    results = []
    for name, make_cfg in (("qwen3", dense_config), ("qwen3-moe", moe_config),
                           ("qwen3-moe-step2", moe_step2_config)):
        if a.only and name not in a.only.split(","):
            continue
        folder = os.path.join(a.work, name)
        try:
            log(f"{name}: writing the checkpoint with save_pretrained (bf16) into {folder}")
            seed, margins = make_checkpoint(name, make_cfg, transformers, torch, folder, a.steps)
            log(f"{name}: files: {sorted(os.listdir(folder))}")
            refs = {}
            for dtype in ("bfloat16", "float32"):
                log(f"{name}: transformers reference in {dtype} (from_pretrained, eager)")
                ref = HfReference(transformers, torch, folder, getattr(torch, dtype))
                refs[dtype] = ref.greedy(PROMPT, a.steps)
                log(f"{name}: reference tokens ({dtype}): {refs[dtype][0]}")
                del ref
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            log(f"{name}: FAILED to prepare: {e}")
            traceback.print_exc()
            results.append({"model": name, "case": "prepare", "pass": False, "why": str(e)})
            continue
        cases = [("tp 1", 1, ["--tp", "1"])]
        if gpus >= 2:
            cases.append(("tp 2", 2, ["--tp", "2"]))
            if name.startswith("qwen3-moe"):
                cases.append(("ep 2", 2, ["--ep", "2", "--tp", "1"]))
        else:
            log(f"{name}: one GPU visible: tp 2 / ep 2 skipped")
        for label, nproc, par in cases:
            for dtype in ("bfloat16", "float32"):
                tag = f"{name}-{label.replace(' ', '')}-{dtype}"
                row = {"model": name, "case": label, "dtype": dtype, "seed": seed,
                       "greedy_margin": margins[0], "router_margin": margins[1]}
                try:
                    got = run_engine(folder, nproc, dtype, par, os.path.join(a.work, tag + ".npz"),
                                     a.build_pkg, a.steps, os.path.join(a.work, tag + ".log"))
                    row.update(compare(got, refs[dtype], dtype))
                except Exception as e:  # noqa: BLE001
                    row.update({"pass": False, "why": str(e)})
                log(f"{tag}: {'PASS' if row['pass'] else 'FAIL'}"
                    + (f" ({row['why']})" if "why" in row else ""))
                results.append(row)

    lines = ["| model | case | dtype | tokens identical | max rel. logit error | tolerance | "
             "result |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['model']} | {r['case']} | {r.get('dtype', '')} | "
                     f"{r.get('tokens_equal', '')} | {r.get('rel_err', float('nan')):.2e} | "
                     f"{r.get('tolerance', '')} | {'PASS' if r['pass'] else 'FAIL: ' + r.get('why', '')} |")
    table = "\n".join(lines)
    print(table, flush=True)
    with open(os.path.join(a.out, "engine_check.md"), "w") as fh:
        fh.write(f"torch {torch.__version__}, transformers {transformers.__version__}, {gpus} "
                 f"GPU(s) {torch.cuda.get_device_name(0)}; prompt {PROMPT}, {a.steps} greedy "
                 "steps\n\n" + table + "\n")
    with open(os.path.join(a.out, "engine_check.jsonl"), "w") as fh:
        for r in results:
            fh.write(json.dumps(r) + "\n")
    ok = bool(results) and all(r["pass"] for r in results)
    log("all cases PASS" if ok else "some case FAILED (see the table)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
