// Presets (config.json per family, HF key spellings) and the tensor list of a config, which
// follows the planner's family table (planner/rules.h: ForEachImpliedTensor names the tensors,
// ImpliedShape gives their shapes); only dtypes and the FP8 block scales are decided here. See
// tools/mkckpt.h for the contract. nlohmann::json exceptions are caught here and turned into
// Status; nothing throws out of these functions.
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/rules.h"
#include "tools/hf_configs.h"
#include "tools/mkckpt.h"

namespace hoist::tools {
namespace {

using ojson = nlohmann::ordered_json;

std::uint64_t DTypeBytes(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F32") return 4;
  if (dtype == "F8_E4M3" || dtype == "F8_E8M0" || dtype == "U8" || dtype == "I8") return 1;
  if (dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "I64" || dtype == "U64" || dtype == "F64") return 8;
  return 0;
}

struct DenseShape {
  std::string model_type;
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  bool tied = false;
};

ojson LlamaConfig(const DenseShape& s) {
  ojson c;
  c["architectures"] = {"LlamaForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  c["head_dim"] = s.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate;
  c["max_position_embeddings"] = 8192;
  c["mlp_bias"] = false;
  c["model_type"] = "llama";
  c["num_attention_heads"] = s.heads;
  c["num_hidden_layers"] = s.layers;
  c["num_key_value_heads"] = s.kv_heads;
  c["pretraining_tp"] = 1;
  c["rms_norm_eps"] = 1e-05;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 500000.0;
  c["tie_word_embeddings"] = s.tied;
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.51.0";
  c["use_cache"] = true;
  c["vocab_size"] = s.vocab;
  return c;
}

// Qwen2 has no head_dim key: hidden / heads.
ojson Qwen2Config(const DenseShape& s) {
  ojson c;
  c["architectures"] = {"Qwen2ForCausalLM"};
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 151643;
  c["eos_token_id"] = 151645;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate;
  c["max_position_embeddings"] = 32768;
  c["max_window_layers"] = s.layers;
  c["model_type"] = "qwen2";
  c["num_attention_heads"] = s.heads;
  c["num_hidden_layers"] = s.layers;
  c["num_key_value_heads"] = s.kv_heads;
  c["rms_norm_eps"] = 1e-06;
  c["rope_theta"] = 1000000.0;
  c["sliding_window"] = 32768;
  c["tie_word_embeddings"] = s.tied;
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.51.0";
  c["use_cache"] = true;
  c["use_sliding_window"] = false;
  c["vocab_size"] = s.vocab;
  return c;
}

ojson DenseConfig(const DenseShape& s) {
  if (s.model_type == "llama") return LlamaConfig(s);
  if (s.model_type == "qwen2") return Qwen2Config(s);
  ojson c;
  // qwen3 (and the attention part of qwen3_moe).
  c["architectures"] = {"Qwen3ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 151643;
  c["eos_token_id"] = 151645;
  c["head_dim"] = s.head_dim;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate;
  c["max_position_embeddings"] = 40960;
  c["max_window_layers"] = s.layers;
  c["model_type"] = "qwen3";
  c["num_attention_heads"] = s.heads;
  c["num_hidden_layers"] = s.layers;
  c["num_key_value_heads"] = s.kv_heads;
  c["rms_norm_eps"] = 1e-06;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 1000000;
  c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = s.tied;
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.51.0";
  c["use_cache"] = true;
  c["use_sliding_window"] = false;
  c["vocab_size"] = s.vocab;
  return c;
}

ojson Qwen3MoeConfig(const DenseShape& s, int experts, int moe_intermediate,
                     const std::vector<int>& mlp_only_layers) {
  ojson c = DenseConfig(s);
  c["architectures"] = {"Qwen3MoeForCausalLM"};
  c["model_type"] = "qwen3_moe";
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = mlp_only_layers;
  c["moe_intermediate_size"] = moe_intermediate;
  c["norm_topk_prob"] = true;
  c["num_experts"] = experts;
  c["num_experts_per_tok"] = 2;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
  return c;
}

struct MlaShape {
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;
  int moe_intermediate = 0;
  int experts = 0;
  int shared_experts = 0;
  int first_dense = 0;
  int heads = 0;
  int q_lora = 0;
  int kv_lora = 0;
  int nope = 0;
  int rope = 0;
  int v_head = 0;
  int vocab = 0;
};

ojson DeepseekConfig(const MlaShape& s) {
  ojson c;
  c["architectures"] = {"DeepseekV3ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["first_k_dense_replace"] = s.first_dense;
  c["hidden_act"] = "silu";
  c["hidden_size"] = s.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = s.intermediate;
  c["kv_lora_rank"] = s.kv_lora;
  c["max_position_embeddings"] = 163840;
  c["model_type"] = "deepseek_v3";
  c["moe_intermediate_size"] = s.moe_intermediate;
  c["moe_layer_freq"] = 1;
  c["n_group"] = 1;
  c["n_routed_experts"] = s.experts;
  c["n_shared_experts"] = s.shared_experts;
  c["norm_topk_prob"] = true;
  c["num_attention_heads"] = s.heads;
  c["num_experts_per_tok"] = 2;
  c["num_hidden_layers"] = s.layers;
  c["num_key_value_heads"] = s.heads;
  c["num_nextn_predict_layers"] = 0;
  c["q_lora_rank"] = s.q_lora;
  c["qk_nope_head_dim"] = s.nope;
  c["qk_rope_head_dim"] = s.rope;
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"weight_block_size", {128, 128}}};
  c["rms_norm_eps"] = 1e-06;
  c["rope_theta"] = 10000;
  c["routed_scaling_factor"] = 2.5;
  c["scoring_func"] = "sigmoid";
  c["tie_word_embeddings"] = false;
  c["topk_group"] = 1;
  c["topk_method"] = "noaux_tc";
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.46.3";
  c["use_cache"] = true;
  c["v_head_dim"] = s.v_head;
  c["vocab_size"] = s.vocab;
  return c;
}

// A config quantized like the official FP8 checkpoints (Qwen3-FP8, DeepSeek-V3): E4M3 linear
// weights with F32 128x128 block scales.
ojson WithFp8(ojson c) {
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"weight_block_size", {128, 128}}};
  return c;
}

// A config transformers writes (tools/hf_configs.h) with `patches` merged over it in order
// (RFC 7386) and its per-layer arrays fitted to the patched num_hidden_layers.
ojson FromHf(std::string_view arch, std::initializer_list<const char*> patches = {}) {
  ojson c = ojson::parse(HfTinyConfig(arch));
  for (const char* patch : patches) c.merge_patch(ojson::parse(patch));
  const std::size_t layers = c["num_hidden_layers"].get<std::size_t>();
  for (const char* key : {"layer_types", "indexer_types", "mlp_layer_types"}) {
    auto it = c.find(key);
    if (it == c.end() || !it->is_array() || it->empty() || it->size() == layers) continue;
    const ojson pattern = *it;  // repeated: 3 linear + 1 full, sliding / full, ...
    it->clear();
    for (std::size_t l = 0; l < layers; ++l) it->push_back(pattern[l % pattern.size()]);
  }
  if (auto it = c.find("mlp_layer_types"); it != c.end() && it->is_array()) {
    const std::size_t dense = c.value("first_k_dense_replace", std::size_t{0});
    for (std::size_t l = 0; l < it->size(); ++l) (*it)[l] = l < dense ? "dense" : "sparse";
  }
  return c;
}

// Mid-size shapes (2-3 GB in BF16): hidden 2048, 16 query heads and 4 kv heads (MLA: 16 heads),
// 16-32 experts, vocab 32000: tp 1/2/4/8 and ep 2/4/8 divide every one of them.
constexpr const char* kMidGqa =
    R"({"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 128, "vocab_size": 32000, "num_hidden_layers": 8})";
