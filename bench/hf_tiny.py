#!/usr/bin/env python3
"""Tiny random checkpoints written by transformers' own save_pretrained, one per architecture,
so that hoist's family tables and tests use the exact tensor names, shapes and dtypes a real
checkpoint of that architecture has (run where transformers is installed: the GPU box).

    hf_tiny.py OUT_DIR [--only mixtral,gpt_oss,...] [--dtype bfloat16] [--logits]

For each architecture: OUT_DIR/<name>/ (config.json, *.safetensors, the index when sharded),
and OUT_DIR/manifest.json: per name the transformers version, model_type, architectures, and
every tensor's name, dtype and shape (read back from the files), or the error that stopped it.
With --logits, OUT_DIR/<name>/logits.npz holds from_pretrained's logits of a fixed prompt
(the reference an engine check compares with). The sizes are chosen so that tp 1, 2 and 4 and
ep 2 and 4 divide every model (8 heads, 4 kv heads unless the family fixes them, 8 experts).
Failure: an architecture that cannot be built is recorded in the manifest, never fatal.
"""
import argparse
import json
import os
import struct
import sys
import traceback

import torch
import transformers

# Small sizes common to every family; each entry below adds what its config needs.
BASE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=4, head_dim=16, vocab_size=1000, max_position_embeddings=256)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64)

ARCHS = {
    "mixtral": ("mixtral", dict(num_local_experts=8, num_experts_per_tok=2)),
    "qwen2_moe": ("qwen2_moe", dict(MOE, shared_expert_intermediate_size=96,
                                    decoder_sparse_step=1, mlp_only_layers=[])),
    "qwen3_next": ("qwen3_next", dict(MOE, shared_expert_intermediate_size=96,
                                      num_hidden_layers=4, full_attention_interval=4,
                                      linear_num_value_heads=8, linear_num_key_heads=4,
                                      linear_key_head_dim=16, linear_value_head_dim=16,
                                      linear_conv_kernel_dim=4, decoder_sparse_step=1,
                                      mlp_only_layers=[])),
    "glm4_moe": ("glm4_moe", dict(n_routed_experts=8, num_experts_per_tok=2,
                                  moe_intermediate_size=64, n_shared_experts=1,
                                  first_k_dense_replace=1, num_hidden_layers=3, n_group=1,
                                  topk_group=1, use_qk_norm=True)),
    "deepseek_v2": ("deepseek_v2", dict(n_routed_experts=8, num_experts_per_tok=2,
                                        moe_intermediate_size=64, n_shared_experts=1,
                                        first_k_dense_replace=1, num_hidden_layers=3,
                                        q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, n_group=1,
                                        topk_group=1, num_key_value_heads=8)),
    "deepseek_v3": ("deepseek_v3", dict(n_routed_experts=8, num_experts_per_tok=2,
                                        moe_intermediate_size=64, n_shared_experts=1,
                                        first_k_dense_replace=1, num_hidden_layers=3,
                                        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, n_group=1,
                                        topk_group=1, num_key_value_heads=8)),
    "gpt_oss": ("gpt_oss", dict(num_local_experts=8, num_experts_per_tok=2,
                                intermediate_size=64, layer_types=None, sliding_window=64)),
    "llama4_text": ("llama4_text", dict(num_local_experts=8, num_experts_per_tok=1,
                                        intermediate_size=64, intermediate_size_mlp=256,
                                        interleave_moe_layer_step=2, num_hidden_layers=4,
                                        no_rope_layers=None, attention_chunk_size=64)),
    # Llama 4 with no MoE layer (interleave step past the last layer): the fused layout's q/k
    # rotary permutation on a model of dense layers only.
    "llama4_dense": ("llama4_text", dict(num_local_experts=8, num_experts_per_tok=1,
                                         intermediate_size=64, intermediate_size_mlp=256,
                                         interleave_moe_layer_step=8, num_hidden_layers=4,
                                         no_rope_layers=None, attention_chunk_size=64)),
    "gemma3_text": ("gemma3_text", dict(sliding_window=64, query_pre_attn_scalar=16)),
    "phi3": ("phi3", dict(pad_token_id=0)),
    "mistral": ("mistral", dict()),
    "llama": ("llama", dict()),
    "qwen3_moe": ("qwen3_moe", dict(MOE, decoder_sparse_step=1, mlp_only_layers=[])),
    "minimax_m2": ("minimax_m2", dict(num_local_experts=8, num_experts_per_tok=2,
                                      intermediate_size=64)),
    "qwen3_5": ("qwen3_5_text", dict(num_hidden_layers=4, full_attention_interval=4,
                                     linear_num_value_heads=8, linear_num_key_heads=4,
                                     linear_key_head_dim=16, linear_value_head_dim=16,
                                     linear_conv_kernel_dim=4)),
    "qwen3_5_moe": ("qwen3_5_moe_text", dict(MOE, shared_expert_intermediate_size=96,
                                             num_hidden_layers=4, full_attention_interval=4,
                                             linear_num_value_heads=8, linear_num_key_heads=4,
                                             linear_key_head_dim=16, linear_value_head_dim=16,
                                             linear_conv_kernel_dim=4)),
    "glm_moe_dsa": ("glm_moe_dsa", dict(n_routed_experts=8, num_experts_per_tok=2,
                                        moe_intermediate_size=64, n_shared_experts=1,
                                        first_k_dense_replace=1, num_hidden_layers=3,
                                        q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
                                        qk_rope_head_dim=8, v_head_dim=16, n_group=1,
                                        topk_group=1, num_key_value_heads=8)),
    # DeepSeek-V4 (transformers' DeepseekV4Config): one kv head, a grouped low-rank output
    # projection, hyper-connections, a hash-routed first layer, and each attention kind (sliding,
    # compressed-sparse with its indexer, heavily compressed). intermediate_size is an alias of
    # moe_intermediate_size there.
    "deepseek_v4": ("deepseek_v4", dict(n_routed_experts=8, num_experts_per_tok=2,
                                        moe_intermediate_size=64, intermediate_size=64,
                                        n_shared_experts=1, num_hidden_layers=4,
                                        num_key_value_heads=1, head_dim=64,
                                        partial_rotary_factor=0.25, q_lora_rank=48,
                                        o_groups=2, o_lora_rank=32, index_n_heads=4,
                                        index_head_dim=32, index_topk=8, sliding_window=16,
                                        hc_mult=2,
                                        layer_types=["sliding_attention",
                                                     "compressed_sparse_attention",
                                                     "heavily_compressed_attention",
                                                     "compressed_sparse_attention"],
                                        mlp_layer_types=["hash_moe", "moe", "moe", "moe"])),
}


