// Presets (config.json per family, HF key spellings) and the tensor list of a config.
// See tools/mkckpt.h for the contract. nlohmann::json exceptions are caught here and turned
// into Status; nothing throws out of these functions.
#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tools/mkckpt.h"

namespace hoist::tools {
namespace {

using ojson = nlohmann::ordered_json;

std::uint64_t DTypeBytes(const std::string& dtype) {
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F32") return 4;
  if (dtype == "F8_E4M3" || dtype == "U8" || dtype == "I8") return 1;
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

ojson DenseConfig(const DenseShape& s) {
  ojson c;
  if (s.model_type == "llama") {
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
  if (s.model_type == "qwen2") {  // Qwen2 has no head_dim key: hidden / heads.
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

struct Preset {
  std::string family;
  ojson config;
};

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
    return m;
  }();
  return *presets;
}

// Config accessors that name the key in their errors.
class Cfg {
 public:
  explicit Cfg(const nlohmann::json& j) : j_(j) {}

  Result<std::int64_t> Int(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      return Status::InvalidArgument(std::string("config.json: missing key '") + key + "'");
    }
    if (!it->is_number_integer()) {
      return Status::InvalidArgument(std::string("config.json: key '") + key +
                                     "' is not an integer");
    }
    std::int64_t v = it->get<std::int64_t>();
    if (v < 0) {
      return Status::InvalidArgument(std::string("config.json: key '") + key + "' is negative");
    }
    return v;
  }
  std::int64_t IntOr(const char* key, std::int64_t dflt) const {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_number_integer()) return dflt;
    return it->get<std::int64_t>();
  }
  bool BoolOr(const char* key, bool dflt) const {
    auto it = j_.find(key);
    if (it == j_.end() || !it->is_boolean()) return dflt;
    return it->get<bool>();
  }

 private:
  const nlohmann::json& j_;
};

class Lister {
 public:
  Lister(bool fp8, std::uint64_t bn, std::uint64_t bk) : fp8_(fp8), bn_(bn), bk_(bk) {}

  void Add(std::string name, std::string dtype, std::vector<std::uint64_t> shape) {
    out_.push_back({std::move(name), std::move(dtype), std::move(shape)});
  }
  // A linear layer inside a decoder layer: BF16, or FP8 with its F32 block scale.
  void Linear(const std::string& prefix, std::uint64_t n, std::uint64_t k) {
    if (!fp8_) {
      Add(prefix + ".weight", "BF16", {n, k});
      return;
    }
    Add(prefix + ".weight", "F8_E4M3", {n, k});
    Add(prefix + ".weight_scale_inv", "F32", {(n + bn_ - 1) / bn_, (k + bk_ - 1) / bk_});
  }
  void Mlp(const std::string& prefix, std::uint64_t inter, std::uint64_t hidden) {
    Linear(prefix + ".gate_proj", inter, hidden);
    Linear(prefix + ".up_proj", inter, hidden);
    Linear(prefix + ".down_proj", hidden, inter);
  }
  std::vector<TensorSpec> Take() { return std::move(out_); }

 private:
  bool fp8_;
  std::uint64_t bn_, bk_;
  std::vector<TensorSpec> out_;
};

Result<std::vector<TensorSpec>> ListFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("config.json: not a JSON object");
  Cfg c(j);
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) {
    return Status::InvalidArgument("config.json: missing string key 'model_type'");
  }
  const std::string model_type = mt->get<std::string>();
  static const std::set<std::string> kKnown = {"llama", "qwen2", "qwen3", "qwen3_moe",
                                               "deepseek_v3"};
  if (!kKnown.count(model_type)) {
    return Status::Unsupported("config.json: model_type '" + model_type +
                               "' is not one of llama, qwen2, qwen3, qwen3_moe, deepseek_v3");
  }
  HOIST_ASSIGN_OR_RETURN(const std::int64_t hidden, c.Int("hidden_size"));
  HOIST_ASSIGN_OR_RETURN(const std::int64_t layers, c.Int("num_hidden_layers"));
  HOIST_ASSIGN_OR_RETURN(const std::int64_t heads, c.Int("num_attention_heads"));
  HOIST_ASSIGN_OR_RETURN(const std::int64_t vocab, c.Int("vocab_size"));
  HOIST_ASSIGN_OR_RETURN(const std::int64_t inter, c.Int("intermediate_size"));
  if (hidden == 0 || heads == 0 || vocab == 0 || inter == 0) {
    return Status::InvalidArgument(
        "config.json: hidden_size, num_attention_heads, vocab_size and intermediate_size must "
        "be positive");
  }
  const std::int64_t kv_heads = c.IntOr("num_key_value_heads", heads);
  const bool tied = c.BoolOr("tie_word_embeddings", false);
  const std::uint64_t H = hidden, V = vocab;