constexpr const char* kMidMla =
    R"({"hidden_size": 2048, "intermediate_size": 8192, "moe_intermediate_size": 768,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 64,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "qk_head_dim": 192, "v_head_dim": 128,
        "kv_lora_rank": 512, "n_routed_experts": 32, "num_hidden_layers": 8, "vocab_size": 32000})";
constexpr const char* kMidHybrid =
    R"({"intermediate_size": 5120, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "head_dim": 256, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "num_experts": 32})";

ojson Mid(std::string_view arch, const char* base, const char* patch) {
  return FromHf(arch, {base, patch});
}

struct Preset {
  std::string family;
  ojson config;
};

// DeepSeek-V4, tiny: tests/data/derived/deepseek_v4/config.json (written from vLLM's model files;
// tests/tools/presets_test.cc keeps them equal). MXFP4 experts, compressors on layers 0, 1 and 3,
// the indexer on 0 and 3, a hash-routed layer 0; tp 1, 2, 4 and ep 2, 4 plan.
constexpr const char* kDeepseekV4Tiny = R"json({
  "architectures": [
    "DeepseekV4ForCausalLM"
  ],
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
  "norm_topk_prob": true,
  "routed_scaling_factor": 1.5,
  "swiglu_limit": 10.0,
  "hidden_act": "silu",
  "hc_mult": 2,
  "hc_sinkhorn_iters": 20,
  "hc_eps": 1e-06,
  "compress_ratios": [
    4,
    128,
    0,
    4
  ],
  "compress_rope_theta": 160000.0,
  "index_n_heads": 4,
  "index_head_dim": 64,
  "index_topk": 16,
  "sliding_window": 16,
  "num_nextn_predict_layers": 1,
  "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "rope_scaling": {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 1024,
    "beta_fast": 32,
    "beta_slow": 1
  },
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "quantization_config": {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "scale_fmt": "ue8m0",
    "weight_block_size": [
      128,
      128
    ]
  },
  "expert_dtype": "fp4"
})json";