# Vision-language checkpoints: the text model under model.language_model, a tiny vision tower.
VLMS = {
    "gemma3_vlm": ("gemma3", "gemma3_text", dict(sliding_window=64, query_pre_attn_scalar=16),
                   dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, image_size=32, patch_size=16),
                   dict(mm_tokens_per_image=4)),
    "qwen3_5_vlm": ("qwen3_5", "qwen3_5_text", ARCHS["qwen3_5"][1],
                    dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                         out_hidden_size=128, patch_size=16, spatial_merge_size=2,
                         temporal_patch_size=2, num_position_embeddings=16), {}),
    "qwen3_5_moe_vlm": ("qwen3_5_moe", "qwen3_5_moe_text", ARCHS["qwen3_5_moe"][1],
                        dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                             out_hidden_size=128, patch_size=16, spatial_merge_size=2,
                             temporal_patch_size=2, num_position_embeddings=16), {}),
    "llama4_vlm": ("llama4", "llama4_text", ARCHS["llama4_text"][1],
                   dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, image_size=32, patch_size=16,
                        vision_output_dim=64, projector_input_dim=64, projector_output_dim=128),
                   {}),
}


def build_vlm(name, model_type, text_type, text_extra, vision, extra, out, dtype):
    text = dict(BASE)
    text.update(text_extra)
    text["model_type"] = text_type
    cfg = transformers.AutoConfig.for_model(model_type, text_config=text, vision_config=vision,
                                            **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(
        cfg, torch_dtype=getattr(torch, dtype))
    folder = save_random(model, out, name)
    return {"model_type": cfg.model_type, "class": type(model).__name__,
            "architectures": getattr(model.config, "architectures", None),
            "tensors": read_headers(folder)}


def save_random(model, out, name):
    """Fills every parameter with fresh random values (never the init's zeros or ones: norms and
    biases included) and saves the model with save_pretrained under out/name."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p.float()).mul_(0.05).to(p.dtype))
    folder = os.path.join(out, name)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def read_headers(folder):
    """name -> [dtype, shape] over every *.safetensors file of `folder`."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name != "__metadata__":
                out[name] = [meta["dtype"], meta["shape"], f]
    return out


def build(name, model_type, extra, out, dtype, logits):
    kw = dict(BASE)
    kw.update(extra)
    kw = {k: v for k, v in kw.items() if v is not None or k in ("q_lora_rank",)}
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    cfg.torch_dtype = dtype
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=getattr(torch, dtype))
    folder = save_random(model, out, name)
    entry = {"model_type": cfg.model_type, "class": type(model).__name__,
             "architectures": getattr(model.config, "architectures", None),
             "tensors": read_headers(folder)}
    if logits:
        import numpy as np
        ref = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
        ids = torch.tensor([[3, 17, 92, 5, 41, 8]])
        with torch.no_grad():
            lg = ref(ids).logits[0].float().numpy()
        np.savez(os.path.join(folder, "logits.npz"), ids=ids.numpy(), logits=lg)
    return entry


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--only", default="")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--logits", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    only = [s for s in a.only.split(",") if s]
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__}
    for name, (model_type, extra) in ARCHS.items():
        if only and name not in only:
            continue
        try:
            manifest[name] = build(name, model_type, extra, a.out, a.dtype, a.logits)
            print(f"{name}: {len(manifest[name]['tensors'])} tensors", file=sys.stderr)
        except Exception as ex:  # recorded: one architecture must not stop the others
            manifest[name] = {"error": f"{type(ex).__name__}: {ex}",
                              "trace": traceback.format_exc()[-2000:]}
            print(f"{name}: FAILED {type(ex).__name__}: {ex}", file=sys.stderr)
    for name, args in VLMS.items():
        if only and name not in only:
            continue
        try:
            manifest[name] = build_vlm(name, *args, a.out, a.dtype)
            print(f"{name}: {len(manifest[name]['tensors'])} tensors", file=sys.stderr)
        except Exception as ex:  # recorded: one architecture must not stop the others
            manifest[name] = {"error": f"{type(ex).__name__}: {ex}",
                              "trace": traceback.format_exc()[-2000:]}
            print(f"{name}: FAILED {type(ex).__name__}: {ex}", file=sys.stderr)
    with open(os.path.join(a.out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
