#!/usr/bin/env python3
"""Writes config.json and tensors.json of the tiny DeepSeek-V4 fixtures (deepseek_v4: MXFP4
experts; deepseek_v4_fp8: FP8-block experts) from vLLM's model files, not from transformers and
not from hoist's planner: every name, shape and dtype below is read off
vllm/model_executor/models/deepseek_v4.py (DeepseekV4Model.load_weights, the WeightsMapper of
_make_deepseek_v4_weights_mapper, DeepseekV4DecoderLayer / DeepseekV4Attention / DeepseekV4MoE),
vllm/model_executor/layers/deepseek_v4_attention.py (DeepseekV4Indexer) and
vllm/model_executor/layers/deepseek_compressor.py (DeepseekCompressor), inverted to the
checkpoint's own names.

    python3 make_fixture.py   # run in tests/data/derived/deepseek_v4
"""
import json
import os

BASE = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 1000,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_groups": 4,
    "o_lora_rank": 128,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 512,
    "num_hash_layers": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sqrtsoftplus",
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    "swiglu_limit": 10.0,
    "hidden_act": "silu",
    "hc_mult": 2,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06,
    "compress_ratios": [4, 128, 0, 4],
    "compress_rope_theta": 160000.0,
    "index_n_heads": 4,
    "index_head_dim": 64,
    "index_topk": 16,
    "sliding_window": 16,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                     "beta_fast": 32, "beta_slow": 1},
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
}


def tensors(c, fp4):
    H, V, nh, hd = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["head_dim"]
    ql, og, ol = c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    E, I, ns, hc = c["n_routed_experts"], c["moe_intermediate_size"], c["n_shared_experts"], c["hc_mult"]
    ih, idd = c["index_n_heads"], c["index_head_dim"]
    b = c["quantization_config"]["weight_block_size"][0]
    sdt = "F8_E8M0" if fp4 else "F32"  # FP4 checkpoints store the FP8 linear scales as ue8m0
    out = {}

    def fp8(name, n, k):
        out[name + ".weight"] = ["F8_E4M3", [n, k]]
        out[name + ".scale"] = [sdt, [-(-n // b), -(-k // b)]]

    out["embed.weight"] = ["BF16", [V, H]]
    out["head.weight"] = ["BF16", [V, H]]
    out["norm.weight"] = ["BF16", [H]]
    out["hc_head_fn"] = ["F32", [hc, hc * H]]
    out["hc_head_base"] = ["F32", [hc]]
    out["hc_head_scale"] = ["F32", [1]]
    mix = (2 + hc) * hc
    for L, ratio in enumerate(c["compress_ratios"]):
        p = f"layers.{L}."
        out[p + "attn_norm.weight"] = ["BF16", [H]]
        out[p + "ffn_norm.weight"] = ["BF16", [H]]
        for w in ("attn", "ffn"):
            out[p + f"hc_{w}_fn"] = ["F32", [mix, hc * H]]
            out[p + f"hc_{w}_base"] = ["F32", [mix]]
            out[p + f"hc_{w}_scale"] = ["F32", [3]]
        out[p + "attn.attn_sink"] = ["F32", [nh]]
        fp8(p + "attn.wq_a", ql, H)
        fp8(p + "attn.wkv", hd, H)
        out[p + "attn.q_norm.weight"] = ["BF16", [ql]]
        out[p + "attn.kv_norm.weight"] = ["BF16", [hd]]
        fp8(p + "attn.wq_b", nh * hd, ql)
        fp8(p + "attn.wo_a", og * ol, nh * hd // og)
        fp8(p + "attn.wo_b", H, og * ol)
        r = max(1, ratio)
        coff = 2 if r == 4 else 1
        if r > 1:  # DeepseekCompressor: ape, fused_wkv_wgate (unquantized), norm
            out[p + "attn.compressor.ape"] = ["F32", [r, coff * hd]]
            out[p + "attn.compressor.wkv.weight"] = ["BF16", [coff * hd, H]]
            out[p + "attn.compressor.wgate.weight"] = ["BF16", [coff * hd, H]]
            out[p + "attn.compressor.norm.weight"] = ["BF16", [hd]]
        if r == 4:  # DeepseekV4Indexer
            fp8(p + "attn.indexer.wq_b", ih * idd, ql)
            out[p + "attn.indexer.weights_proj.weight"] = ["BF16", [ih, H]]
            out[p + "attn.indexer.compressor.ape"] = ["F32", [r, coff * idd]]
            out[p + "attn.indexer.compressor.wkv.weight"] = ["BF16", [coff * idd, H]]
            out[p + "attn.indexer.compressor.wgate.weight"] = ["BF16", [coff * idd, H]]
            out[p + "attn.indexer.compressor.norm.weight"] = ["BF16", [idd]]
        out[p + "ffn.gate.weight"] = ["BF16", [E, H]]
        if L < c["num_hash_layers"]:
            out[p + "ffn.gate.tid2eid"] = ["I64", [V, c["num_experts_per_tok"]]]
        else:
            out[p + "ffn.gate.bias"] = ["F32", [E]]
        fp8(p + "ffn.shared_experts.w1", I * ns, H)
        fp8(p + "ffn.shared_experts.w3", I * ns, H)
        fp8(p + "ffn.shared_experts.w2", H, I * ns)
        for e in range(E):
            for w, (n, k) in (("w1", (I, H)), ("w3", (I, H)), ("w2", (H, I))):
                q = p + f"ffn.experts.{e}.{w}"
                if fp4:  # MXFP4: two E2M1 codes a byte, one ue8m0 scale per 32
                    out[q + ".weight"] = ["I8", [n, k // 2]]
                    out[q + ".scale"] = ["F8_E8M0", [n, k // 32]]
                else:
                    fp8(q, n, k)
    # One MTP module (vLLM skips "mtp."): a few of its tensors.
    out["mtp.0.enorm.weight"] = ["BF16", [H]]
    out["mtp.0.hnorm.weight"] = ["BF16", [H]]
    out["mtp.0.e_proj.weight"] = ["F8_E4M3", [H, H]]
    out["mtp.0.e_proj.scale"] = [sdt, [H // b, H // b]]
    return dict(sorted(out.items()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for folder, fp4 in (("deepseek_v4", True), ("deepseek_v4_fp8", False)):
        c = dict(BASE)
        c["expert_dtype"] = "fp4" if fp4 else "fp8"
        d = os.path.join(here, "..", folder)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f, indent=2)
            f.write("\n")
        with open(os.path.join(d, "tensors.json"), "w") as f:
            items = tensors(c, fp4).items()
            f.write("{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in items) + "\n}\n")


if __name__ == "__main__":
    main()