// DeepSeek-V4, mid (about 1.4 GB): DeepSeek-V4-Flash's head_dim 512, hc_mult 4 and
// compress_ratios pattern, scaled; every split whole at tp 1..8, 32 experts.
constexpr const char* kDeepseekV4Mid =
    R"({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 512, "q_lora_rank": 1024,
        "o_groups": 8, "o_lora_rank": 512, "n_routed_experts": 32, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1024, "num_hidden_layers": 8, "num_hash_layers": 2,
        "vocab_size": 32000, "hc_mult": 4, "index_n_heads": 16, "index_head_dim": 128,
        "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128]})";

void AddDeepseekV4Presets(std::map<std::string, Preset>* m) {
  (*m)["deepseek-v4-tiny"] = {"deepseek-v4", ojson::parse(kDeepseekV4Tiny)};
  ojson mid = ojson::parse(kDeepseekV4Tiny);
  mid.merge_patch(ojson::parse(kDeepseekV4Mid));
  (*m)["deepseek-v4-mid"] = {"deepseek-v4", std::move(mid)};
}

// The presets built from the configs transformers writes: <family>-tiny (tests/data/hf's sizes:
// hidden 128, 8 heads, 4 kv heads, 8 experts, 2-4 layers, vocab 1000) and <family>-mid.
void AddHfPresets(std::map<std::string, Preset>* m) {
  for (const auto& [name, family, arch] :
       std::vector<std::array<std::string, 3>>{{"mistral-tiny", "mistral", "mistral"},
                                               {"gemma3-text-tiny", "gemma3-text", "gemma3_text"},
                                               {"phi3-tiny", "phi3", "phi3"},
                                               {"qwen3-5-tiny", "qwen3-5", "qwen3_5"},
                                               {"mixtral-tiny", "mixtral", "mixtral"},
                                               {"qwen2-moe-tiny", "qwen2-moe", "qwen2_moe"},
                                               {"qwen3-next-tiny", "qwen3-next", "qwen3_next"},
                                               {"qwen3-5-moe-tiny", "qwen3-5-moe", "qwen3_5_moe"},
                                               {"glm4-moe-tiny", "glm4-moe", "glm4_moe"},
                                               {"glm-moe-dsa-tiny", "glm-moe-dsa", "glm_moe_dsa"},
                                               {"deepseek-v2-tiny", "deepseek-v2", "deepseek_v2"},
                                               {"minimax-m2-tiny", "minimax-m2", "minimax_m2"},
                                               {"gpt-oss-tiny", "gpt-oss", "gpt_oss"}}) {
    (*m)[name] = {family, FromHf(arch)};
  }
  // MXFP4 splits the expert intermediate size in 32-value blocks: 128 (4 blocks) for tp 4.
  (*m)["gpt-oss-mxfp4-tiny"] = {"gpt-oss",
                                FromHf("gpt_oss_mxfp4", {R"({"intermediate_size": 128})"})};
  (*m)["mixtral-mid"] = {"mixtral", Mid("mixtral", kMidGqa,
                                        R"({"intermediate_size": 1024, "num_local_experts": 16,
                                            "num_hidden_layers": 12})")};
  (*m)["qwen2-moe-mid"] = {"qwen2-moe", Mid("qwen2_moe", kMidGqa,
                                            R"({"intermediate_size": 5632,
                                                "moe_intermediate_size": 768, "num_experts": 32,
                                                "shared_expert_intermediate_size": 2048})")};
  (*m)["qwen3-moe-mid"] = {"qwen3-moe", Mid("qwen3_moe", kMidGqa,
                                            R"({"intermediate_size": 6144,
                                                "moe_intermediate_size": 768,
                                                "num_local_experts": 32})")};
  (*m)["qwen3-next-mid"] = {"qwen3-next", Mid("qwen3_next", kMidGqa, kMidHybrid)};
  (*m)["qwen3-5-moe-mid"] = {"qwen3-5-moe", Mid("qwen3_5_moe", kMidGqa, kMidHybrid)};
  (*m)["glm4-moe-mid"] = {"glm4-moe", Mid("glm4_moe", kMidGqa,
                                          R"({"intermediate_size": 8192,
                                              "moe_intermediate_size": 768,
                                              "n_routed_experts": 32})")};
  (*m)["glm-moe-dsa-mid"] = {"glm-moe-dsa", Mid("glm_moe_dsa", kMidMla, R"({"q_lora_rank": 768})")};
  (*m)["deepseek-v2-mid"] = {"deepseek-v2", Mid("deepseek_v2", kMidMla, "{}")};
  (*m)["minimax-m2-mid"] = {"minimax-m2", Mid("minimax_m2", kMidGqa,
                                              R"({"intermediate_size": 768,
                                                  "num_local_experts": 32})")};
  // gpt_oss: 64-dim heads as gpt-oss-20b; the expert intermediate size splits in 32-value
  // MXFP4 blocks at tp 1..8.
  (*m)["gpt-oss-mid"] = {"gpt-oss", Mid("gpt_oss", kMidGqa,
                                        R"({"intermediate_size": 1536,
                                            "num_attention_heads": 32, "num_key_value_heads": 8,
                                            "head_dim": 64, "num_local_experts": 32,
                                            "num_hidden_layers": 4})")};
}

