#!/usr/bin/env python3
"""A bf16 Qwen3 checkpoint written by transformers' save_pretrained from a random-initialised
config (4B shape by default; issue 15 measures compression on it). Usage:
    make_hf_qwen3.py OUT_DIR [--layers N]
Initialises on the GPU when there is one (the CPU takes minutes for 4B values)."""
import argparse
import sys

import torch
import transformers

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=36)
a = p.parse_args()
cfg = transformers.Qwen3Config(
    hidden_size=2560, intermediate_size=9728, num_hidden_layers=a.layers, num_attention_heads=32,
    num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
    max_position_embeddings=40960, torch_dtype="bfloat16")
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_dtype(torch.bfloat16)
with torch.device(dev):
    model = transformers.Qwen3ForCausalLM(cfg)
model = model.to(torch.bfloat16)
model.save_pretrained(a.out, safe_serialization=True, max_shard_size="4GB")
n = sum(t.numel() for t in model.parameters())
print(f"transformers {transformers.__version__}: Qwen3 {a.layers} layers, {n} values -> {a.out}",
      file=sys.stderr)