  // FP8 block quantization (any family): quant_method fp8 with weight_block_size.
  bool fp8 = false;
  std::uint64_t bn = 0, bk = 0;
  auto qc = j.find("quantization_config");
  if (qc != j.end() && qc->is_object()) {
    auto qm = qc->find("quant_method");
    if (qm == qc->end() || !qm->is_string() || qm->get<std::string>() != "fp8") {
      return Status::Unsupported("config.json: quantization_config.quant_method must be 'fp8'");
    }
    auto bs = qc->find("weight_block_size");
    if (bs == qc->end() || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
        !(*bs)[1].is_number_integer() || (*bs)[0].get<std::int64_t>() <= 0 ||
        (*bs)[1].get<std::int64_t>() <= 0) {
      return Status::InvalidArgument(
          "config.json: quantization_config.weight_block_size must be two positive integers");
    }
    fp8 = true;
    bn = (*bs)[0].get<std::uint64_t>();
    bk = (*bs)[1].get<std::uint64_t>();
  }

  Lister l(fp8, bn, bk);
  l.Add("model.embed_tokens.weight", "BF16", {V, H});

  if (model_type == "deepseek_v3") {
    const std::int64_t q_lora = c.IntOr("q_lora_rank", 0);  // null -> plain q_proj
    HOIST_ASSIGN_OR_RETURN(const std::int64_t kv_lora, c.Int("kv_lora_rank"));
    HOIST_ASSIGN_OR_RETURN(const std::int64_t nope, c.Int("qk_nope_head_dim"));
    HOIST_ASSIGN_OR_RETURN(const std::int64_t rope, c.Int("qk_rope_head_dim"));
    HOIST_ASSIGN_OR_RETURN(const std::int64_t v_head, c.Int("v_head_dim"));
    const std::int64_t experts = c.IntOr("n_routed_experts", 0);
    const std::int64_t moe_inter = c.IntOr("moe_intermediate_size", 0);
    const std::int64_t shared = c.IntOr("n_shared_experts", 0);
    const std::int64_t first_dense = c.IntOr("first_k_dense_replace", 0);
    const std::int64_t freq = std::max<std::int64_t>(1, c.IntOr("moe_layer_freq", 1));
    if (experts > 0 && moe_inter <= 0) {
      return Status::InvalidArgument("config.json: n_routed_experts without moe_intermediate_size");
    }
    const std::uint64_t nh = heads;
    for (std::int64_t L = 0; L < layers; ++L) {
      const std::string p = "model.layers." + std::to_string(L) + ".";
      l.Add(p + "input_layernorm.weight", "BF16", {H});
      if (q_lora > 0) {
        l.Linear(p + "self_attn.q_a_proj", q_lora, H);
        l.Add(p + "self_attn.q_a_layernorm.weight", "BF16", {std::uint64_t(q_lora)});
        l.Linear(p + "self_attn.q_b_proj", nh * (nope + rope), q_lora);
      } else {
        l.Linear(p + "self_attn.q_proj", nh * (nope + rope), H);
      }
      l.Linear(p + "self_attn.kv_a_proj_with_mqa", kv_lora + rope, H);
      l.Add(p + "self_attn.kv_a_layernorm.weight", "BF16", {std::uint64_t(kv_lora)});
      l.Linear(p + "self_attn.kv_b_proj", nh * (nope + v_head), kv_lora);
      l.Linear(p + "self_attn.o_proj", H, nh * v_head);
      l.Add(p + "post_attention_layernorm.weight", "BF16", {H});
      const bool moe = experts > 0 && L >= first_dense && L % freq == 0;
      if (!moe) {
        l.Mlp(p + "mlp", inter, H);
        continue;
      }
      l.Add(p + "mlp.gate.weight", "BF16", {std::uint64_t(experts), H});
      l.Add(p + "mlp.gate.e_score_correction_bias", "F32", {std::uint64_t(experts)});
      if (shared > 0) l.Mlp(p + "mlp.shared_experts", shared * moe_inter, H);
      for (std::int64_t e = 0; e < experts; ++e) {
        l.Mlp(p + "mlp.experts." + std::to_string(e), moe_inter, H);
      }
    }
  } else {
    // Llama / Qwen2 / Qwen3 / Qwen3-MoE attention.
    std::int64_t head_dim = c.IntOr("head_dim", 0);
    if (model_type == "qwen2" || head_dim <= 0) {
      if (hidden % heads != 0) {
        return Status::InvalidArgument(
            "config.json: hidden_size is not a multiple of num_attention_heads and no head_dim");
      }
      head_dim = hidden / heads;
    }
    const bool qkv_bias = model_type == "qwen2" || c.BoolOr("attention_bias", false);
    const bool o_bias = model_type != "qwen2" && c.BoolOr("attention_bias", false);
    const bool qk_norm = model_type == "qwen3" || model_type == "qwen3_moe";
    const std::uint64_t hd = head_dim, qn = heads * hd, kvn = kv_heads * hd;
    std::int64_t experts = 0, moe_inter = 0, step = 1;
    std::set<std::int64_t> mlp_only;
    if (model_type == "qwen3_moe") {
      // transformers 5 saves num_experts as num_local_experts (Qwen3MoeConfig.attribute_map).
      experts = c.IntOr("num_experts", c.IntOr("num_local_experts", 0));
      if (c.IntOr("num_local_experts", experts) != experts) {
        return Status::InvalidArgument("config.json: num_experts disagrees with num_local_experts");
      }
      moe_inter = c.IntOr("moe_intermediate_size", 0);
      step = c.IntOr("decoder_sparse_step", 1);
      if (experts > 0 && step < 1) {  // vLLM and transformers take (L + 1) % step
        return Status::InvalidArgument("config.json: decoder_sparse_step must be at least 1");
      }
      auto mo = j.find("mlp_only_layers");
      if (mo != j.end() && mo->is_array()) {
        for (const auto& v : *mo) {
          if (!v.is_number_integer()) {
            return Status::InvalidArgument("config.json: mlp_only_layers holds a non-integer");
          }
          mlp_only.insert(v.get<std::int64_t>());
        }
      }
      if (experts > 0 && moe_inter <= 0) {
        return Status::InvalidArgument("config.json: num_experts without moe_intermediate_size");
      }
    }
    for (std::int64_t L = 0; L < layers; ++L) {
      const std::string p = "model.layers." + std::to_string(L) + ".";
      l.Add(p + "input_layernorm.weight", "BF16", {H});
      for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
        const std::uint64_t n = proj[0] == 'q' ? qn : kvn;
        l.Linear(p + "self_attn." + proj, n, H);
        if (qkv_bias) l.Add(p + "self_attn." + proj + ".bias", "BF16", {n});
      }
      l.Linear(p + "self_attn.o_proj", H, qn);
      if (o_bias) l.Add(p + "self_attn.o_proj.bias", "BF16", {H});
      if (qk_norm) {
        l.Add(p + "self_attn.q_norm.weight", "BF16", {hd});
        l.Add(p + "self_attn.k_norm.weight", "BF16", {hd});
      }
      l.Add(p + "post_attention_layernorm.weight", "BF16", {H});
      const bool sparse = experts > 0 && !mlp_only.count(L) && (L + 1) % step == 0;
      if (!sparse) {
        l.Mlp(p + "mlp", inter, H);
        continue;
      }
      l.Add(p + "mlp.gate.weight", "BF16", {std::uint64_t(experts), H});
      for (std::int64_t e = 0; e < experts; ++e) {
        l.Mlp(p + "mlp.experts." + std::to_string(e), moe_inter, H);
      }
    }
  }
  l.Add("model.norm.weight", "BF16", {H});
  if (!tied) l.Add("lm_head.weight", "BF16", {V, H});
  return l.Take();
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
  static const std::map<std::string, std::string> kTypes = {{"llama", "llama"},
                                                            {"qwen2", "qwen2"},
                                                            {"qwen3", "qwen3"},
                                                            {"qwen3-moe", "qwen3_moe"},
                                                            {"deepseek-v3", "deepseek_v3"}};
  auto it = kTypes.find(family);
  if (it == kTypes.end()) {
    return Status::InvalidArgument("unknown family '" + family +
                                   "' (known: qwen3, qwen2, qwen3-moe, deepseek-v3, llama)");
  }
  return it->second;
}

Result<std::vector<TensorSpec>> ListTensorSpecs(std::string_view config_json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(config_json);
    return ListFromJson(j);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("config.json: ") + e.what());
  }
}

}  // namespace hoist::tools