const std::map<std::string, Preset>& Presets() {
  static const std::map<std::string, Preset>* presets = [] {
    auto* m = new std::map<std::string, Preset>;
    // Exactly Qwen3-4B: 398 tensors, 8,044,936,192 bytes.
    (*m)["qwen3-4b"] = {"qwen3", DenseConfig({"qwen3", 36, 2560, 9728, 32, 8, 128, 151936, true})};
    // 16 heads / 4 kv heads: tp 1..8 plain, tp 16 replicates kv heads. Vocab 1000 -> 1024.
    (*m)["qwen3-tiny"] = {"qwen3", DenseConfig({"qwen3", 2, 64, 128, 16, 4, 16, 1000, true})};
    (*m)["qwen3-tiny-untied"] = {"qwen3",
                                 DenseConfig({"qwen3", 2, 64, 128, 16, 4, 16, 1000, false})};
    // Qwen2: q/k/v biases; 2 kv heads so tp 4 and 8 replicate; vocab 1500 -> 1536.
    (*m)["qwen2-tiny"] = {"qwen2", DenseConfig({"qwen2", 2, 128, 256, 8, 2, 16, 1500, true})};
    // Qwen3 FP8, block scales on every projection, k/v included: 2 kv heads of 128 rows, so tp 2
    // gives each rank one head's scale block and tp 4 replicates it.
    (*m)["qwen3-fp8-tiny"] = {"qwen3",
                              WithFp8(DenseConfig({"qwen3", 2, 256, 512, 4, 2, 128, 1000, true}))};
    // Llama: untied, vocab a multiple of 64 (no padding rows).
    (*m)["llama-tiny"] = {"llama", DenseConfig({"llama", 2, 128, 320, 8, 4, 16, 1088, false})};
    // Qwen3-MoE: layer 1 dense through mlp_only_layers, layers 0 and 2 sparse with 8 experts.
    (*m)["qwen3-moe-tiny"] = {
        "qwen3-moe", Qwen3MoeConfig({"qwen3", 3, 64, 128, 8, 4, 16, 1000, false}, 8, 32, {1})};
    // DeepSeek-V3, FP8 128x128: tp 1/2 and ep 2/4/8 plan; tp 4 splits o_proj's 256 input
    // columns into 64-column shards, inside a 128 block (the plan-time error).
    // kv_a_proj_with_mqa is [192, 256]: a partial last scale block.
    (*m)["deepseek-v3-tiny"] = {
        "deepseek-v3", DeepseekConfig({3, 256, 512, 256, 8, 1, 1, 4, 128, 128, 64, 64, 64, 1000})};
    // About 1.8 GB; every FP8 tensor splits in whole blocks at tp 1..8, 32 experts.
    (*m)["deepseek-v3-small"] = {"deepseek-v3", DeepseekConfig({4, 2048, 8192, 1024, 32, 1, 1, 16,
                                                                1536, 512, 128, 64, 128, 129280})};
    // DeepSeek-V3-671B's shape (61 layers, 256 experts, FP8 128x128; no MTP layer): about
    // 690 GB, for planning at scale with --header-only (sparse data).
    (*m)["deepseek-v3-671b"] = {
        "deepseek-v3",
        DeepseekConfig({61, 7168, 18432, 2048, 256, 1, 3, 128, 1536, 512, 128, 64, 128, 129280})};
    AddHfPresets(m);
    AddDeepseekV4Presets(m);
    return m;
  }();
  return *presets;
}

