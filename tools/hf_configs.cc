// The config.json that transformers 5.17's save_pretrained writes for a tiny random model of each
// architecture: copies of tests/data/hf/<arch>/config.json (bench/hf_tiny.py on the GPU box) and
// of tests/data/quant/gpt_oss_mxfp4/config.json. tests/tools/presets_test.cc keeps them equal.
#include "tools/hf_configs.h"

#include <array>
#include <utility>

namespace hoist::tools {
namespace {

// clang-format off
constexpr std::array<std::pair<std::string_view, std::string_view>, 15> kConfigs = {{
    {"deepseek_v2", R"json({
  "architectures": [
    "DeepseekV2ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "bfloat16",
  "eos_token_id": 2,
  "first_k_dense_replace": 1,
  "head_dim": 8,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "kv_lora_rank": 32,
  "max_position_embeddings": 256,
  "mlp_bias": false,
  "model_type": "deepseek_v2",
  "moe_intermediate_size": 64,
  "n_group": 1,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "norm_topk_prob": false,
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 3,
  "num_key_value_heads": 8,
  "pad_token_id": null,
  "pretraining_tp": 1,
  "q_lora_rank": null,
  "qk_head_dim": 24,
  "qk_nope_head_dim": 16,
  "qk_rope_head_dim": 8,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "routed_scaling_factor": 1.0,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "topk_method": "greedy",
  "transformers_version": "5.17.0",
  "use_cache": true,
  "v_head_dim": 16,
  "vocab_size": 1000
})json"},
    {"gemma3_text", R"json({
  "_sliding_window_pattern": 6,
  "architectures": [
    "Gemma3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "attn_logit_softcapping": null,
  "bos_token_id": 2,
  "dtype": "bfloat16",
  "eos_token_id": 1,
  "final_logit_softcapping": null,
  "head_dim": 16,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "sliding_attention",
    "sliding_attention"
  ],
  "max_position_embeddings": 256,
  "model_type": "gemma3_text",
  "num_attention_heads": 8,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "pad_token_id": 0,
  "query_pre_attn_scalar": 16,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "full_attention": {
      "rope_theta": 1000000.0,
      "rope_type": "default"
    },
    "sliding_attention": {
      "rope_theta": 10000.0,
      "rope_type": "default"
    }
  },
  "sliding_window": 64,
  "tie_word_embeddings": true,
  "transformers_version": "5.17.0",
  "use_bidirectional_attention": false,
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"glm4_moe", R"json({
  "architectures": [
    "Glm4MoeForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "first_k_dense_replace": 1,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "max_position_embeddings": 256,
  "model_type": "glm4_moe",
  "moe_intermediate_size": 64,
  "n_group": 1,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 3,
  "num_key_value_heads": 4,
  "num_nextn_predict_layers": 1,
  "pad_token_id": null,
  "partial_rotary_factor": 0.5,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "partial_rotary_factor": 0.5,
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "routed_scaling_factor": 1.0,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "use_qk_norm": true,
  "vocab_size": 1000
})json"},
    {"glm_moe_dsa", R"json({
  "architectures": [
    "GlmMoeDsaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 0,
  "dtype": "bfloat16",
  "eos_token_id": 1,
  "first_k_dense_replace": 1,
  "head_dim": 8,
  "hidden_act": "silu",
  "hidden_size": 128,
  "index_head_dim": 128,
  "index_n_heads": 32,
  "index_topk": 2048,
  "indexer_types": [
    "full",
    "full",
    "full"
  ],
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "kv_lora_rank": 32,
  "layer_types": [
    "deepseek_sparse_attention",
    "deepseek_sparse_attention",
    "deepseek_sparse_attention"
  ],
  "max_position_embeddings": 256,
  "mlp_bias": false,
  "mlp_layer_types": [
    "dense",
    "sparse",
    "sparse"
  ],
  "model_type": "glm_moe_dsa",
  "moe_intermediate_size": 64,
  "n_group": 1,
  "n_routed_experts": 8,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 3,
  "num_key_value_heads": 8,
  "pad_token_id": null,
  "q_lora_rank": 48,
  "qk_head_dim": 24,
  "qk_nope_head_dim": 16,
  "qk_rope_head_dim": 8,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "routed_scaling_factor": 2.5,
  "tie_word_embeddings": false,
  "topk_group": 1,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "v_head_dim": 16,
  "vocab_size": 1000
})json"},
    {"gpt_oss", R"json({
  "architectures": [
    "GptOssForCausalLM"
  ],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 64,
  "layer_types": [
    "sliding_attention",
    "full_attention"
  ],
  "max_position_embeddings": 256,
  "model_type": "gpt_oss",
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "num_local_experts": 8,
  "output_router_logits": false,
  "pad_token_id": null,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_theta": 150000.0,
    "rope_type": "yarn",
    "truncate": false
  },
  "router_aux_loss_coef": 0.001,
  "sliding_window": 64,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"minimax_m2", R"json({
  "architectures": [
    "MiniMaxM2ForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 200034,
  "dtype": "bfloat16",
  "eos_token_id": 200020,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 64,
  "max_position_embeddings": 256,
  "model_type": "minimax_m2",
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "num_local_experts": 8,
  "output_router_logits": false,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 5000000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "router_jitter_noise": 0.0,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"mistral", R"json({
  "architectures": [
    "MistralForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "bfloat16",
  "eos_token_id": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "max_position_embeddings": 256,
  "model_type": "mistral",
  "num_attention_heads": 8,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"mixtral", R"json({
  "architectures": [
    "MixtralForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "bfloat16",
  "eos_token_id": 2,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "max_position_embeddings": 256,
  "model_type": "mixtral",
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "num_local_experts": 8,
  "output_router_logits": false,
  "pad_token_id": null,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "rope_theta": 1000000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "router_jitter_noise": 0.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"phi3", R"json({
  "architectures": [
    "Phi3ForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "dtype": "bfloat16",
  "embd_pdrop": 0.0,
  "eos_token_id": 32000,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "max_position_embeddings": 256,
  "model_type": "phi3",
  "num_attention_heads": 8,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "original_max_position_embeddings": 4096,
  "pad_token_id": 0,
  "resid_pdrop": 0.0,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "partial_rotary_factor": 1.0,
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "sliding_window": null,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"qwen2_moe", R"json({
  "architectures": [
    "Qwen2MoeForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "decoder_sparse_step": 1,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "full_attention",
    "full_attention"
  ],
  "max_position_embeddings": 256,
  "max_window_layers": 28,
  "mlp_only_layers": [],
  "model_type": "qwen2_moe",
  "moe_intermediate_size": 64,
  "norm_topk_prob": false,
  "num_attention_heads": 8,
  "num_experts": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "pad_token_id": null,
  "qkv_bias": true,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 96,
  "sliding_window": 0,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 1000
})json"},
    {"qwen3_5", R"json({
  "architectures": [
    "Qwen3_5ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "linear_attention",
    "linear_attention",
    "linear_attention",
    "full_attention"
  ],
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 16,
  "linear_num_key_heads": 4,
  "linear_num_value_heads": 8,
  "linear_value_head_dim": 16,
  "max_position_embeddings": 256,
  "model_type": "qwen3_5_text",
  "num_attention_heads": 8,
  "num_hidden_layers": 4,
  "num_key_value_heads": 4,
  "pad_token_id": null,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"qwen3_5_moe", R"json({
  "architectures": [
    "Qwen3_5MoeForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "linear_attention",
    "linear_attention",
    "linear_attention",
    "full_attention"
  ],
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 16,
  "linear_num_key_heads": 4,
  "linear_num_value_heads": 8,
  "linear_value_head_dim": 16,
  "max_position_embeddings": 256,
  "model_type": "qwen3_5_moe_text",
  "moe_intermediate_size": 64,
  "num_attention_heads": 8,
  "num_experts": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 4,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "pad_token_id": null,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 96,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"qwen3_moe", R"json({
  "architectures": [
    "Qwen3MoeForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "decoder_sparse_step": 1,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "max_position_embeddings": 256,
  "mlp_only_layers": [],
  "model_type": "qwen3_moe",
  "moe_intermediate_size": 64,
  "norm_topk_prob": false,
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "num_local_experts": 8,
  "output_router_logits": false,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 1000
})json"},
    {"qwen3_next", R"json({
  "architectures": [
    "Qwen3NextForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "decoder_sparse_step": 1,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "linear_attention",
    "linear_attention",
    "linear_attention",
    "full_attention"
  ],
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 16,
  "linear_num_key_heads": 4,
  "linear_num_value_heads": 8,
  "linear_value_head_dim": 16,
  "max_position_embeddings": 256,
  "mlp_only_layers": [],
  "model_type": "qwen3_next",
  "moe_intermediate_size": 64,
  "norm_topk_prob": true,
  "num_attention_heads": 8,
  "num_experts": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 4,
  "num_key_value_heads": 4,
  "output_router_logits": false,
  "pad_token_id": null,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "rope_type": "default"
  },
  "router_aux_loss_coef": 0.001,
  "shared_expert_intermediate_size": 96,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
    {"gpt_oss_mxfp4", R"json({
  "architectures": [
    "GptOssForCausalLM"
  ],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 64,
  "layer_types": [
    "sliding_attention",
    "full_attention"
  ],
  "max_position_embeddings": 256,
  "model_type": "gpt_oss",
  "num_attention_heads": 8,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 2,
  "num_key_value_heads": 4,
  "num_local_experts": 8,
  "output_router_logits": false,
  "pad_token_id": null,
  "quantization_config": {
    "modules_to_not_convert": [
      "model.layers.*.self_attn",
      "model.layers.*.mlp.router",
      "model.embed_tokens",
      "lm_head"
    ],
    "quant_method": "mxfp4"
  },
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_theta": 150000.0,
    "rope_type": "yarn",
    "truncate": false
  },
  "router_aux_loss_coef": 0.001,
  "sliding_window": 64,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 1000
})json"},
}};
// clang-format on

}  // namespace

std::string_view HfTinyConfig(std::string_view arch) {
  for (const auto& [name, text] : kConfigs) {
    if (name == arch) return text;
  }
  return {};
}

std::vector<std::string_view> HfTinyConfigNames() {
  std::vector<std::string_view> names;
  for (const auto& [name, text] : kConfigs) names.push_back(name);
  return names;
}

}  // namespace hoist::tools
