#!/usr/bin/env python3
"""Derives the GPTQ, AWQ, compressed-tensors WNA16 and NVFP4 fixtures of tests/data/quant.

Each fixture is a tests/data/hf checkpoint (config.json and the tensor list transformers
writes) with every quantized linear layer X of its decoder (attention q/k/v/o and the MLA
projections, dense MLP gate/up/down, routed experts' gate/up/down, shared experts) replaced by
the tensors its format stores, with the weight [N, K] (N output, K input):

  gptq       X.qweight I32 [K/p, N], X.qzeros I32 [G, N/p], X.scales F16 [G, N],
             X.g_idx I32 [K]                              (p = 32 / bits, G = K / group_size)
  awq        X.qweight I32 [K, N/p], X.qzeros I32 [G, N/p], X.scales F16 [G, N]
  wna16      X.weight_packed I32 [N, K/p], X.weight_scale BF16 [N, G],
             X.weight_zero_point I32 [N/p, G] (asymmetric only), X.weight_g_idx I32 [K]
             (actorder "group" only), X.weight_shape I64 [2]
  nvfp4_mo   X.weight U8 [N, K/2], X.weight_scale F8_E4M3 [N, K/16], X.weight_scale_2 F32 [],
             X.input_scale F32 []                         (ModelOpt)
  nvfp4_ct   X.weight_packed U8 [N, K/2], X.weight_scale F8_E4M3 [N, K/16],
             X.weight_global_scale F32 [1], X.input_global_scale F32 [1]   (compressed-tensors)

Embeddings, lm_head, norms, routers (mlp.gate, block_sparse_moe.gate), shared_expert_gate and
biases keep their BF16 tensors. Python 3 standard library only; run from anywhere:

  python3 tests/data/quant/derive_int4_nvfp4.py     # rewrites the fixtures listed in FIXTURES
"""

import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
HF = os.path.join(HERE, "..", "hf")

QUANTIZED = re.compile(
    r"^model\.layers\.\d+\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj|"
    r"w1|w2|w3|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight$")


def gptq_config(bits, group, desc_act):
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": desc_act,
            "sym": True, "damp_percent": 0.01, "true_sequential": True,
            "checkpoint_format": "gptq"}


def awq_config(group):
    return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
            "version": "gemm", "modules_to_not_convert": None}


def ct_config(fmt, weights, ignore):
    return {"quant_method": "compressed-tensors", "format": fmt,
            "quantization_status": "compressed", "ignore": ignore,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": None, "format": fmt}}}


def wna16_config(group, symmetric, actorder, ignore):
    weights = {"num_bits": 4, "type": "int", "symmetric": symmetric, "dynamic": False,
               "group_size": group, "strategy": "group" if group else "channel",
               "actorder": actorder, "observer": "minmax"}
    return ct_config("pack-quantized", weights, ignore)


def nvfp4_ct_config(ignore):
    weights = {"num_bits": 4, "type": "float", "symmetric": True, "dynamic": False,
               "group_size": 16, "strategy": "tensor_group", "actorder": None}
    cfg = ct_config("nvfp4-pack-quantized", weights, ignore)
    cfg["config_groups"]["group_0"]["input_activations"] = {
        "num_bits": 4, "type": "float", "symmetric": True, "dynamic": "local",
        "group_size": 16, "strategy": "tensor_group"}
    return cfg


def nvfp4_modelopt_config(exclude):
    return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
            "kv_cache_quant_algo": None, "exclude_modules": exclude}


def exact(a, b, what):
    if a % b:
        raise SystemExit("%s: %d is not a multiple of %d" % (what, a, b))
    return a // b


