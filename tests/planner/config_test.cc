// Tests of ParseModelConfig (planner/checkpoint.h) on the real config.json files of each family
// (verbatim from the HuggingFace hub, trimmed of irrelevant keys only where marked) and on every
// kind of bad input: missing required keys, wrong types, bad JSON.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "planner/checkpoint.h"

namespace hoist::planner {
namespace {

constexpr char kLabel[] = "/models/x/config.json";

// meta-llama/Meta-Llama-3-8B
constexpr char kLlama3_8B[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256})";

// Qwen/Qwen2.5-7B
constexpr char kQwen25_7B[] = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064})";

// Qwen/Qwen3-4B: head_dim 128 is explicit and differs from hidden / heads = 80.
constexpr char kQwen3_4B[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2560, "initializer_range": 0.02, "intermediate_size": 9728,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen3-30B-A3B
constexpr char kQwen3_30B_A3B[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// deepseek-ai/DeepSeek-V3 (auto_map dropped).
constexpr char kDeepSeekV3[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280})";

// deepseek-ai/DeepSeek-V2-Lite style: q_lora_rank is null (plain q_proj), no quantization.
constexpr char kDeepSeekV2Lite[] = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "first_k_dense_replace": 1, "hidden_size": 2048,
  "intermediate_size": 10944, "kv_lora_rank": 512, "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
  "num_attention_heads": 16, "num_hidden_layers": 27, "num_key_value_heads": 16,
  "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "tie_word_embeddings": false, "v_head_dim": 128, "vocab_size": 102400})";

ModelConfig MustParse(const char* text) {
  Result<ModelConfig> r = ParseModelConfig(kLabel, text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ModelConfig{};
}

TEST(ModelConfig, Llama3) {
  const ModelConfig c = MustParse(kLlama3_8B);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // default: 4096 / 32
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_TRUE(c.quant_method.empty());
  EXPECT_TRUE(c.weight_block_size.empty());
}

TEST(ModelConfig, Qwen2) {
  const ModelConfig c = MustParse(kQwen25_7B);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);  // default: 3584 / 28
  EXPECT_EQ(c.vocab_size, 152064);
}

TEST(ModelConfig, Qwen3ExplicitHeadDimAndTiedEmbeddings) {
  const ModelConfig c = MustParse(kQwen3_4B);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.intermediate_size, 9728);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfig, Qwen3Moe) {
  const ModelConfig c = MustParse(kQwen3_30B_A3B);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  EXPECT_EQ(c.num_hidden_layers, 48);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.n_shared_experts, 0);
}

TEST(ModelConfig, Qwen3MoeMlpOnlyLayersAndSparseStep) {
  Result<ModelConfig> r = ParseModelConfig(kLabel, R"({"hidden_size": 64,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 128, "num_experts": 8,
      "decoder_sparse_step": 2, "mlp_only_layers": [0, 3]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->decoder_sparse_step, 2);
  EXPECT_EQ(r->mlp_only_layers, (std::vector<std::int64_t>{0, 3}));
}

TEST(ModelConfig, DeepSeekV3) {
  const ModelConfig c = MustParse(kDeepSeekV3);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.intermediate_size, 18432);
  EXPECT_EQ(c.num_hidden_layers, 61);
  EXPECT_EQ(c.num_attention_heads, 128);
  EXPECT_EQ(c.num_key_value_heads, 128);
  EXPECT_EQ(c.head_dim, 56);  // default 7168 / 128; MLA uses the dims below
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.num_experts, 256);  // from n_routed_experts
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.quant_method, "fp8");
  EXPECT_EQ(c.weight_block_size, (std::vector<std::int64_t>{128, 128}));
}

TEST(ModelConfig, DeepSeekNullQLoraRankMeansPlainQProj) {
  const ModelConfig c = MustParse(kDeepSeekV2Lite);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.n_shared_experts, 2);
  EXPECT_EQ(c.first_k_dense_replace, 1);
}

TEST(ModelConfig, DefaultsWhenOptionalKeysAreAbsentOrNull) {
  Result<ModelConfig> r = ParseModelConfig(kLabel, R"({"hidden_size": 96,
      "num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": null,
      "head_dim": null, "vocab_size": 1000, "quantization_config": null})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_key_value_heads, 6);
  EXPECT_EQ(r->head_dim, 16);
  EXPECT_FALSE(r->tie_word_embeddings);
  EXPECT_EQ(r->decoder_sparse_step, 1);
  EXPECT_TRUE(r->model_type.empty());
  EXPECT_EQ(r->intermediate_size, 0);
}

TEST(ModelConfig, ExpertCountSpellingsMustAgree) {
  Result<ModelConfig> same = ParseModelConfig(kLabel, R"({"hidden_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 64, "num_experts": 4,
      "n_routed_experts": 4})");
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->num_experts, 4);
  Result<ModelConfig> differ = ParseModelConfig(kLabel, R"({"hidden_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 64, "num_experts": 4,
      "n_routed_experts": 8})");
  ASSERT_FALSE(differ.ok());
  EXPECT_NE(differ.status().message().find("disagrees"), std::string::npos);
}

