#include "planner/rules.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <unordered_map>
#include <utility>

namespace hoist::planner {
namespace {

// Which families a row applies to (bit per Family).
constexpr unsigned Bit(Family f) { return 1u << static_cast<unsigned>(f); }
constexpr unsigned kLlama = Bit(Family::kLlama);
constexpr unsigned kQwen2 = Bit(Family::kQwen2);
constexpr unsigned kQwen3 = Bit(Family::kQwen3);
constexpr unsigned kQwen3Moe = Bit(Family::kQwen3Moe);
constexpr unsigned kDeepseek = Bit(Family::kDeepseekV3);
constexpr unsigned kGqa = kLlama | kQwen2 | kQwen3 | kQwen3Moe;  // q/k/v/o attention
constexpr unsigned kAll = kGqa | kDeepseek;
constexpr unsigned kMoe = kQwen3Moe | kDeepseek;
constexpr int kFamilies = 5;

// A dimension config.json determines.
enum class Dim : std::uint8_t {
  kNone,     // no such dimension (1-D tensor)
  kH,        // hidden_size
  kQ,        // num_attention_heads * head_dim
  kKv,       // num_key_value_heads * head_dim
  kI,        // intermediate_size
  kMoeI,     // moe_intermediate_size
  kSharedI,  // moe_intermediate_size * n_shared_experts
  kV,        // vocab_size
  kE,        // num_experts
  kHeadDim,  // head_dim
  kQLora,    // q_lora_rank
  kKvLora,   // kv_lora_rank
  kKvA,      // kv_lora_rank + qk_rope_head_dim
  kQB,       // num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)
  kKvB,      // num_attention_heads * (qk_nope_head_dim + v_head_dim)
  kOIn,      // num_attention_heads * v_head_dim
};

struct Row {
  unsigned families;
  const char* pattern;  // dotted, {L} layer, {E} expert
  const char* params;   // accepted last components, comma-separated
  Role role;            // of X.weight
  Dim d0;
  Dim d1;  // kNone: 1-D weight
  Fusion fusion = Fusion::kNone;
  const char* fused = nullptr;  // template: {L} layer, {P} parameter
  int slot = 0;
  int slots = 1;
  bool fuse_needs_q_lora = false;  // fused only when config.q_lora_rank > 0
  bool skip_if_tied = false;       // lm_head with tie_word_embeddings
};

constexpr const char* kWeight = "weight";
constexpr const char* kWeightScale = "weight,weight_scale_inv";
constexpr const char* kAllParams = "weight,bias,weight_scale_inv";

// THE TABLE. One row per tensor kind; a family is the set of rows carrying its bit.
const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = {
      // Embeddings, final norm, per-layer norms: every family.
      {kAll, "model.embed_tokens", kWeight, Role::kVocab, Dim::kV, Dim::kH},
      {kAll, "lm_head", kWeight, Role::kVocab, Dim::kV, Dim::kH, Fusion::kNone, nullptr, 0, 1,
       false, /*skip_if_tied=*/true},
      {kAll, "model.norm", kWeight, Role::kReplicated, Dim::kH, Dim::kNone},
      {kAll, "model.layers.{L}.input_layernorm", kWeight, Role::kReplicated, Dim::kH, Dim::kNone},
      {kAll, "model.layers.{L}.post_attention_layernorm", kWeight, Role::kReplicated, Dim::kH,
       Dim::kNone},

      // GQA attention (Llama, Qwen2 with q/k/v biases, Qwen3 with q_norm/k_norm, Qwen3-MoE).
      {kGqa, "model.layers.{L}.self_attn.q_proj", kAllParams, Role::kColumn, Dim::kQ, Dim::kH,
       Fusion::kConcat, "model.layers.{L}.self_attn.qkv_proj.{P}", 0, 3},
      {kGqa, "model.layers.{L}.self_attn.k_proj", kAllParams, Role::kKvHeads, Dim::kKv, Dim::kH,
       Fusion::kConcat, "model.layers.{L}.self_attn.qkv_proj.{P}", 1, 3},
      {kGqa, "model.layers.{L}.self_attn.v_proj", kAllParams, Role::kKvHeads, Dim::kKv, Dim::kH,
       Fusion::kConcat, "model.layers.{L}.self_attn.qkv_proj.{P}", 2, 3},
      {kGqa, "model.layers.{L}.self_attn.o_proj", kAllParams, Role::kRow, Dim::kH, Dim::kQ},
      {kQwen3 | kQwen3Moe, "model.layers.{L}.self_attn.q_norm", kWeight, Role::kReplicated,
       Dim::kHeadDim, Dim::kNone},
      {kQwen3 | kQwen3Moe, "model.layers.{L}.self_attn.k_norm", kWeight, Role::kReplicated,
       Dim::kHeadDim, Dim::kNone},

      // DeepSeek MLA.
      {kDeepseek, "model.layers.{L}.self_attn.q_a_proj", kWeightScale, Role::kReplicated,
       Dim::kQLora, Dim::kH, Fusion::kConcat, "model.layers.{L}.self_attn.fused_qkv_a_proj.{P}", 0,
       2, /*fuse_needs_q_lora=*/true},
      {kDeepseek, "model.layers.{L}.self_attn.kv_a_proj_with_mqa", kWeightScale, Role::kReplicated,
       Dim::kKvA, Dim::kH, Fusion::kConcat, "model.layers.{L}.self_attn.fused_qkv_a_proj.{P}", 1, 2,
       /*fuse_needs_q_lora=*/true},
      {kDeepseek, "model.layers.{L}.self_attn.q_a_layernorm", kWeight, Role::kReplicated,
       Dim::kQLora, Dim::kNone},
      {kDeepseek, "model.layers.{L}.self_attn.kv_a_layernorm", kWeight, Role::kReplicated,
       Dim::kKvLora, Dim::kNone},
      {kDeepseek, "model.layers.{L}.self_attn.q_b_proj", kWeightScale, Role::kColumn, Dim::kQB,
       Dim::kQLora},
      {kDeepseek, "model.layers.{L}.self_attn.q_proj", kWeightScale, Role::kColumn, Dim::kQB,
       Dim::kH},  // MLA without q_lora
      {kDeepseek, "model.layers.{L}.self_attn.kv_b_proj", kWeightScale, Role::kColumn, Dim::kKvB,
       Dim::kKvLora},
      {kDeepseek, "model.layers.{L}.self_attn.o_proj", kWeightScale, Role::kRow, Dim::kH,
       Dim::kOIn},

      // Dense MLP (dense families, Qwen3-MoE mlp_only_layers, DeepSeek first_k_dense layers).
      {kAll, "model.layers.{L}.mlp.gate_proj", kWeightScale, Role::kColumn, Dim::kI, Dim::kH,
       Fusion::kConcat, "model.layers.{L}.mlp.gate_up_proj.{P}", 0, 2},
      {kAll, "model.layers.{L}.mlp.up_proj", kWeightScale, Role::kColumn, Dim::kI, Dim::kH,
       Fusion::kConcat, "model.layers.{L}.mlp.gate_up_proj.{P}", 1, 2},
      {kAll, "model.layers.{L}.mlp.down_proj", kWeightScale, Role::kRow, Dim::kH, Dim::kI},

      // Mixture of experts: router, routed experts, DeepSeek shared experts.
      {kMoe, "model.layers.{L}.mlp.gate", "weight,e_score_correction_bias", Role::kRouter, Dim::kE,
       Dim::kH},
      {kMoe, "model.layers.{L}.mlp.experts.{E}.gate_proj", kWeightScale, Role::kExpertGate,
       Dim::kMoeI, Dim::kH, Fusion::kExpertStack, "model.layers.{L}.mlp.experts.w13_{P}", 0, 2},
      {kMoe, "model.layers.{L}.mlp.experts.{E}.up_proj", kWeightScale, Role::kExpertUp, Dim::kMoeI,
       Dim::kH, Fusion::kExpertStack, "model.layers.{L}.mlp.experts.w13_{P}", 1, 2},
      {kMoe, "model.layers.{L}.mlp.experts.{E}.down_proj", kWeightScale, Role::kExpertDown, Dim::kH,
       Dim::kMoeI, Fusion::kExpertStack, "model.layers.{L}.mlp.experts.w2_{P}", 0, 1},
      {kDeepseek, "model.layers.{L}.mlp.shared_experts.gate_proj", kWeightScale, Role::kColumn,
       Dim::kSharedI, Dim::kH, Fusion::kConcat,
       "model.layers.{L}.mlp.shared_experts.gate_up_proj.{P}", 0, 2},
      {kDeepseek, "model.layers.{L}.mlp.shared_experts.up_proj", kWeightScale, Role::kColumn,
       Dim::kSharedI, Dim::kH, Fusion::kConcat,
       "model.layers.{L}.mlp.shared_experts.gate_up_proj.{P}", 1, 2},
      {kDeepseek, "model.layers.{L}.mlp.shared_experts.down_proj", kWeightScale, Role::kRow,
       Dim::kH, Dim::kSharedI},
  };
  return rows;
}

// Families whose checkpoints carry extra layers past num_hidden_layers that the engine does not
// load (DeepSeek-V3's multi-token-prediction layer), as vLLM skips them.
constexpr unsigned kSkipsExtraLayers = kDeepseek;

enum class Slot : std::uint8_t { kLayer, kExpert };

struct Compiled {
  const Row* row = nullptr;
  Param param = Param::kWeight;
  std::string param_name;
  std::vector<Slot> placeholders;  // numeric components in order
  bool scalable = false;           // the row lists weight_scale_inv
  LayerMlp mlp = LayerMlp::kAny;   // the kind of MLP the row's tensor belongs to
};

// A per-layer MLP row's kind, from its pattern: the router and (shared) experts are sparse,
// the other mlp.* rows dense.
LayerMlp MlpPartOf(std::string_view pattern) {
  constexpr std::string_view kMlp = "model.layers.{L}.mlp.";
  if (pattern.substr(0, kMlp.size()) != kMlp) return LayerMlp::kAny;
  const std::string_view rest = pattern.substr(kMlp.size());
  if (rest == "gate" || rest.substr(0, 8) == "experts." ||
      rest.substr(0, 15) == "shared_experts.") {
    return LayerMlp::kSparse;
  }
  return LayerMlp::kDense;
}

using Table = std::unordered_map<std::string, Compiled>;

struct Tables_ {
  std::array<Table, 5> by_family;
  std::string duplicates;  // "family: pattern a / pattern b; ..."
};

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

Param ParamOf(std::string_view p) {
  if (p == "weight") return Param::kWeight;
  if (p == "bias") return Param::kBias;
  if (p == "weight_scale_inv") return Param::kScale;
  return Param::kOther;
}

// Compiles the rows of every family once: canonical name ('#' for numbers) -> row + parameter.
const Tables_& CompiledTables() {
  static const Tables_ tables = [] {
    Tables_ out;
    auto& t = out.by_family;
    for (const Row& row : Rows()) {
      std::string key;
      std::vector<Slot> placeholders;
      for (std::string_view part : Split(row.pattern, '.')) {
        if (!key.empty()) key += '.';
        if (part == "{L}") {
          key += '#';
          placeholders.push_back(Slot::kLayer);
        } else if (part == "{E}") {
          key += '#';
          placeholders.push_back(Slot::kExpert);
        } else {
          key += part;
        }
      }
      for (std::string_view p : Split(row.params, ',')) {
        const bool scalable =
            std::string_view(row.params).find("weight_scale_inv") != std::string_view::npos;
        Compiled c{&row,         ParamOf(p), std::string(p),
                   placeholders, scalable,   MlpPartOf(row.pattern)};
        for (int f = 0; f < kFamilies; ++f) {
          if (!(row.families & (1u << f))) continue;
          auto [it, inserted] = t[f].emplace(key + "." + std::string(p), c);
          if (!inserted) {
            out.duplicates += std::string(FamilyName(static_cast<Family>(f))) + ": " +
                              it->second.row->pattern + " / " + row.pattern + "; ";
          }
        }
      }
    }
    return out;
  }();
  return tables;
}

struct DimValue {
  std::uint64_t value = 0;
  std::string how;  // "num_key_value_heads 8 x head_dim 128"
};

DimValue Resolve(Dim d, const ModelConfig& c) {
  auto one = [](const char* name, std::int64_t v) {
    return DimValue{static_cast<std::uint64_t>(v < 0 ? 0 : v),
                    std::string(name) + " " + std::to_string(v)};
  };
  auto prod = [](const char* a, std::int64_t va, const char* b, std::int64_t vb) {
    std::int64_t v = va * vb;
    return DimValue{
        static_cast<std::uint64_t>(v < 0 ? 0 : v),
        std::string(a) + " " + std::to_string(va) + " x " + b + " " + std::to_string(vb)};
  };
  switch (d) {
    case Dim::kNone:
      return {};
    case Dim::kH:
      return one("hidden_size", c.hidden_size);
    case Dim::kQ:
      return prod("num_attention_heads", c.num_attention_heads, "head_dim", c.head_dim);
    case Dim::kKv:
      return prod("num_key_value_heads", c.num_key_value_heads, "head_dim", c.head_dim);
    case Dim::kI:
      return one("intermediate_size", c.intermediate_size);
    case Dim::kMoeI:
      return one("moe_intermediate_size", c.moe_intermediate_size);
    case Dim::kSharedI:
      return prod("moe_intermediate_size", c.moe_intermediate_size, "n_shared_experts",
                  c.n_shared_experts);
    case Dim::kV:
      return one("vocab_size", c.vocab_size);
    case Dim::kE:
      return one("num_experts", c.num_experts);
    case Dim::kHeadDim:
      return one("head_dim", c.head_dim);
    case Dim::kQLora:
      return one("q_lora_rank", c.q_lora_rank);
    case Dim::kKvLora:
      return one("kv_lora_rank", c.kv_lora_rank);
    case Dim::kKvA: {
      std::int64_t v = c.kv_lora_rank + c.qk_rope_head_dim;
      return {static_cast<std::uint64_t>(v < 0 ? 0 : v),
              "kv_lora_rank " + std::to_string(c.kv_lora_rank) + " + qk_rope_head_dim " +
                  std::to_string(c.qk_rope_head_dim)};
    }
    case Dim::kQB: {
      std::int64_t v = c.num_attention_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
      return {static_cast<std::uint64_t>(v < 0 ? 0 : v),
              "num_attention_heads " + std::to_string(c.num_attention_heads) +
                  " x (qk_nope_head_dim " + std::to_string(c.qk_nope_head_dim) +
                  " + qk_rope_head_dim " + std::to_string(c.qk_rope_head_dim) + ")"};
    }
    case Dim::kKvB: {
      std::int64_t v = c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim);
      return {static_cast<std::uint64_t>(v < 0 ? 0 : v),
              "num_attention_heads " + std::to_string(c.num_attention_heads) +
                  " x (qk_nope_head_dim " + std::to_string(c.qk_nope_head_dim) + " + v_head_dim " +
                  std::to_string(c.v_head_dim) + ")"};
    }
    case Dim::kOIn:
      return prod("num_attention_heads", c.num_attention_heads, "v_head_dim", c.v_head_dim);
  }
  return {};
}