def tensors_of(name, n, k, q):
    """The tensors format q stores for the linear layer whose weight is `name` [n, k]."""
    x = name[: -len(".weight")]
    kind = q["kind"]
    g = q.get("group") or k  # None / -1: one group over K
    if g == -1:
        g = k
    groups = exact(k, g, x + " K")
    if kind in ("gptq", "awq", "wna16"):
        p = 32 // q["bits"]
    if kind == "gptq":
        return {x + ".qweight": ["I32", [exact(k, p, x), n]],
                x + ".qzeros": ["I32", [groups, exact(n, p, x)]],
                x + ".scales": ["F16", [groups, n]],
                x + ".g_idx": ["I32", [k]]}
    if kind == "awq":
        return {x + ".qweight": ["I32", [k, exact(n, p, x)]],
                x + ".qzeros": ["I32", [groups, exact(n, p, x)]],
                x + ".scales": ["F16", [groups, n]]}
    if kind == "wna16":
        out = {x + ".weight_packed": ["I32", [n, exact(k, p, x)]],
               x + ".weight_scale": ["BF16", [n, groups]],
               x + ".weight_shape": ["I64", [2]]}
        if not q["symmetric"]:
            out[x + ".weight_zero_point"] = ["I32", [exact(n, p, x), groups]]
        if q.get("actorder") == "group":
            out[x + ".weight_g_idx"] = ["I32", [k]]
        return out
    packed = ".weight" if kind == "nvfp4_mo" else ".weight_packed"
    out = {x + packed: ["U8", [n, exact(k, 2, x)]],
           x + ".weight_scale": ["F8_E4M3", [n, exact(k, 16, x)]]}
    if kind == "nvfp4_mo":
        out[x + ".weight_scale_2"] = ["F32", []]
        out[x + ".input_scale"] = ["F32", []]
    else:
        out[x + ".weight_global_scale"] = ["F32", [1]]
        out[x + ".input_global_scale"] = ["F32", [1]]
    return out


MOE_GATE_CT = ["lm_head", "re:.*mlp.gate$"]

# name -> (tests/data/hf source, quantization_config, format parameters for tensors_of)
FIXTURES = {
    "mistral_gptq": ("mistral", gptq_config(4, 32, False),
                     {"kind": "gptq", "bits": 4, "group": 32}),
    "qwen3_moe_gptq_actorder": ("qwen3_moe", gptq_config(4, 32, True),
                                {"kind": "gptq", "bits": 4, "group": 32}),
    "mixtral_awq": ("mixtral", awq_config(32), {"kind": "awq", "bits": 4, "group": 32}),
    "qwen3_moe_wna16": ("qwen3_moe", wna16_config(32, True, None, MOE_GATE_CT),
                        {"kind": "wna16", "bits": 4, "group": 32, "symmetric": True}),
    "deepseek_v2_wna16_asym": (
        "deepseek_v2", wna16_config(32, False, "group", MOE_GATE_CT),
        {"kind": "wna16", "bits": 4, "group": 32, "symmetric": False, "actorder": "group"}),
    "mistral_wna16_channel": ("mistral", wna16_config(None, False, None, ["lm_head"]),
                              {"kind": "wna16", "bits": 4, "group": None, "symmetric": False}),
    "mixtral_nvfp4": ("mixtral", nvfp4_modelopt_config(["lm_head", "*block_sparse_moe.gate*"]),
                      {"kind": "nvfp4_mo"}),
    "qwen3_moe_nvfp4_ct": ("qwen3_moe", nvfp4_ct_config(MOE_GATE_CT), {"kind": "nvfp4_ct"}),
}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def write_tensors(path, tensors):
    lines = ['  "%s": ["%s", %s]' % (name, t[0], json.dumps(t[1]))
             for name, t in sorted(tensors.items())]
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


def derive(name, source, qcfg, q):
    with open(os.path.join(HF, source, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(HF, source, "tensors.json")) as f:
        tensors = json.load(f)
    config["quantization_config"] = qcfg
    out = {}
    for tname, (dtype, shape) in tensors.items():
        if QUANTIZED.match(tname):
            if dtype != "BF16" or len(shape) != 2:
                raise SystemExit("%s: %s is not a BF16 matrix" % (source, tname))
            out.update(tensors_of(tname, shape[0], shape[1], q))
        else:
            out[tname] = [dtype, shape]
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), config)
    write_tensors(os.path.join(folder, "tensors.json"), out)


def main():
    for name, (source, qcfg, q) in FIXTURES.items():
        derive(name, source, qcfg, q)


if __name__ == "__main__":
    main()