// The formats ListTensorSpecs writes.
struct Format {
  bool fp8 = false;     // quant_method fp8 with weight_block_size: E4M3 + F32 block scales
  bool mxfp4 = false;   // gpt_oss quant_method mxfp4: the walk names U8 _blocks / _scales
  bool v4 = false;      // DeepSeek-V4 FP8: the walk names each X.scale (V4DType)
  bool v4_fp4 = false;  // and its routed experts are MXFP4 (expert_dtype fp4)
};

Result<Format> FormatOf(const planner::ModelConfig& c, planner::Family family) {
  const std::string& method = c.quant_method;
  if (method.empty()) return Format{};
  if (method == "fp8" && planner::BlockSizeOf(c).rows > 0 &&
      family == planner::Family::kDeepseekV4) {
    return Format{false, false, true, planner::Mxfp4Experts(c, family)};
  }
  if (method == "fp8" && planner::BlockSizeOf(c).rows > 0) return Format{true, false};
  if (method == "mxfp4" && family == planner::Family::kGptOss) return Format{false, true};
  return Status::Unsupported(
      "config.json: quantization_config.quant_method '" + method + "'" +
      (method == "fp8" ? " without weight_block_size" : "") +
      ": hoist-mkckpt lists BF16, FP8 block-scaled (quant_method fp8 with weight_block_size) and "
      "gpt_oss MXFP4 checkpoints; give other formats' tensors with --tensors");
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The dtype transformers saves a tensor in: BF16, but MXFP4 blocks and scales as U8 and the
// DeepSeek-style router's e_score_correction_bias (DeepSeek-V3, GLM-4.5, GLM-5) as F32, a
// float32 buffer in transformers (MiniMax-M2's block_sparse_moe one is a BF16 parameter).
std::string DTypeOf(std::string_view name, const Format& format) {
  if (format.mxfp4 && (EndsWith(name, "_blocks") || EndsWith(name, "_scales"))) return "U8";
  if (EndsWith(name, "mlp.gate.e_score_correction_bias")) return "F32";
  if (EndsWith(name, ".tid2eid")) return "I64";  // DeepSeek-V4's hash-routing table, unquantized
  return "BF16";
}

// DeepSeek-V4 as DeepSeek publishes it: FP8 E4M3 linear layers (those with an X.scale rule) with
// block scales (F8_E8M0 in the MXFP4-expert release, F32 with expert_dtype fp8), MXFP4 routed
// experts (I8 codes), F32 hyper-connections, compressor ape, attention sinks and router bias, an
// I64 hash-routing table; BF16 otherwise.
std::string V4DType(planner::Family family, std::string_view name, const Format& format) {
  if (EndsWith(name, ".scale")) return format.v4_fp4 ? "F8_E8M0" : "F32";
  if (EndsWith(name, ".weight")) {
    const std::string scale = std::string(name.substr(0, name.size() - 6)) + "scale";
    if (!planner::HasRule(family, scale)) return "BF16";
    const bool expert = name.find(".ffn.experts.") != std::string_view::npos;
    return expert && format.v4_fp4 ? "I8" : "F8_E4M3";
  }
  if (EndsWith(name, ".tid2eid")) return "I64";
  const bool f32 = name.find("hc_") != std::string_view::npos || EndsWith(name, ".ape") ||
                   EndsWith(name, ".attn_sink") || EndsWith(name, ".bias");
  return f32 ? "F32" : "BF16";
}

// Appends implied tensor `name`: its shape from the planner, its dtype; under FP8 a weight whose
// row accepts block scales (the linear projections: not norms, embeddings, routers or lm_head,
// as the official FP8 checkpoints store them) is E4M3 and followed by its F32 scale.
Status AddImplied(const planner::ModelConfig& c, planner::Family family, const Format& format,
                  const std::string& name, std::vector<TensorSpec>* out) {
  HOIST_ASSIGN_OR_RETURN(std::vector<std::uint64_t> shape, planner::ImpliedShape(c, family, name));
  if (format.v4) {
    out->push_back({name, V4DType(family, name, format), std::move(shape)});
    return Status::Ok();
  }
  const std::string scale =
      EndsWith(name, ".weight") ? name.substr(0, name.size() - 6) + "weight_scale_inv" : "";
  if (!format.fp8 || scale.empty() || !planner::HasRule(family, scale)) {
    out->push_back({name, DTypeOf(name, format), std::move(shape)});
    return Status::Ok();
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<std::uint64_t> blocks,
                         planner::ImpliedShape(c, family, scale));
  out->push_back({name, "F8_E4M3", std::move(shape)});
  out->push_back({scale, "F32", std::move(blocks)});
  return Status::Ok();
}

// The config and family of config.json. An architecture without family rules is Unsupported
// even when the rest of the config is wrong too; other errors are InvalidArgument.
Result<std::pair<planner::ModelConfig, planner::Family>> ParseConfig(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("config.json: ") + e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("config.json: not a JSON object");
  Result<planner::ModelConfig> c = planner::ParseModelConfig("config.json", text);
  if (!c.ok()) {
    planner::ModelConfig stub;
    const auto mt = j.find("model_type");
    if (mt != j.end() && mt->is_string()) stub.model_type = mt->get<std::string>();
    const auto arch = j.find("architectures");
    if (arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
      stub.architectures = {(*arch)[0].get<std::string>()};
    }
    if (!stub.model_type.empty() || !stub.architectures.empty()) {
      HOIST_RETURN_IF_ERROR(planner::FamilyOf(stub).status());
    }
    return Status::InvalidArgument(c.status().message());
  }
  HOIST_ASSIGN_OR_RETURN(planner::Family family, planner::FamilyOf(*c));
  if (c->num_experts > 0) {  // Qwen-MoE's decoder_sparse_step 0 (vLLM divides by it)
    Result<planner::LayerMlp> mlp = planner::LayerMlpOf(*c, family, 0);
    if (!mlp.ok()) return Status::InvalidArgument(mlp.status().message());
  }
  return std::make_pair(std::move(*c), family);
}

// "qwen3_moe" -> "qwen3-moe": the --family spelling of a planner family.
std::string OptionName(planner::Family family) {
  std::string s(planner::FamilyName(family));
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// The planner family of a --family value: the planner's names with '-' for '_', and mistral
// (the llama family's rules).
Result<planner::Family> PlannerFamily(const std::string& family) {
  if (family == "mistral") return planner::Family::kLlama;
  std::string known = "mistral";
  for (int f = 0; f < planner::kFamilyCount; ++f) {
    const auto fam = static_cast<planner::Family>(f);
    if (OptionName(fam) == family) return fam;
    known += ", " + OptionName(fam);
  }
  return Status::InvalidArgument("unknown family '" + family + "' (known: " + known + ")");
}

}  // namespace

std::uint64_t TensorSpec::Bytes() const {
  std::uint64_t n = DTypeBytes(dtype);
  for (std::uint64_t d : shape) n *= d;
  return n;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, preset] : Presets()) names.push_back(name);
  return names;
}