// ---- errors ---------------------------------------------------------------------------------

struct BadCase {
  const char* test_name;
  const char* json;
  const char* expected;  // substring of the message (the key, usually)
};

class ModelConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelConfigErrorTest, IsCorruptNamingConfigJsonAndTheKey) {
  Result<ModelConfig> r = ParseModelConfig(kLabel, GetParam().json);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt) << r.status().ToString();
  EXPECT_NE(r.status().message().find(kLabel), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(GetParam().expected), std::string::npos)
      << r.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ModelConfigErrorTest,
    ::testing::Values(
        BadCase{"MissingHiddenSize",
                R"({"num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10})",
                "missing required key \"hidden_size\""},
        BadCase{"MissingLayers", R"({"hidden_size": 8, "num_attention_heads": 4,
                "vocab_size": 10})",
                "missing required key \"num_hidden_layers\""},
        BadCase{"MissingHeads", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "vocab_size": 10})",
                "missing required key \"num_attention_heads\""},
        BadCase{"MissingVocab", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4})",
                "missing required key \"vocab_size\""},
        BadCase{"NullRequired", R"({"hidden_size": null, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10})",
                "missing required key \"hidden_size\""},
        BadCase{"ZeroHeads", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 0, "vocab_size": 10})",
                "\"num_attention_heads\" must be positive"},
        BadCase{"HiddenAsString", R"({"hidden_size": "4096", "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10})",
                "\"hidden_size\" must be a non-negative integer, got string"},
        BadCase{"HeadDimFloat", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "head_dim": 2.5})",
                "\"head_dim\" must be a non-negative integer, got floating-point"},
        BadCase{"NegativeKvHeads", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "num_key_value_heads": -1})",
                "\"num_key_value_heads\" must be a non-negative integer, got negative"},
        BadCase{"HugeVocab", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 18446744073709551615})",
                "\"vocab_size\" = 18446744073709551615 is out of range: at most 1073741824"},
        BadCase{"HiddenOutOfRange", R"({"hidden_size": 2147483648, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10})",
                "\"hidden_size\" = 2147483648 is out of range: at most 1073741824"},
        BadCase{"LayersOutOfRange", R"({"hidden_size": 8, "num_hidden_layers": 65537,
                "num_attention_heads": 4, "vocab_size": 10})",
                "\"num_hidden_layers\" = 65537 is out of range: at most 65536"},
        BadCase{"ExpertsOutOfRange", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "n_routed_experts": 100000})",
                "\"n_routed_experts\" = 100000 is out of range: at most 65536"},
        BadCase{"ZeroKvHeads", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "num_key_value_heads": 0})",
                "\"num_key_value_heads\" must be positive, got 0"},
        BadCase{"TieAsString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "tie_word_embeddings": "true"})",
                "\"tie_word_embeddings\" must be a boolean"},
        BadCase{"ModelTypeNotString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "model_type": 3})",
                "\"model_type\" must be a string"},
        BadCase{"ArchitecturesNotArray", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "architectures": "Llama"})",
                "\"architectures\" must be an array of strings"},
        BadCase{"ExpertsAsString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "n_routed_experts": "256"})",
                "\"n_routed_experts\" must be a non-negative integer"},
        BadCase{"MlpOnlyLayersWithString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "mlp_only_layers": [0, "1"]})",
                "\"mlp_only_layers\" must be an array of non-negative integers"},
        BadCase{"QuantizationConfigNotObject", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "quantization_config": "fp8"})",
                "\"quantization_config\" must be an object"},
        BadCase{"BlockSizeWithString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10,
                "quantization_config": {"quant_method": "fp8", "weight_block_size": ["128"]}})",
                "quantization_config: key \"weight_block_size\""},
        BadCase{"BlockSizeZero", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10,
                "quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}})",
                "\"weight_block_size\" entries must be positive"},
        BadCase{"QuantMethodNotString", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10,
                "quantization_config": {"quant_method": 8}})",
                "quantization_config: key \"quant_method\" must be a string"},
        BadCase{"InvalidJson", R"({"hidden_size": 8,, })", "invalid JSON at byte 18"},
        BadCase{"TruncatedJson", R"({"hidden_size": 8, "num_hid)", "truncated JSON"},
        BadCase{"NotAnObject", R"([{"hidden_size": 8}])", "must be a JSON object, got array"},
        BadCase{"DuplicateKey", R"({"hidden_size": 8, "num_hidden_layers": 2,
                "num_attention_heads": 4, "vocab_size": 10, "hidden_size": 16})",
                "duplicate key \"hidden_size\""}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.test_name; });

}  // namespace
}  // namespace hoist::planner