std::uint64_t CeilDiv(std::uint64_t a, std::uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

std::string Instantiate(std::string_view tmpl, int layer, std::string_view param) {
  std::string out;
  out.reserve(tmpl.size() + 16);
  for (std::size_t i = 0; i < tmpl.size();) {
    if (tmpl.compare(i, 3, "{L}") == 0) {
      out += std::to_string(layer);
      i += 3;
    } else if (tmpl.compare(i, 3, "{P}") == 0) {
      out += param;
      i += 3;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

// Canonicalises a split name: numeric components -> '#', numbers collected in order.
std::string CanonicalKey(const std::vector<std::string_view>& parts,
                         std::vector<std::int64_t>* numbers) {
  std::string key;
  for (std::string_view part : parts) {
    if (!key.empty()) key += '.';
    if (AllDigits(part) && part.size() <= 9) {
      std::int64_t v = 0;
      std::from_chars(part.data(), part.data() + part.size(), v);
      numbers->push_back(v);
      key += '#';
    } else {
      key += part;
    }
  }
  return key;
}

std::string Where(std::string_view name, std::string_view file_label) {
  std::string s = "tensor '" + std::string(name) + "'";
  if (!file_label.empty()) s += " in " + std::string(file_label);
  return s;
}

std::string IntList(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Why config.json gives Qwen3-MoE layers the MLP it does, for messages.
std::string SparseRule(const ModelConfig& c) {
  return "num_experts " + std::to_string(c.num_experts) + ", decoder_sparse_step " +
         std::to_string(c.decoder_sparse_step) + ", mlp_only_layers " + IntList(c.mlp_only_layers) +
         "; vLLM and transformers build experts where num_experts > 0, the layer is not in "
         "mlp_only_layers and (layer + 1) % decoder_sparse_step == 0";
}

// The tensor of `part` at `layer` against the MLP config.json gives that layer.
Status CheckLayerMlp(const ModelConfig& config, Family family, int layer, LayerMlp part,
                     std::string_view name, std::string_view file_label) {
  if (part == LayerMlp::kAny || layer < 0) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(LayerMlp want, LayerMlpOf(config, family, layer));
  if (want == LayerMlp::kAny || want == part) return Status::Ok();
  const bool sparse = want == LayerMlp::kSparse;
  return Status::Corrupt(
      Where(name, file_label) + ": " + (sparse ? "a dense-MLP" : "a mixture-of-experts") +
      " tensor, but config.json makes layer " + std::to_string(layer) + " a " +
      (sparse ? "sparse MoE" : "dense-MLP") + " layer (" + SparseRule(config) + ")");
}

}  // namespace

std::string_view FamilyName(Family family) {
  switch (family) {
    case Family::kLlama:
      return "llama";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen3:
      return "qwen3";
    case Family::kQwen3Moe:
      return "qwen3_moe";
    case Family::kDeepseekV3:
      return "deepseek_v3";
  }
  return "unknown";
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kColumn:
      return "column";
    case Role::kRow:
      return "row";
    case Role::kKvHeads:
      return "kv-heads";
    case Role::kVocab:
      return "vocab";
    case Role::kReplicated:
      return "replicated";
    case Role::kRouter:
      return "router";
    case Role::kExpertGate:
      return "expert-gate";
    case Role::kExpertUp:
      return "expert-up";
    case Role::kExpertDown:
      return "expert-down";
    case Role::kSkip:
      return "skip";
  }
  return "unknown";
}

Result<Family> FamilyOf(const ModelConfig& config) {
  const std::string& t = config.model_type;
  if (t == "llama" || t == "mistral") return Family::kLlama;
  if (t == "qwen2") return Family::kQwen2;
  if (t == "qwen3") return Family::kQwen3;
  if (t == "qwen3_moe") return Family::kQwen3Moe;
  if (t == "deepseek_v3") return Family::kDeepseekV3;
  return Status::Unsupported("config.json model_type '" + t +
                             "' has no family rules (supported: llama, mistral, qwen2, qwen3, "
                             "qwen3_moe, deepseek_v3)");
}

Result<LayerMlp> LayerMlpOf(const ModelConfig& config, Family family, int layer) {
  if (family != Family::kQwen3Moe) return LayerMlp::kAny;
  if (config.num_experts <= 0) return LayerMlp::kDense;
  if (config.decoder_sparse_step < 1) {
    return Status::Corrupt(
        "config.json: decoder_sparse_step " + std::to_string(config.decoder_sparse_step) +
        " must be at least 1 for a qwen3_moe with experts (vLLM and transformers take layer L as "
        "sparse when (L + 1) % decoder_sparse_step == 0)");
  }
  const auto& only = config.mlp_only_layers;
  if (std::find(only.begin(), only.end(), layer) != only.end()) return LayerMlp::kDense;
  return (layer + 1) % config.decoder_sparse_step == 0 ? LayerMlp::kSparse : LayerMlp::kDense;
}

BlockSize BlockSizeOf(const ModelConfig& config) {
  if (config.weight_block_size.size() != 2 || config.weight_block_size[0] <= 0 ||
      config.weight_block_size[1] <= 0) {
    return {};
  }
  return {static_cast<std::uint64_t>(config.weight_block_size[0]),
          static_cast<std::uint64_t>(config.weight_block_size[1])};
}

Status ValidateRuleTable() {
  const std::string& dup = CompiledTables().duplicates;
  if (dup.empty()) return Status::Ok();
  return Status::Internal("family rule table has two rows for one name: " + dup);
}

std::string ShapeString(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Layers past num_hidden_layers: DeepSeek's MTP layer is skipped (true), elsewhere an error.
Result<bool> SkipsExtraLayer(const ModelConfig& config, Family family, std::string_view name,
                             const std::vector<std::string_view>& parts,
                             const std::vector<std::int64_t>& numbers, std::string_view file_label,
                             TensorRule* rule) {
  if (parts.size() <= 3 || parts[0] != "model" || parts[1] != "layers" || !AllDigits(parts[2])) {
    return false;
  }
  const std::int64_t layer = numbers.empty() ? 0 : numbers[0];
  if (parts[2].size() <= 9 && layer < config.num_hidden_layers) return false;
  if (kSkipsExtraLayers & Bit(family)) {
    rule->role = Role::kSkip;
    rule->layer = static_cast<int>(parts[2].size() > 9 ? -1 : layer);
    return true;
  }
  return Status::Corrupt(Where(name, file_label) + ": layer " + std::string(parts[2]) +
                         " is out of range: config.json num_hidden_layers is " +
                         std::to_string(config.num_hidden_layers));
}

// The shape config.json implies for this parameter (rule->expected), checked against `shape`.
Status CheckShape(const ModelConfig& config, const Compiled& c, std::string_view name,
                  const std::vector<std::uint64_t>& shape, std::string_view file_label,
                  TensorRule* rule) {
  const Row& row = *c.row;
  DimValue d0 = Resolve(row.d0, config);
  DimValue d1 = Resolve(row.d1, config);
  std::string how;
  if (c.param == Param::kScale) {
    BlockSize block = BlockSizeOf(config);
    if (block.rows == 0) {
      return Status::Corrupt(
          Where(name, file_label) +
          ": an FP8 block scale, but config.json has no quantization_config.weight_block_size");
    }
    rule->expected = {CeilDiv(d0.value, block.rows), CeilDiv(d1.value, block.cols)};
    how = "ceil((" + d0.how + ") / " + std::to_string(block.rows) + "), ceil((" + d1.how + ") / " +
          std::to_string(block.cols) + ")";
  } else if (c.param == Param::kWeight && row.d1 != Dim::kNone) {
    rule->expected = {d0.value, d1.value};
    how = d0.how + ", " + d1.how;
  } else {
    rule->expected = {d0.value};
    how = d0.how;
  }
  if (shape == rule->expected) return Status::Ok();
  return Status::Corrupt(Where(name, file_label) + ": shape " + ShapeString(shape) +
                         " disagrees with config.json: expected " + ShapeString(rule->expected) +
                         " (" + how + ")");
}

}  // namespace

Result<TensorRule> ClassifyTensor(const ModelConfig& config, Family family, std::string_view name,
                                  const std::vector<std::uint64_t>& shape,
                                  std::string_view file_label) {
  std::vector<std::string_view> parts = Split(name, '.');
  std::vector<std::int64_t> numbers;
  const std::string key = CanonicalKey(parts, &numbers);

  TensorRule rule;
  HOIST_ASSIGN_OR_RETURN(const bool extra,
                         SkipsExtraLayer(config, family, name, parts, numbers, file_label, &rule));
  if (extra) return rule;

  const Table& table = CompiledTables().by_family[static_cast<std::size_t>(family)];
  auto it = table.find(key);
  if (it == table.end()) {
    return Status::NotFound(Where(name, file_label) + ": no " + std::string(FamilyName(family)) +
                            " rule matches this tensor name (pattern key '" + key + "')");
  }
  const Compiled& c = it->second;
  const Row& row = *c.row;
  rule.pattern = row.pattern;
  rule.param = c.param;
  rule.scalable = c.scalable;
  for (std::size_t i = 0; i < c.placeholders.size() && i < numbers.size(); ++i) {
    if (c.placeholders[i] == Slot::kLayer) rule.layer = static_cast<int>(numbers[i]);
    if (c.placeholders[i] == Slot::kExpert) rule.expert = static_cast<int>(numbers[i]);
  }
  HOIST_RETURN_IF_ERROR(CheckLayerMlp(config, family, rule.layer, c.mlp, name, file_label));
  if (rule.expert >= 0 && rule.expert >= config.num_experts) {
    return Status::Corrupt(Where(name, file_label) + ": expert " + std::to_string(rule.expert) +
                           " is out of range: config.json num_experts is " +
                           std::to_string(config.num_experts));
  }
  if (row.skip_if_tied && config.tie_word_embeddings) {
    rule.role = Role::kSkip;
    return rule;
  }

  // Role of this parameter.
  rule.role = row.role;
  if (c.param == Param::kBias && row.role == Role::kRow) rule.role = Role::kReplicated;
  HOIST_RETURN_IF_ERROR(CheckShape(config, c, name, shape, file_label, &rule));

  if (row.fusion != Fusion::kNone && !(row.fuse_needs_q_lora && config.q_lora_rank <= 0)) {
    rule.fusion = row.fusion;
    rule.fused_name = Instantiate(row.fused, rule.layer, c.param_name);
    rule.slot = row.slot;
    rule.slots = row.slots;
  }
  return rule;
}

bool HasRule(Family family, std::string_view name) {
  std::vector<std::int64_t> numbers;
  const Table& table = CompiledTables().by_family[static_cast<std::size_t>(family)];
  return table.count(CanonicalKey(Split(name, '.'), &numbers)) > 0;
}

bool LayerIsSparse(const ModelConfig& c, Family family, std::int64_t layer) {
  if (c.num_experts <= 0) return false;
  if (family == Family::kQwen3Moe) {
    const std::int64_t step = std::max<std::int64_t>(1, c.decoder_sparse_step);
    const auto& dense = c.mlp_only_layers;
    const bool listed = dense.size() < 16
                            ? std::find(dense.begin(), dense.end(), layer) != dense.end()
                            : std::binary_search(dense.begin(), dense.end(), layer);
    return !listed && (layer + 1) % step == 0;
  }
  if (family == Family::kDeepseekV3) {
    const std::int64_t freq = std::max<std::int64_t>(1, c.moe_layer_freq);
    return layer >= c.first_k_dense_replace && layer % freq == 0;
  }
  return false;
}

namespace {

// Why each kind of tensor is implied, built once per ForEachImpliedTensor call.
struct Reasons {
  std::string family, layers, experts, shared, q_lora, tied, bias, topk;
};

Reasons MakeReasons(const ModelConfig& c, Family family) {
  Reasons r;
  r.family = "model_type = " + std::string(FamilyName(family));
  r.layers = "num_hidden_layers = " + std::to_string(c.num_hidden_layers);
  r.experts = std::string(family == Family::kDeepseekV3 ? "n_routed_experts" : "num_experts") +
              " = " + std::to_string(c.num_experts);
  r.shared = "n_shared_experts = " + std::to_string(c.n_shared_experts);
  r.q_lora = "q_lora_rank = " + std::to_string(c.q_lora_rank);
  r.tied = "tie_word_embeddings = false";
  r.bias = family == Family::kQwen2 ? r.family : "attention_bias = true";
  r.topk = "topk_method = " + c.topk_method;
  return r;
}

// Walks the implied names, stopping for good once the callback returns false.
class Walker {
 public:
  Walker(const ModelConfig& c, Family family, const ImpliedFn& fn)
      : c_(c), family_(family), fn_(fn), why_(MakeReasons(c, family)) {}
  bool stopped() const { return stopped_; }

  void Embedding() { Emit("model.embed_tokens.weight", {}, {}, why_.family); }
  void Head() {
    Emit("model.norm.weight", {}, {}, why_.family);
    if (!c_.tie_word_embeddings) Emit("lm_head.weight", {}, {}, why_.tied);
  }

  // Layer l's tensors except the routed experts.
  void Layer(std::int64_t l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Emit(p, "input_layernorm", ".weight", why_.layers);
    Attention(p);
    Emit(p, "post_attention_layernorm", ".weight", why_.layers);
    if (!LayerIsSparse(c_, family_, l)) {
      Mlp(p + "mlp.", why_.layers);
      return;
    }
    Emit(p, "mlp.gate", ".weight", why_.experts);
    if (family_ == Family::kDeepseekV3 && c_.topk_method == "noaux_tc") {
      Emit(p, "mlp.gate", ".e_score_correction_bias", why_.topk);
    }
    if (family_ == Family::kDeepseekV3 && c_.n_shared_experts > 0) {
      Mlp(p + "mlp.shared_experts.", why_.shared);
    }
  }

  // Routed expert e of layer l (nothing for a dense layer or an expert out of range).
  void Expert(std::int64_t l, std::int64_t e) {
    if (l < 0 || l >= c_.num_hidden_layers || e < 0 || e >= c_.num_experts ||
        !LayerIsSparse(c_, family_, l)) {
      return;
    }
    Mlp("model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".",
        why_.experts);
  }

 private:
  // Calls fn with prefix + part + param, built in one reused buffer.
  void Emit(std::string_view prefix, std::string_view part, std::string_view param,
            std::string_view because) {
    if (stopped_) return;
    name_.assign(prefix).append(part).append(param);
    if (!fn_(name_, because)) stopped_ = true;
  }
  void Mlp(const std::string& prefix, std::string_view because) {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      Emit(prefix, proj, ".weight", because);
    }
  }
  void Attention(const std::string& p) {
    const std::string a = p + "self_attn.";
    if (family_ == Family::kDeepseekV3) {
      if (c_.q_lora_rank > 0) {
        for (const char* t : {"q_a_proj", "q_a_layernorm", "q_b_proj"}) {
          Emit(a, t, ".weight", why_.q_lora);
        }
      } else {
        Emit(a, "q_proj", ".weight", why_.layers);
      }
      for (const char* t : {"kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj"}) {
        Emit(a, t, ".weight", why_.layers);
      }
      return;
    }
    const bool qkv_bias = family_ == Family::kQwen2 || c_.attention_bias;
    for (const char* t : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      Emit(a, t, ".weight", why_.layers);
      const bool bias = t[0] == 'o' ? family_ != Family::kQwen2 && c_.attention_bias : qkv_bias;
      if (bias) Emit(a, t, ".bias", why_.bias);
    }
    if (family_ == Family::kQwen3 || family_ == Family::kQwen3Moe) {
      Emit(a, "q_norm", ".weight", why_.family);
      Emit(a, "k_norm", ".weight", why_.family);
    }
  }

  const ModelConfig& c_;
  Family family_;
  const ImpliedFn& fn_;
  Reasons why_;
  std::string name_;
  bool stopped_ = false;
};

}  // namespace

void ForEachImpliedTensor(const ModelConfig& c, Family family, const ImpliedFn& fn,
                          ImpliedSlice slice) {
  Walker w(c, family, fn);
  switch (slice.part) {
    case ImpliedPart::kModel:
      w.Embedding();
      w.Head();
      return;
    case ImpliedPart::kLayer:
      if (slice.layer >= 0 && slice.layer < c.num_hidden_layers) w.Layer(slice.layer);
      return;
    case ImpliedPart::kExpert:
      w.Expert(slice.layer, slice.expert);
      return;
    case ImpliedPart::kAll:
      break;
  }
  w.Embedding();
  for (std::int64_t l = 0; l < c.num_hidden_layers && !w.stopped(); ++l) {
    w.Layer(l);
    if (!LayerIsSparse(c, family, l)) continue;
    for (std::int64_t e = 0; e < c.num_experts && !w.stopped(); ++e) w.Expert(l, e);
  }
  w.Head();
}

}  // namespace hoist::planner