Result<std::string> PresetFamily(const std::string& preset) {
  auto it = Presets().find(preset);
  if (it == Presets().end()) {
    std::string all;
    for (const auto& n : PresetNames()) all += (all.empty() ? "" : ", ") + n;
    return Status::NotFound("unknown preset '" + preset + "' (known: " + all + ")");
  }
  return it->second.family;
}

Result<std::string> PresetConfigJson(const std::string& preset) {
  HOIST_RETURN_IF_ERROR(PresetFamily(preset).status());
  return Presets().at(preset).config.dump(2) + "\n";
}

Result<std::string> FamilyModelType(const std::string& family) {
  HOIST_ASSIGN_OR_RETURN(planner::Family f, PlannerFamily(family));
  if (family == "mistral") return std::string("mistral");
  const std::string_view types = planner::InfoOf(f).model_types;
  return std::string(types.substr(0, types.find(',')));
}

Status CheckConfigFamily(const std::string& family, std::string_view config_json) {
  HOIST_ASSIGN_OR_RETURN(planner::Family want, PlannerFamily(family));
  HOIST_ASSIGN_OR_RETURN(auto parsed, ParseConfig(config_json));
  if (parsed.second == want) return Status::Ok();
  return Status::InvalidArgument("config.json: model_type '" + parsed.first.model_type +
                                 "' (family " + OptionName(parsed.second) +
                                 ") does not match --family " + family);
}

Result<std::vector<TensorSpec>> ListTensorSpecs(std::string_view config_json) {
  HOIST_ASSIGN_OR_RETURN(auto parsed, ParseConfig(config_json));
  const planner::ModelConfig& config = parsed.first;
  const planner::Family family = parsed.second;
  HOIST_ASSIGN_OR_RETURN(const Format format, FormatOf(config, family));
  std::vector<TensorSpec> out;
  Status status = Status::Ok();
  planner::ForEachImpliedTensor(config, family, [&](const std::string& name, std::string_view) {
    status = AddImplied(config, family, format, name, &out);
    return status.ok();
  });
  HOIST_RETURN_IF_ERROR(status);
  return out;
}

}  // namespace hoist::tools
