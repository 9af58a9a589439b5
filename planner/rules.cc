#include "planner/rules.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <span>
#include <unordered_map>
#include <utility>

namespace hoist::planner {
namespace {

// THE FAMILIES: how config.json selects each one and what its layers are made of. The tensors
// each one holds are the rows below that carry its bit.
constexpr FamilyInfo kFamilies[kFamilyCount] = {
    {Family::kLlama, "llama", "LlamaForCausalLM,MistralForCausalLM", "llama,mistral",
     Attention::kGqa, Sparsity::kDense, SharedExperts::kNone, "", "", false, false},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM", "qwen2", Attention::kGqa, Sparsity::kDense,
     SharedExperts::kNone, "", "", false, false},
    {Family::kQwen3, "qwen3", "Qwen3ForCausalLM", "qwen3", Attention::kGqa, Sparsity::kDense,
     SharedExperts::kNone, "", "", false, false},
    {Family::kQwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM", "qwen3_moe", Attention::kGqa,
     Sparsity::kStep, SharedExperts::kNone, "num_experts", "moe_intermediate_size", false, false},
    {Family::kDeepseekV3, "deepseek_v3", "DeepseekV3ForCausalLM", "deepseek_v3,kimi_k2",
     Attention::kMla, Sparsity::kFirstK, SharedExperts::kDeepseek, "n_routed_experts",
     "moe_intermediate_size", false, true},
    {Family::kDeepseekV2, "deepseek_v2", "DeepseekV2ForCausalLM", "deepseek_v2", Attention::kMla,
     Sparsity::kFirstK, SharedExperts::kDeepseek, "n_routed_experts", "moe_intermediate_size",
     false, true},
    {Family::kGlmMoeDsa, "glm_moe_dsa", "GlmMoeDsaForCausalLM", "glm_moe_dsa", Attention::kMla,
     Sparsity::kFirstK, SharedExperts::kDeepseek, "n_routed_experts", "moe_intermediate_size",
     false, true},
    {Family::kMixtral, "mixtral", "MixtralForCausalLM", "mixtral", Attention::kGqa,
     Sparsity::kEvery, SharedExperts::kNone, "num_local_experts", "intermediate_size", false,
     false},
    {Family::kMinimaxM2, "minimax_m2", "MiniMaxM2ForCausalLM", "minimax_m2", Attention::kGqa,
     Sparsity::kEvery, SharedExperts::kNone, "num_local_experts", "intermediate_size", false, true},
    {Family::kQwen2Moe, "qwen2_moe", "Qwen2MoeForCausalLM", "qwen2_moe", Attention::kGqa,
     Sparsity::kStep, SharedExperts::kQwen, "num_experts", "moe_intermediate_size", false, false},
    {Family::kGlm4Moe, "glm4_moe", "Glm4MoeForCausalLM", "glm4_moe", Attention::kGqa,
     Sparsity::kFirstK, SharedExperts::kDeepseek, "n_routed_experts", "moe_intermediate_size",
     false, true},
    {Family::kGemma3, "gemma3_text", "Gemma3ForCausalLM", "gemma3_text", Attention::kGqa,
     Sparsity::kDense, SharedExperts::kNone, "", "", false, false},
    {Family::kPhi3, "phi3", "Phi3ForCausalLM", "phi3", Attention::kGqa, Sparsity::kDense,
     SharedExperts::kNone, "", "", false, false},
    {Family::kQwen3Next, "qwen3_next", "Qwen3NextForCausalLM", "qwen3_next", Attention::kGqa,
     Sparsity::kStep, SharedExperts::kQwen, "num_experts", "moe_intermediate_size", true, true},
    {Family::kQwen35, "qwen3_5", "Qwen3_5ForCausalLM", "qwen3_5_text,qwen3_5", Attention::kGqa,
     Sparsity::kDense, SharedExperts::kNone, "", "", true, true},
    {Family::kQwen35Moe, "qwen3_5_moe", "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text,qwen3_5_moe",
     Attention::kGqa, Sparsity::kStep, SharedExperts::kQwen, "num_experts", "moe_intermediate_size",
     true, true},
    {Family::kGptOss, "gpt_oss", "GptOssForCausalLM", "gpt_oss", Attention::kGqa, Sparsity::kEvery,
     SharedExperts::kNone, "num_local_experts", "intermediate_size", false, false},
    {Family::kLlama4, "llama4", "Llama4ForCausalLM", "llama4_text", Attention::kGqa,
     Sparsity::kStep, SharedExperts::kNone, "num_local_experts", "intermediate_size", false, false,
     "intermediate_size_mlp"},
    {Family::kDeepseekV4, "deepseek_v4", "DeepseekV4ForCausalLM", "deepseek_v4", Attention::kMla,
     Sparsity::kEvery, SharedExperts::kDeepseek, "n_routed_experts", "moe_intermediate_size", false,
     true, nullptr, /*experts_divide_tp=*/true},
};

// Which families a row applies to (bit per Family).
constexpr unsigned Bit(Family f) { return 1u << static_cast<unsigned>(f); }
constexpr unsigned kLlama = Bit(Family::kLlama);
constexpr unsigned kQwen2 = Bit(Family::kQwen2) | Bit(Family::kQwen2Moe);  // q/k/v biases always
constexpr unsigned kQwen3 = Bit(Family::kQwen3);
constexpr unsigned kQwen3Moe = Bit(Family::kQwen3Moe);
constexpr unsigned kMla =
    Bit(Family::kDeepseekV3) | Bit(Family::kDeepseekV2) | Bit(Family::kGlmMoeDsa);
constexpr unsigned kDsa = Bit(Family::kGlmMoeDsa);
constexpr unsigned kBlockSparse = Bit(Family::kMixtral) | Bit(Family::kMinimaxM2);
constexpr unsigned kMinimax = Bit(Family::kMinimaxM2);
constexpr unsigned kGlm4 = Bit(Family::kGlm4Moe);
constexpr unsigned kGemma3 = Bit(Family::kGemma3);
constexpr unsigned kPhi3 = Bit(Family::kPhi3);
constexpr unsigned kNext = Bit(Family::kQwen3Next);
constexpr unsigned kQwen35 = Bit(Family::kQwen35) | Bit(Family::kQwen35Moe);
constexpr unsigned kHybrid = kNext | kQwen35;  // gated full attention + linear attention
// q/k/v/o stored apart with vLLM's qkv_proj fusion; q of num_attention_heads x head_dim.
constexpr unsigned kGptOss = Bit(Family::kGptOss);
constexpr unsigned kLlama4 = Bit(Family::kLlama4);
constexpr unsigned kDsv4 = Bit(Family::kDeepseekV4);  // its own names: no row shared
constexpr unsigned kGqaBias = kLlama | kQwen3 | kQwen3Moe | kBlockSparse | kGlm4 | kGemma3 |
                              kGptOss | kLlama4;    // biases with attention_bias
constexpr unsigned kPlainQk = kGqaBias & ~kLlama4;  // q/k as stored in both layouts
constexpr unsigned kGqa = kGqaBias | kQwen2;
constexpr unsigned kAll = kGqa | kMla | kPhi3 | kHybrid;
constexpr unsigned kDenseMlp = kAll & ~kPhi3 & ~kLlama4;  // mlp.gate_proj / up_proj apart
// Routed experts under mlp.experts.<e>.{gate,up,down}_proj and the router mlp.gate.
constexpr unsigned kMlpMoe =
    kQwen3Moe | kMla | Bit(Family::kQwen2Moe) | kGlm4 | kNext | Bit(Family::kQwen35Moe);
constexpr unsigned kQwenShared = Bit(Family::kQwen2Moe) | kNext | Bit(Family::kQwen35Moe);
constexpr unsigned kDeepseekShared = kMla | kGlm4;

// A dimension config.json determines.
enum class Dim : std::uint8_t {
  kNone,      // no such dimension
  kOne,       // 1
  kH,         // hidden_size
  kQ,         // num_attention_heads * head_dim
  kQ2,        // 2 * num_attention_heads * head_dim (q and its output gate, per head)
  kKv,        // num_key_value_heads * head_dim
  kQkv,       // (num_attention_heads + 2 * num_key_value_heads) * head_dim (phi3 qkv_proj)
  kI,         // intermediate_size
  kI2,        // 2 * intermediate_size (phi3 gate_up_proj)
  kMoeI,      // moe_intermediate_size
  kSharedI,   // moe_intermediate_size * n_shared_experts
  kSharedEI,  // shared_expert_intermediate_size
  kV,         // vocab_size
  kE,         // num_experts
  kHeadDim,   // head_dim
  kQLora,     // q_lora_rank
  kKvLora,    // kv_lora_rank
  kKvA,       // kv_lora_rank + qk_rope_head_dim
  kQB,        // num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)
  kKvB,       // num_attention_heads * (qk_nope_head_dim + v_head_dim)
  kOIn,       // num_attention_heads * v_head_dim
  kIdxQ,      // index_n_heads * index_head_dim
  kIdxHeads,  // index_n_heads
  kIdxDim,    // index_head_dim
  kLinQkvz,   // 2 * key_dim + 2 * value_dim (key_dim = linear_num_key_heads x key_head_dim)
  kLinBa,     // 2 * linear_num_value_heads
  kLinQkv,    // 2 * key_dim + value_dim (conv1d channels, qwen3.5 in_proj_qkv)
  kLinNv,     // linear_num_value_heads
  kLinV,      // value_dim = linear_num_value_heads x linear_value_head_dim
  kLinDv,     // linear_value_head_dim
  kConvK,     // linear_conv_kernel_dim
  kHeads,     // num_attention_heads
  kH32,       // hidden_size / 32 (MXFP4 blocks along the hidden size)
  kI32,       // intermediate_size / 32
  kSixteen,   // 16 (bytes of an MXFP4 block of 32 values)
  kImlp,      // intermediate_size_mlp (Llama 4's dense layers)
  // DeepSeek-V4.
  kMixHc,        // (2 + hc_mult) x hc_mult: a hyper-connection's pre, post and residual mixes
  kHcH,          // hc_mult x hidden_size
  kHc,           // hc_mult
  kThree,        // 3
  kOGroupsRank,  // o_groups x o_lora_rank
  kQPerGroup,    // num_attention_heads x head_dim / o_groups
  kRatio,        // compress_ratios[L]
  kCoffHd,       // coff x head_dim, coff 2 at ratio 4 (overlapping windows), else 1
  kCoffIdx,      // coff x index_head_dim
  kTopK,         // num_experts_per_tok
};

// How dim 0 of a kParts row splits into parts (each column-split by tp).
enum class Parts : std::uint8_t {
  kNone,
  kQkv,     // [q, k, v]: q column, k and v by kv heads (phi3 qkv_proj)
  kTwo,     // two equal halves (phi3 gate_up_proj)
  kLinQkv,  // [q, k, v] of linear attention: key_dim, key_dim, value_dim
};

// When config.json implies a row's tensor (its first parameter; biases by Row::bias), which is
// also the kind of layer it belongs to (a tensor on the other kind of layer is an error).
enum class When : std::uint8_t {
  kNever,          // accepted, never implied
  kModel,          // model-level, always
  kUntied,         // lm_head: unless tie_word_embeddings (then skipped)
  kLayer,          // every layer
  kFamilyLayer,    // every layer, because of the model type (q/k norms, Qwen2's biases)
  kAttnBias,       // every (full-attention) layer with attention_bias
  kQkNorm,         // every layer with use_qk_norm
  kQLora,          // MLA with q_lora_rank
  kNoQLora,        // MLA without q_lora_rank
  kFullAttn,       // hybrid: full-attention layers
  kLinearAttn,     // hybrid: linear-attention layers
  kDense,          // dense-MLP layers
  kSparse,         // sparse layers
  kNoauxTc,        // sparse layers with topk_method noaux_tc
  kSharedExperts,  // sparse layers with n_shared_experts > 0
  kSharedExpert,   // sparse layers with shared_expert_intermediate_size > 0
  kExpert,         // each routed expert of a sparse layer
  kUnquantized,    // sparse layers of a checkpoint that is not MXFP4
  kMxfp4,          // sparse layers of an MXFP4 checkpoint (quant_method mxfp4)
  kBf16Sparse,     // sparse layers of a checkpoint with no quantization_config
  kQuantExpert,    // each routed expert of a sparse layer of a quantized checkpoint
  kCompressed,     // DeepSeek-V4: layers with compress_ratios[L] > 1 (a KV compressor)
  kIndexed,        // DeepSeek-V4: layers with compress_ratios[L] = 4 (and the indexer)
  kHashMoe,        // DeepSeek-V4: sparse layers L < num_hash_layers (routed by token id)
  kScoreMoe,       // DeepSeek-V4: other sparse layers, with topk_method noaux_tc
};

struct Row {
  unsigned families;
  const char* pattern;  // dotted, {L} layer, {E} expert
  const char* params;   // accepted last components, comma-separated; all but bias implied
  Role role;            // of X.weight
  Dim d0;
  Dim d1;  // kNone: 1-D weight
  When when;
  When bias = When::kNever;  // when X.bias is implied (params must list it)
  Fusion fusion = Fusion::kNone;
  const char* fused = nullptr;  // template: {L} layer, {P} parameter
  int slot = 0;
  int slots = 1;
  bool fuse_needs_q_lora = false;  // fused only when config.q_lora_rank > 0
  Parts parts = Parts::kNone;
  Dim d2 = Dim::kNone;  // a third dimension (conv1d's kernel)
  Dim d3 = Dim::kNone;
  // kExpertDim rows (TensorRule's fields of the same names).
  std::uint8_t split_dim = 0;
  std::uint8_t split_mul = 1;
  std::uint8_t split_div = 1;
  bool rank0_only = false;
  bool transposed = false;  // TensorRule::transposed
  bool halves = false;      // TensorRule::halves
  bool rotary = false;      // TensorRule::rotary_head_dim (head_dim) in the fused layout
  // Routed experts whose format follows config.json's expert_dtype (DeepSeek-V4): MXFP4
  // (QuantScheme::kMxfp4Experts) for "fp4" or absent, FP8 blocks for "fp8".
  bool fp4_experts = false;
};

// A kExpertDim row whose split dim holds [gate; up] halves.
constexpr Row Halves(Row r) {
  r.halves = true;
  return r;
}

// A q/k row whose fused output de-interleaves each head's rotary pairs (Llama 4).
constexpr Row Rotary(Row r) {
  r.rotary = true;
  return r;
}

// A routed-expert row in the format expert_dtype names (Row::fp4_experts).
constexpr Row Fp4(Row r) {
  r.fp4_experts = true;
  return r;
}

// A DeepSeek-V4 row: `fused` its vLLM parameter ({P}: the parameter; slots > 1 fuses it).
constexpr Row V4(const char* pattern, const char* params, Role role, Dim d0, Dim d1, When when,
                 const char* fused, int slot = 0, int slots = 1, When bias = When::kNever) {
  return Row{kDsv4, pattern, params, role, d0, d1, when, bias, Fusion::kConcat, fused, slot, slots};
}

// A kExpertDim row of gpt_oss: `param` of model.layers.{L}.mlp.experts, `fused` its vLLM name.
constexpr Row ExpertDim(const char* param, Dim d0, Dim d1, Dim d2, Dim d3, When when,
                        std::uint8_t dim, std::uint8_t mul, std::uint8_t div, const char* fused,
                        bool rank0_only = false, bool transposed = false,
                        unsigned families = Bit(Family::kGptOss),
                        const char* pattern = "model.layers.{L}.mlp.experts") {
  Row r{families, pattern, param, Role::kExpertDim, d0, d1, when};
  if (fused != nullptr) {
    r.fusion = Fusion::kConcat;
    r.fused = fused;
  }
  r.d2 = d2;
  r.d3 = d3;
  r.split_dim = dim;
  r.split_mul = mul;
  r.split_div = div;
  r.rank0_only = rank0_only;
  r.transposed = transposed;
  return r;
}

// The parameter names only the integer formats use (kQuantParams), accepted on every linear row.
constexpr const char* kGroupedParams[] = {"qweight",      "qzeros",        "scales",
                                          "g_idx",        "weight_packed", "weight_zero_point",
                                          "weight_g_idx", "weight_shape"};

constexpr const char* kWeight = "weight";
constexpr const char* kWeightScale = "weight,weight_scale_inv";
constexpr const char* kAllParams = "weight,bias,weight_scale_inv";
constexpr const char* kDsScale = "weight,scale";  // DeepSeek-V4: FP8 block scales are X.scale
constexpr const char* kQkv = "model.layers.{L}.self_attn.qkv_proj.{P}";
constexpr const char* kGateUp = "model.layers.{L}.mlp.gate_up_proj.{P}";
constexpr const char* kQkvz = "model.layers.{L}.linear_attn.in_proj_qkvz.{P}";
constexpr const char* kBa = "model.layers.{L}.linear_attn.in_proj_ba.{P}";

// THE TABLE. One row per tensor kind, in model order within a layer (the implied walk follows
// it); a family is the set of rows carrying its bit.
using R = Role;
using D = Dim;
using W = When;
using F = Fusion;
constexpr Row kRows[] = {
    {kAll, "model.embed_tokens", kWeight, R::kVocab, D::kV, D::kH, W::kModel},
    {kAll, "model.norm", kWeight, R::kReplicated, D::kH, D::kNone, W::kModel},
    {kAll, "lm_head", kWeight, R::kVocab, D::kV, D::kH, W::kUntied},
    {kAll, "model.layers.{L}.input_layernorm", kWeight, R::kReplicated, D::kH, D::kNone, W::kLayer},

    // GQA attention, q/k/v stored apart and fused into qkv_proj.
    {kPlainQk, "model.layers.{L}.self_attn.q_proj", kAllParams, R::kColumn, D::kQ, D::kH, W::kLayer,
     W::kAttnBias, F::kConcat, kQkv, 0, 3},
    {kPlainQk, "model.layers.{L}.self_attn.k_proj", kAllParams, R::kKvHeads, D::kKv, D::kH,
     W::kLayer, W::kAttnBias, F::kConcat, kQkv, 1, 3},
    Rotary({kLlama4, "model.layers.{L}.self_attn.q_proj", kAllParams, R::kColumn, D::kQ, D::kH,
            W::kLayer, W::kAttnBias, F::kConcat, kQkv, 0, 3}),
    Rotary({kLlama4, "model.layers.{L}.self_attn.k_proj", kAllParams, R::kKvHeads, D::kKv, D::kH,
            W::kLayer, W::kAttnBias, F::kConcat, kQkv, 1, 3}),
    {kGqaBias, "model.layers.{L}.self_attn.v_proj", kAllParams, R::kKvHeads, D::kKv, D::kH,
     W::kLayer, W::kAttnBias, F::kConcat, kQkv, 2, 3},
    {kQwen2, "model.layers.{L}.self_attn.q_proj", kAllParams, R::kColumn, D::kQ, D::kH, W::kLayer,
     W::kFamilyLayer, F::kConcat, kQkv, 0, 3},
    {kQwen2, "model.layers.{L}.self_attn.k_proj", kAllParams, R::kKvHeads, D::kKv, D::kH, W::kLayer,
     W::kFamilyLayer, F::kConcat, kQkv, 1, 3},
    {kQwen2, "model.layers.{L}.self_attn.v_proj", kAllParams, R::kKvHeads, D::kKv, D::kH, W::kLayer,
     W::kFamilyLayer, F::kConcat, kQkv, 2, 3},
    // Gated attention of the hybrid families: q carries its output gate (per head).
    {kHybrid, "model.layers.{L}.self_attn.q_proj", kAllParams, R::kColumn, D::kQ2, D::kH,
     W::kFullAttn, W::kAttnBias, F::kConcat, kQkv, 0, 3},
    {kHybrid, "model.layers.{L}.self_attn.k_proj", kAllParams, R::kKvHeads, D::kKv, D::kH,
     W::kFullAttn, W::kAttnBias, F::kConcat, kQkv, 1, 3},
    {kHybrid, "model.layers.{L}.self_attn.v_proj", kAllParams, R::kKvHeads, D::kKv, D::kH,
     W::kFullAttn, W::kAttnBias, F::kConcat, kQkv, 2, 3},
    {kPhi3, "model.layers.{L}.self_attn.qkv_proj", kWeight, R::kParts, D::kQkv, D::kH, W::kLayer,
     W::kNever, F::kNone, nullptr, 0, 1, false, Parts::kQkv},
    {kGqaBias | kPhi3, "model.layers.{L}.self_attn.o_proj", kAllParams, R::kRow, D::kH, D::kQ,
     W::kLayer, W::kAttnBias},
    {kQwen2, "model.layers.{L}.self_attn.o_proj", kAllParams, R::kRow, D::kH, D::kQ, W::kLayer},
    {kHybrid, "model.layers.{L}.self_attn.o_proj", kAllParams, R::kRow, D::kH, D::kQ, W::kFullAttn,
     W::kAttnBias},
    {kQwen3 | kQwen3Moe | kGemma3, "model.layers.{L}.self_attn.q_norm", kWeight, R::kReplicated,
     D::kHeadDim, D::kNone, W::kFamilyLayer},
    {kQwen3 | kQwen3Moe | kGemma3, "model.layers.{L}.self_attn.k_norm", kWeight, R::kReplicated,
     D::kHeadDim, D::kNone, W::kFamilyLayer},
    {kHybrid, "model.layers.{L}.self_attn.q_norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone,
     W::kFullAttn},
    {kHybrid, "model.layers.{L}.self_attn.k_norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone,
     W::kFullAttn},
    {kGlm4, "model.layers.{L}.self_attn.q_norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone,
     W::kQkNorm},
    {kGlm4, "model.layers.{L}.self_attn.k_norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone,
     W::kQkNorm},
    // MiniMax-M2 normalises q and k over all heads at once: the norms split like q and k.
    {kMinimax, "model.layers.{L}.self_attn.q_norm", kWeight, R::kColumn, D::kQ, D::kNone,
     W::kFamilyLayer},
    {kMinimax, "model.layers.{L}.self_attn.k_norm", kWeight, R::kKvHeads, D::kKv, D::kNone,
     W::kFamilyLayer},

    // Linear attention (gated delta net) of the hybrid families. in_proj_qkvz and in_proj_ba
    // are grouped per key head on disk, so a contiguous split is vLLM's head-wise split.
    {kNext, "model.layers.{L}.linear_attn.in_proj_qkvz", kWeightScale, R::kColumn, D::kLinQkvz,
     D::kH, W::kLinearAttn},
    {kNext, "model.layers.{L}.linear_attn.in_proj_ba", kWeight, R::kColumn, D::kLinBa, D::kH,
     W::kLinearAttn},
    // Qwen3.5 stores them apart; vLLM fuses [q_t | k_t | v_t | z_t] and [b_t | a_t].
    {kQwen35, "model.layers.{L}.linear_attn.in_proj_qkv", kWeight, R::kParts, D::kLinQkv, D::kH,
     W::kLinearAttn, W::kNever, F::kConcat, kQkvz, 0, 2, false, Parts::kLinQkv},
    {kQwen35, "model.layers.{L}.linear_attn.in_proj_z", kWeight, R::kColumn, D::kLinV, D::kH,
     W::kLinearAttn, W::kNever, F::kConcat, kQkvz, 1, 2},
    {kQwen35, "model.layers.{L}.linear_attn.in_proj_b", kWeight, R::kColumn, D::kLinNv, D::kH,
     W::kLinearAttn, W::kNever, F::kConcat, kBa, 0, 2},
    {kQwen35, "model.layers.{L}.linear_attn.in_proj_a", kWeight, R::kColumn, D::kLinNv, D::kH,
     W::kLinearAttn, W::kNever, F::kConcat, kBa, 1, 2},
    {kHybrid, "model.layers.{L}.linear_attn.conv1d", kWeight, R::kParts, D::kLinQkv, D::kOne,
     W::kLinearAttn, W::kNever, F::kNone, nullptr, 0, 1, false, Parts::kLinQkv, D::kConvK},
    {kHybrid, "model.layers.{L}.linear_attn", "A_log,dt_bias", R::kColumn, D::kLinNv, D::kNone,
     W::kLinearAttn},
    {kHybrid, "model.layers.{L}.linear_attn.norm", kWeight, R::kReplicated, D::kLinDv, D::kNone,
     W::kLinearAttn},
    {kHybrid, "model.layers.{L}.linear_attn.out_proj", kWeightScale, R::kRow, D::kH, D::kLinV,
     W::kLinearAttn},

    // MLA (DeepSeek-V2/V3, Kimi-K2, GLM-5).
    {kMla, "model.layers.{L}.self_attn.q_a_proj", kWeightScale, R::kReplicated, D::kQLora, D::kH,
     W::kQLora, W::kNever, F::kConcat, "model.layers.{L}.self_attn.fused_qkv_a_proj.{P}", 0, 2,
     /*fuse_needs_q_lora=*/true},
    {kMla, "model.layers.{L}.self_attn.q_a_layernorm", kWeight, R::kReplicated, D::kQLora, D::kNone,
     W::kQLora},
    {kMla, "model.layers.{L}.self_attn.q_b_proj", kWeightScale, R::kColumn, D::kQB, D::kQLora,
     W::kQLora},
    {kMla, "model.layers.{L}.self_attn.q_proj", kWeightScale, R::kColumn, D::kQB, D::kH,
     W::kNoQLora},
    {kMla, "model.layers.{L}.self_attn.kv_a_proj_with_mqa", kWeightScale, R::kReplicated, D::kKvA,
     D::kH, W::kLayer, W::kNever, F::kConcat, "model.layers.{L}.self_attn.fused_qkv_a_proj.{P}", 1,
     2, /*fuse_needs_q_lora=*/true},
    {kMla, "model.layers.{L}.self_attn.kv_a_layernorm", kWeight, R::kReplicated, D::kKvLora,
     D::kNone, W::kLayer},
    {kMla, "model.layers.{L}.self_attn.kv_b_proj", kWeightScale, R::kColumn, D::kKvB, D::kKvLora,
     W::kLayer},
    {kMla, "model.layers.{L}.self_attn.o_proj", kWeightScale, R::kRow, D::kH, D::kOIn, W::kLayer},
    // DeepSeek sparse attention's indexer (GLM-5): replicated on every rank, as in vLLM, and
    // kept apart (vLLM fuses wk and weights_proj after dequantizing an FP8 wk).
    {kDsa, "model.layers.{L}.self_attn.indexer.wq_b", kWeightScale, R::kReplicated, D::kIdxQ,
     D::kQLora, W::kLayer},
    {kDsa, "model.layers.{L}.self_attn.indexer.wk", kWeightScale, R::kReplicated, D::kIdxDim, D::kH,
     W::kLayer},
    {kDsa, "model.layers.{L}.self_attn.indexer.k_norm", "weight,bias", R::kReplicated, D::kIdxDim,
     D::kNone, W::kLayer, W::kLayer},
    {kDsa, "model.layers.{L}.self_attn.indexer.weights_proj", kWeight, R::kReplicated, D::kIdxHeads,
     D::kH, W::kLayer},

    {kAll, "model.layers.{L}.post_attention_layernorm", kWeight, R::kReplicated, D::kH, D::kNone,
     W::kLayer},
    {kGemma3, "model.layers.{L}.pre_feedforward_layernorm", kWeight, R::kReplicated, D::kH,
     D::kNone, W::kLayer},
    {kGemma3, "model.layers.{L}.post_feedforward_layernorm", kWeight, R::kReplicated, D::kH,
     D::kNone, W::kLayer},

    // Dense MLP (dense families, mlp_only_layers, first_k_dense layers).
    {kDenseMlp, "model.layers.{L}.mlp.gate_proj", kWeightScale, R::kColumn, D::kI, D::kH, W::kDense,
     W::kNever, F::kConcat, kGateUp, 0, 2},
    {kDenseMlp, "model.layers.{L}.mlp.up_proj", kWeightScale, R::kColumn, D::kI, D::kH, W::kDense,
     W::kNever, F::kConcat, kGateUp, 1, 2},
    {kPhi3, "model.layers.{L}.mlp.gate_up_proj", kWeight, R::kParts, D::kI2, D::kH, W::kDense,
     W::kNever, F::kNone, nullptr, 0, 1, false, Parts::kTwo},
    {kDenseMlp | kPhi3, "model.layers.{L}.mlp.down_proj", kWeightScale, R::kRow, D::kH, D::kI,
     W::kDense},

    // Llama 4: feed_forward.*, dense layers of intermediate_size_mlp, MoE layers with a router, one
    // shared expert and every routed expert in one tensor per projection (gate and up halves of
    // gate_up_proj [E, H, 2I]; vLLM transposes them at load, and so does the fused layout).
    {kLlama4, "model.layers.{L}.feed_forward.gate_proj", kWeightScale, R::kColumn, D::kImlp, D::kH,
     W::kDense, W::kNever, F::kConcat, "model.layers.{L}.feed_forward.gate_up_proj.{P}", 0, 2},
    {kLlama4, "model.layers.{L}.feed_forward.up_proj", kWeightScale, R::kColumn, D::kImlp, D::kH,
     W::kDense, W::kNever, F::kConcat, "model.layers.{L}.feed_forward.gate_up_proj.{P}", 1, 2},
    {kLlama4, "model.layers.{L}.feed_forward.down_proj", kWeightScale, R::kRow, D::kH, D::kImlp,
     W::kDense},
    {kLlama4, "model.layers.{L}.feed_forward.router", kWeight, R::kRouter, D::kE, D::kH,
     W::kSparse},
    {kLlama4, "model.layers.{L}.feed_forward.shared_expert.gate_proj", kWeightScale, R::kColumn,
     D::kI, D::kH, W::kSparse, W::kNever, F::kConcat,
     "model.layers.{L}.feed_forward.shared_expert.gate_up_proj.{P}", 0, 2},
    {kLlama4, "model.layers.{L}.feed_forward.shared_expert.up_proj", kWeightScale, R::kColumn,
     D::kI, D::kH, W::kSparse, W::kNever, F::kConcat,
     "model.layers.{L}.feed_forward.shared_expert.gate_up_proj.{P}", 1, 2},
    {kLlama4, "model.layers.{L}.feed_forward.shared_expert.down_proj", kWeightScale, R::kRow, D::kH,
     D::kI, W::kSparse},
    // BF16 checkpoints keep every routed expert in one tensor a projection; quantized ones (FP8
    // exports) one tensor per expert, stacked as vLLM's w13 / w2.
    Halves(ExpertDim("gate_up_proj", D::kE, D::kH, D::kI2, D::kNone, W::kBf16Sparse, 2, 1, 1,
                     "model.layers.{L}.feed_forward.experts.w13_weight", false,
                     /*transposed=*/true, kLlama4, "model.layers.{L}.feed_forward.experts")),
    ExpertDim("down_proj", D::kE, D::kI, D::kH, D::kNone, W::kBf16Sparse, 1, 1, 1,
              "model.layers.{L}.feed_forward.experts.w2_weight", false, /*transposed=*/true,
              kLlama4, "model.layers.{L}.feed_forward.experts"),
    {kLlama4, "model.layers.{L}.feed_forward.experts.{E}.gate_proj", kWeightScale, R::kExpertGate,
     D::kI, D::kH, W::kQuantExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.feed_forward.experts.w13_{P}", 0, 2},
    {kLlama4, "model.layers.{L}.feed_forward.experts.{E}.up_proj", kWeightScale, R::kExpertUp,
     D::kI, D::kH, W::kQuantExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.feed_forward.experts.w13_{P}", 1, 2},
    {kLlama4, "model.layers.{L}.feed_forward.experts.{E}.down_proj", kWeightScale, R::kExpertDown,
     D::kH, D::kI, W::kQuantExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.feed_forward.experts.w2_{P}", 0, 1},

    // Mixture of experts: router, shared experts, routed experts.
    {kMlpMoe, "model.layers.{L}.mlp.gate", kWeight, R::kRouter, D::kE, D::kH, W::kSparse},
    {kMla & ~kDsa, "model.layers.{L}.mlp.gate", "e_score_correction_bias", R::kRouter, D::kE,
     D::kNone, W::kNoauxTc},
    // GLM-4.5+ and GLM-5 hold it on every MoE layer (their configs name no topk_method).
    {kGlm4 | kDsa, "model.layers.{L}.mlp.gate", "e_score_correction_bias", R::kRouter, D::kE,
     D::kNone, W::kSparse},
    {kBlockSparse, "model.layers.{L}.block_sparse_moe.gate", kWeight, R::kRouter, D::kE, D::kH,
     W::kSparse},
    {kMinimax, "model.layers.{L}.block_sparse_moe", "e_score_correction_bias", R::kRouter, D::kE,
     D::kNone, W::kSparse},
    {kDeepseekShared, "model.layers.{L}.mlp.shared_experts.gate_proj", kWeightScale, R::kColumn,
     D::kSharedI, D::kH, W::kSharedExperts, W::kNever, F::kConcat,
     "model.layers.{L}.mlp.shared_experts.gate_up_proj.{P}", 0, 2},
    {kDeepseekShared, "model.layers.{L}.mlp.shared_experts.up_proj", kWeightScale, R::kColumn,
     D::kSharedI, D::kH, W::kSharedExperts, W::kNever, F::kConcat,
     "model.layers.{L}.mlp.shared_experts.gate_up_proj.{P}", 1, 2},
    {kDeepseekShared, "model.layers.{L}.mlp.shared_experts.down_proj", kWeightScale, R::kRow, D::kH,
     D::kSharedI, W::kSharedExperts},
    {kQwenShared, "model.layers.{L}.mlp.shared_expert.gate_proj", kWeightScale, R::kColumn,
     D::kSharedEI, D::kH, W::kSharedExpert, W::kNever, F::kConcat,
     "model.layers.{L}.mlp.shared_expert.gate_up_proj.{P}", 0, 2},
    {kQwenShared, "model.layers.{L}.mlp.shared_expert.up_proj", kWeightScale, R::kColumn,
     D::kSharedEI, D::kH, W::kSharedExpert, W::kNever, F::kConcat,
     "model.layers.{L}.mlp.shared_expert.gate_up_proj.{P}", 1, 2},
    {kQwenShared, "model.layers.{L}.mlp.shared_expert.down_proj", kWeightScale, R::kRow, D::kH,
     D::kSharedEI, W::kSharedExpert},
    {kQwenShared, "model.layers.{L}.mlp.shared_expert_gate", kWeight, R::kReplicated, D::kOne,
     D::kH, W::kSharedExpert},
    {kMlpMoe, "model.layers.{L}.mlp.experts.{E}.gate_proj", kWeightScale, R::kExpertGate, D::kMoeI,
     D::kH, W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.mlp.experts.w13_{P}", 0, 2},
    {kMlpMoe, "model.layers.{L}.mlp.experts.{E}.up_proj", kWeightScale, R::kExpertUp, D::kMoeI,
     D::kH, W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.mlp.experts.w13_{P}", 1, 2},
    {kMlpMoe, "model.layers.{L}.mlp.experts.{E}.down_proj", kWeightScale, R::kExpertDown, D::kH,
     D::kMoeI, W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.mlp.experts.w2_{P}", 0, 1},
    // Mixtral naming: w1 gate, w3 up, w2 down (vLLM's expert_params_mapping).
    {kBlockSparse, "model.layers.{L}.block_sparse_moe.experts.{E}.w1", kWeightScale, R::kExpertGate,
     D::kI, D::kH, W::kExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.block_sparse_moe.experts.w13_{P}", 0, 2},
    {kBlockSparse, "model.layers.{L}.block_sparse_moe.experts.{E}.w3", kWeightScale, R::kExpertUp,
     D::kI, D::kH, W::kExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.block_sparse_moe.experts.w13_{P}", 1, 2},
    {kBlockSparse, "model.layers.{L}.block_sparse_moe.experts.{E}.w2", kWeightScale, R::kExpertDown,
     D::kH, D::kI, W::kExpert, W::kNever, F::kExpertStack,
     "model.layers.{L}.block_sparse_moe.experts.w2_{P}", 0, 1},
    // gpt_oss: attention sinks per head, a router with a bias, and every routed expert of a
    // layer in one tensor: BF16 [E, H, 2I] (gate and up interleaved along the last dim) and
    // [E, I, H], which vLLM transposes at load (so does the fused layout), or MXFP4 blocks and
    // scales (U8, 32 values a block) that vLLM keeps as they are. TP splits the expert intermediate
    // size; MXFP4 in 32-value blocks, the last rank shorter (vLLM's cdiv(I/32, tp) x 32).
    {kGptOss, "model.layers.{L}.self_attn", "sinks", R::kColumn, D::kHeads, D::kNone, W::kLayer},
    {kGptOss, "model.layers.{L}.mlp.router", "weight,bias", R::kRouter, D::kE, D::kH, W::kSparse,
     W::kSparse},
    ExpertDim("gate_up_proj", D::kE, D::kH, D::kI2, D::kNone, W::kUnquantized, 2, 2, 1,
              "model.layers.{L}.mlp.experts.w13_weight", false, /*transposed=*/true),
    ExpertDim("down_proj", D::kE, D::kI, D::kH, D::kNone, W::kUnquantized, 1, 1, 1,
              "model.layers.{L}.mlp.experts.w2_weight", false, /*transposed=*/true),
    ExpertDim("gate_up_proj_bias", D::kE, D::kI2, D::kNone, D::kNone, W::kSparse, 1, 2, 1,
              "model.layers.{L}.mlp.experts.w13_bias"),
    ExpertDim("down_proj_bias", D::kE, D::kH, D::kNone, D::kNone, W::kSparse, 0, 1, 1,
              "model.layers.{L}.mlp.experts.w2_bias", /*rank0_only=*/true),
    ExpertDim("gate_up_proj_blocks", D::kE, D::kI2, D::kH32, D::kSixteen, W::kMxfp4, 1, 2, 1,
              "model.layers.{L}.mlp.experts.w13_weight"),
    ExpertDim("gate_up_proj_scales", D::kE, D::kI2, D::kH32, D::kNone, W::kMxfp4, 1, 2, 1,
              "model.layers.{L}.mlp.experts.w13_weight_scale"),
    ExpertDim("down_proj_blocks", D::kE, D::kH, D::kI32, D::kSixteen, W::kMxfp4, 2, 1, 32,
              "model.layers.{L}.mlp.experts.w2_weight"),
    ExpertDim("down_proj_scales", D::kE, D::kH, D::kI32, D::kNone, W::kMxfp4, 2, 1, 32,
              "model.layers.{L}.mlp.experts.w2_weight_scale"),

    // DeepSeek-V4 (vLLM's deepseek_v4.py): names without the `model.` prefix, FP8 block scales
    // spelled X.scale, hyper-connections (hc_*), a grouped low-rank output projection, per-layer
    // KV compressors and the sparse-attention indexer. The fused layout is vLLM's parameters
    // after its WeightsMapper and stacked_params_mapping, so every row names its vLLM output.
    V4("embed", kWeight, R::kVocab, D::kV, D::kH, W::kModel, "model.embed_tokens.{P}"),
    V4("layers.{L}.attn_norm", kWeight, R::kReplicated, D::kH, D::kNone, W::kLayer,
       "model.layers.{L}.attn_norm.{P}"),
    V4("layers.{L}", "hc_attn_fn,hc_ffn_fn", R::kReplicated, D::kMixHc, D::kHcH, W::kLayer,
       "model.layers.{L}.{P}"),
    V4("layers.{L}", "hc_attn_base,hc_ffn_base", R::kReplicated, D::kMixHc, D::kNone, W::kLayer,
       "model.layers.{L}.{P}"),
    V4("layers.{L}", "hc_attn_scale,hc_ffn_scale", R::kReplicated, D::kThree, D::kNone, W::kLayer,
       "model.layers.{L}.{P}"),
    // Per head: vLLM narrows the sinks to the rank's heads (its buffer pads them to 64 with -inf).
    V4("layers.{L}.attn", "attn_sink", R::kColumn, D::kHeads, D::kNone, W::kLayer,
       "model.layers.{L}.attn.{P}"),
    V4("layers.{L}.attn.wq_a", kDsScale, R::kReplicated, D::kQLora, D::kH, W::kLayer,
       "model.layers.{L}.attn.fused_wqa_wkv.{P}", 0, 2),
    V4("layers.{L}.attn.wkv", kDsScale, R::kReplicated, D::kHeadDim, D::kH, W::kLayer,
       "model.layers.{L}.attn.fused_wqa_wkv.{P}", 1, 2),
    V4("layers.{L}.attn.q_norm", kWeight, R::kReplicated, D::kQLora, D::kNone, W::kLayer,
       "model.layers.{L}.attn.q_norm.{P}"),
    V4("layers.{L}.attn.kv_norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone, W::kLayer,
       "model.layers.{L}.attn.kv_norm.{P}"),
    V4("layers.{L}.attn.wq_b", kDsScale, R::kColumn, D::kQ, D::kQLora, W::kLayer,
       "model.layers.{L}.attn.wq_b.{P}"),
    // wo_a is column-parallel over its o_groups groups of o_lora_rank rows; wo_b row-parallel.
    V4("layers.{L}.attn.wo_a", kDsScale, R::kColumn, D::kOGroupsRank, D::kQPerGroup, W::kLayer,
       "model.layers.{L}.attn.wo_a.{P}"),
    V4("layers.{L}.attn.wo_b", kDsScale, R::kRow, D::kH, D::kOGroupsRank, W::kLayer,
       "model.layers.{L}.attn.wo_b.{P}"),
    // KV compressor (compress_ratios[L] > 1) and the indexer (ratio 4), replicated and unquantized
    // but for the indexer's wq_b; wkv and wgate fuse into vLLM's fused_wkv_wgate.
    V4("layers.{L}.attn.compressor", "ape", R::kReplicated, D::kRatio, D::kCoffHd, W::kCompressed,
       "model.layers.{L}.attn.mla_attn.compressor.{P}"),
    V4("layers.{L}.attn.compressor.wkv", kWeight, R::kReplicated, D::kCoffHd, D::kH, W::kCompressed,
       "model.layers.{L}.attn.mla_attn.compressor.fused_wkv_wgate.{P}", 0, 2),
    V4("layers.{L}.attn.compressor.wgate", kWeight, R::kReplicated, D::kCoffHd, D::kH,
       W::kCompressed, "model.layers.{L}.attn.mla_attn.compressor.fused_wkv_wgate.{P}", 1, 2),
    V4("layers.{L}.attn.compressor.norm", kWeight, R::kReplicated, D::kHeadDim, D::kNone,
       W::kCompressed, "model.layers.{L}.attn.mla_attn.compressor.norm.{P}"),
    V4("layers.{L}.attn.indexer.wq_b", kDsScale, R::kReplicated, D::kIdxQ, D::kQLora, W::kIndexed,
       "model.layers.{L}.attn.indexer.wq_b.{P}"),
    V4("layers.{L}.attn.indexer.weights_proj", kWeight, R::kReplicated, D::kIdxHeads, D::kH,
       W::kIndexed, "model.layers.{L}.attn.indexer.weights_proj.{P}"),
    // vLLM builds a LayerNorm k_norm in its indexer that the published checkpoint does not hold:
    // accepted, never implied.
    V4("layers.{L}.attn.indexer.k_norm", "weight,bias", R::kReplicated, D::kIdxDim, D::kNone,
       W::kNever, "model.layers.{L}.attn.indexer.k_norm.{P}"),
    V4("layers.{L}.attn.indexer.compressor", "ape", R::kReplicated, D::kRatio, D::kCoffIdx,
       W::kIndexed, "model.layers.{L}.attn.indexer.compressor.{P}"),
    V4("layers.{L}.attn.indexer.compressor.wkv", kWeight, R::kReplicated, D::kCoffIdx, D::kH,
       W::kIndexed, "model.layers.{L}.attn.indexer.compressor.fused_wkv_wgate.{P}", 0, 2),
    V4("layers.{L}.attn.indexer.compressor.wgate", kWeight, R::kReplicated, D::kCoffIdx, D::kH,
       W::kIndexed, "model.layers.{L}.attn.indexer.compressor.fused_wkv_wgate.{P}", 1, 2),
    V4("layers.{L}.attn.indexer.compressor.norm", kWeight, R::kReplicated, D::kIdxDim, D::kNone,
       W::kIndexed, "model.layers.{L}.attn.indexer.compressor.norm.{P}"),
    // The MoE block: the router's bias is vLLM's gate.e_score_correction_bias (implied on the
    // score-routed layers, accepted on every MoE layer), the hash layers' token-id table tid2eid.
    V4("layers.{L}.ffn_norm", kWeight, R::kReplicated, D::kH, D::kNone, W::kLayer,
       "model.layers.{L}.ffn_norm.{P}"),
    V4("layers.{L}.ffn.gate", kWeight, R::kRouter, D::kE, D::kH, W::kSparse,
       "model.layers.{L}.ffn.gate.{P}"),
    V4("layers.{L}.ffn.gate", "bias", R::kRouter, D::kE, D::kNone, W::kSparse,
       "model.layers.{L}.ffn.gate.e_score_correction_bias", 0, 1, W::kScoreMoe),
    V4("layers.{L}.ffn.gate", "tid2eid", R::kRouter, D::kV, D::kTopK, W::kHashMoe,
       "model.layers.{L}.ffn.gate.{P}"),
    V4("layers.{L}.ffn.shared_experts.w1", kDsScale, R::kColumn, D::kSharedI, D::kH,
       W::kSharedExperts, "model.layers.{L}.ffn.shared_experts.gate_up_proj.{P}", 0, 2),
    V4("layers.{L}.ffn.shared_experts.w3", kDsScale, R::kColumn, D::kSharedI, D::kH,
       W::kSharedExperts, "model.layers.{L}.ffn.shared_experts.gate_up_proj.{P}", 1, 2),
    V4("layers.{L}.ffn.shared_experts.w2", kDsScale, R::kRow, D::kH, D::kSharedI, W::kSharedExperts,
       "model.layers.{L}.ffn.shared_experts.down_proj.{P}"),
    Fp4({kDsv4, "layers.{L}.ffn.experts.{E}.w1", kDsScale, R::kExpertGate, D::kMoeI, D::kH,
         W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.ffn.experts.w13_{P}", 0, 2}),
    Fp4({kDsv4, "layers.{L}.ffn.experts.{E}.w3", kDsScale, R::kExpertUp, D::kMoeI, D::kH,
         W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.ffn.experts.w13_{P}", 1, 2}),
    Fp4({kDsv4, "layers.{L}.ffn.experts.{E}.w2", kDsScale, R::kExpertDown, D::kH, D::kMoeI,
         W::kExpert, W::kNever, F::kExpertStack, "model.layers.{L}.ffn.experts.w2_{P}", 0, 1}),
    V4("norm", kWeight, R::kReplicated, D::kH, D::kNone, W::kModel, "model.norm.{P}"),
    V4("head", kWeight, R::kVocab, D::kV, D::kH, W::kUntied, "lm_head.{P}"),
    // The hyper-connection head: top-level names with no module (an empty pattern).
    V4("", "hc_head_fn", R::kReplicated, D::kHc, D::kHcH, W::kModel, "model.{P}"),
    V4("", "hc_head_base", R::kReplicated, D::kHc, D::kNone, W::kModel, "model.{P}"),
    V4("", "hc_head_scale", R::kReplicated, D::kOne, D::kNone, W::kModel, "model.{P}"),
};

std::span<const Row> Rows() { return kRows; }

// A linear layer's row: it takes FP8 block scales, hence every quantized format's tensors.
bool IsLinear(const Row& row) {
  const std::string_view params(row.params);
  return params.find("weight_scale_inv") != std::string_view::npos ||
         params.ends_with(",scale");  // DeepSeek-V4's spelling
}

// THE INTEGER AND FP4 FORMATS: per format, the tensors a quantized linear layer X (weight [N, K])
// holds, each dim X's N or K over a divisor (vLLM's packed_dim / pack_factor and group scales).
// act_order: under a row split the K dim is whole with act order (vLLM repeats scales and zeros
// on every rank: GPTQ desc_act, marlin_repeat_scales_on_all_ranks).
enum class QDiv : std::uint8_t { kOne, kPack, kGroup, kTwo, kSixteen, kThirtyTwo };
struct QuantParamRow {
  QuantScheme scheme;
  const char* name;
  const char* dtype;  // as stored (docs)
  QuantAxis a0;
  QDiv d0;
  QuantAxis a1;  // kOther with d1 kOne: a 1-D tensor
  QDiv d1;
  bool act_order = false;
  const char* fused = nullptr;  // vLLM's parameter name when not `name` (fused layout)
};
using QA = QuantAxis;
using QD = QDiv;
using QS = QuantScheme;
constexpr QuantParamRow kQuantParams[] = {
    {QS::kGptq, "qweight", "I32", QA::kK, QD::kPack, QA::kN, QD::kOne},
    {QS::kGptq, "qzeros", "I32", QA::kK, QD::kGroup, QA::kN, QD::kPack, true},
    {QS::kGptq, "scales", "F16", QA::kK, QD::kGroup, QA::kN, QD::kOne, true},
    {QS::kGptq, "g_idx", "I32", QA::kK, QD::kOne, QA::kOther, QD::kOne},
    {QS::kAwq, "qweight", "I32", QA::kK, QD::kOne, QA::kN, QD::kPack},
    {QS::kAwq, "qzeros", "I32", QA::kK, QD::kGroup, QA::kN, QD::kPack},
    {QS::kAwq, "scales", "F16", QA::kK, QD::kGroup, QA::kN, QD::kOne},
    {QS::kWna16, "weight_packed", "I32", QA::kN, QD::kOne, QA::kK, QD::kPack},
    {QS::kWna16, "weight_scale", "BF16", QA::kN, QD::kOne, QA::kK, QD::kGroup, true},
    {QS::kWna16, "weight_zero_point", "I32", QA::kN, QD::kPack, QA::kK, QD::kGroup, true},
    {QS::kWna16, "weight_g_idx", "I32", QA::kK, QD::kOne, QA::kOther, QD::kOne},
    {QS::kWna16, "weight_shape", "I64", QA::kOther, QD::kOne, QA::kOther, QD::kOne},
    {QS::kNvfp4, "weight", "U8", QA::kN, QD::kOne, QA::kK, QD::kTwo},
    {QS::kNvfp4, "weight_scale", "F8_E4M3", QA::kN, QD::kOne, QA::kK, QD::kSixteen},
    {QS::kNvfp4Ct, "weight_packed", "U8", QA::kN, QD::kOne, QA::kK, QD::kTwo},
    {QS::kNvfp4Ct, "weight_scale", "F8_E4M3", QA::kN, QD::kOne, QA::kK, QD::kSixteen},
    // DeepSeek-V4's MXFP4 experts: vLLM's Mxfp4MoEMethod names the scale w13/w2_weight_scale.
    {QS::kMxfp4Experts, "weight", "I8", QA::kN, QD::kOne, QA::kK, QD::kTwo},
    {QS::kMxfp4Experts, "scale", "F8_E8M0", QA::kN, QD::kOne, QA::kK, QD::kThirtyTwo, false,
     "weight_scale"},
};

// docs/LAYOUT.md's table of the integer and FP4 formats (FormatTableMarkdown).
constexpr const char* kSchemeConfig[] = {
    "",
    "`quant_method: gptq`, `bits` (p = 32 / bits), `group_size` g, `desc_act`",
    "`quant_method: awq`, `bits: 4` (p = 8), `group_size` g",
    "`quant_method: compressed-tensors`, `format: pack-quantized`; `config_groups.*.weights`: "
    "`num_bits` (p = 32 / bits), `group_size` g, `actorder`, `symmetric`",
    "`quant_method: modelopt`, `quant_algo: NVFP4` (groups of 16)",
    "`quant_method: compressed-tensors`, `format: nvfp4-pack-quantized` (groups of 16)",
    "routed experts of a DeepSeek-V4 (`quant_method: fp8`) with `expert_dtype: fp4` or none "
    "(groups of 32; its other linear layers are FP8 blocks)"};

std::string QuantDimText(QuantAxis axis, QDiv div) {
  if (axis == QuantAxis::kOther) return "2";
  std::string s = axis == QuantAxis::kN ? "N" : "K";
  constexpr const char* kDiv[] = {"", "/p", "/g", "/2", "/16", "/32"};
  return s + kDiv[static_cast<int>(div)];
}

// How a format's tensor splits along `axis` (N: column and kv-head splits, K: row splits).
std::string QuantSplitText(const QuantParamRow& q, QuantAxis axis) {
  for (int i = 0; i < 2; ++i) {
    const QuantAxis a = i == 0 ? q.a0 : q.a1;
    const QDiv d = i == 0 ? q.d0 : q.d1;
    if (a != axis || (i == 1 && a == QuantAxis::kOther)) continue;
    std::string s = "dim " + std::to_string(i) + ": " + QuantDimText(a, QDiv::kOne) + "'s shard";
    if (d != QDiv::kOne) s += " / " + QuantDimText(a, d).substr(2);
    if (axis == QuantAxis::kK && d == QDiv::kGroup) {
      s += q.act_order ? "; whole with act order or one group" : "; whole with one group";
    }
    return s;
  }
  return "whole";
}

const QuantParamRow* QuantParamOf(QuantScheme scheme, std::string_view name) {
  for (const QuantParamRow& q : kQuantParams) {
    if (q.scheme == scheme && name == q.name) return &q;
  }
  return nullptr;
}

// The format of a row's quantized tensors: the checkpoint's (SchemeOf), but DeepSeek-V4's MXFP4
// routed experts where expert_dtype says so (Row::fp4_experts).
bool Fp4ExpertDtype(const ModelConfig& c) {
  return !c.quant_method.empty() && c.expert_dtype != "fp8";
}
QuantScheme RowScheme(const ModelConfig& c, const Row& row) {
  return row.fp4_experts && Fp4ExpertDtype(c) ? QuantScheme::kMxfp4Experts : SchemeOf(c);
}

enum class Slot : std::uint8_t { kLayer, kExpert };

struct Compiled {
  const Row* row = nullptr;
  Param param = Param::kWeight;
  std::string param_name;
  std::vector<Slot> placeholders;  // numeric components in order
  bool scalable = false;           // the row lists weight_scale_inv
};

// The kind of MLP layer a row's tensor belongs to, from when it is implied.
LayerMlp MlpPartOf(When when) {
  switch (when) {
    case When::kDense:
      return LayerMlp::kDense;
    case When::kSparse:
    case When::kNoauxTc:
    case When::kSharedExperts:
    case When::kSharedExpert:
    case When::kExpert:
    case When::kUnquantized:
    case When::kMxfp4:
    case When::kBf16Sparse:
    case When::kQuantExpert:
    case When::kHashMoe:
    case When::kScoreMoe:
      return LayerMlp::kSparse;
    default:
      return LayerMlp::kAny;
  }
}

using Table = std::unordered_map<std::string, Compiled>;

struct Tables_ {
  std::array<Table, kFamilyCount> by_family;
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
  if (p == "weight_scale_inv" || p == "scale") return Param::kScale;
  if (p == "weight_scale" || p == "input_scale" || p == "weight_scale_2" ||
      p == "weight_global_scale" || p == "input_global_scale") {
    return Param::kQuantScale;
  }
  for (const char* g : kGroupedParams) {
    if (p == g) return Param::kGrouped;
  }
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
      std::vector<std::string_view> params = Split(row.params, ',');
      const bool scalable = IsLinear(row);
      if (scalable) {  // every quantized format's tensors go wherever FP8 block scales do
        for (const char* q : {"weight_scale", "input_scale", "weight_scale_2",
                              "weight_global_scale", "input_global_scale"}) {
          params.push_back(q);
        }
        for (const char* g : kGroupedParams) params.push_back(g);
      }
      for (std::string_view p : params) {
        Compiled c{&row, ParamOf(p), std::string(p), placeholders, scalable};
        for (int f = 0; f < kFamilyCount; ++f) {
          if (!(row.families & (1u << f))) continue;
          auto [it, inserted] =
              t[f].emplace(key.empty() ? std::string(p) : key + "." + std::string(p), c);
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

// "a N x b M" (b empty: "a N"), scaled by `times` ("2 x (...)").
DimValue Product(std::int64_t times, const char* a, std::int64_t va, const char* b = nullptr,
                 std::int64_t vb = 1) {
  const std::int64_t v = times * va * vb;
  std::string how = std::string(a) + " " + std::to_string(va);
  if (b != nullptr) how += " x " + std::string(b) + " " + std::to_string(vb);
  if (times != 1) how = std::to_string(times) + " x (" + how + ")";
  return {static_cast<std::uint64_t>(v < 0 ? 0 : v), how};
}

DimValue Sum(const DimValue& a, const DimValue& b) {
  return {a.value + b.value, a.how + " + " + b.how};
}

// DeepSeek-V4: layer L's KV compression ratio, vLLM's max(1, compress_ratios[L]) (1 past the
// list, as for its MTP layers).
std::int64_t RatioOf(const ModelConfig& c, std::int64_t layer) {
  if (layer < 0 || layer >= static_cast<std::int64_t>(c.compress_ratios.size())) return 1;
  return std::max<std::int64_t>(1, c.compress_ratios[static_cast<std::size_t>(layer)]);
}

// DeepSeek-V4's dimensions (some per layer: its compression ratio).
DimValue ResolveV4(Dim d, const ModelConfig& c, std::int64_t layer) {
  const std::int64_t ratio = RatioOf(c, layer), coff = ratio == 4 ? 2 : 1;
  const std::string at = "compress_ratios[" + std::to_string(layer) + "] " + std::to_string(ratio);
  switch (d) {
    case Dim::kMixHc:
      return {
          static_cast<std::uint64_t>(std::max<std::int64_t>(0, (2 + c.hc_mult) * c.hc_mult)),
          "(2 + hc_mult " + std::to_string(c.hc_mult) + ") x hc_mult " + std::to_string(c.hc_mult)};
    case Dim::kHcH:
      return Product(1, "hc_mult", c.hc_mult, "hidden_size", c.hidden_size);
    case Dim::kHc:
      return Product(1, "hc_mult", c.hc_mult);
    case Dim::kThree:
      return {3, "3"};
    case Dim::kOGroupsRank:
      return Product(1, "o_groups", c.o_groups, "o_lora_rank", c.o_lora_rank);
    case Dim::kQPerGroup: {
      const std::int64_t q = c.num_attention_heads * c.head_dim;
      return {static_cast<std::uint64_t>(c.o_groups > 0 && q > 0 ? q / c.o_groups : 0),
              "num_attention_heads " + std::to_string(c.num_attention_heads) + " x head_dim " +
                  std::to_string(c.head_dim) + " / o_groups " + std::to_string(c.o_groups)};
    }
    case Dim::kRatio:
      return {static_cast<std::uint64_t>(ratio), at};
    case Dim::kCoffHd:
      return Product(coff, "head_dim", c.head_dim);
    case Dim::kCoffIdx:
      return Product(coff, "index_head_dim", c.index_head_dim);
    case Dim::kTopK:
      return Product(1, "num_experts_per_tok", c.num_experts_per_tok);
    default:
      return {};
  }
}

// The dimensions of the families added after the first five (Resolve's default).
DimValue ResolveMore(Dim d, const ModelConfig& c, std::int64_t layer) {
  const std::int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
  const std::int64_t value_dim = c.linear_num_value_heads * c.linear_value_head_dim;
  switch (d) {
    case Dim::kOne:
      return {1, "1"};
    case Dim::kQ2:
      return Product(2, "num_attention_heads", c.num_attention_heads, "head_dim", c.head_dim);
    case Dim::kQkv:
      return Sum(Product(1, "num_attention_heads", c.num_attention_heads, "head_dim", c.head_dim),
                 Product(2, "num_key_value_heads", c.num_key_value_heads, "head_dim", c.head_dim));
    case Dim::kI2:
      return Product(2, "intermediate_size", c.intermediate_size);
    case Dim::kSharedEI:
      return Product(1, "shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    case Dim::kIdxQ:
      return Product(1, "index_n_heads", c.index_n_heads, "index_head_dim", c.index_head_dim);
    case Dim::kIdxHeads:
      return Product(1, "index_n_heads", c.index_n_heads);
    case Dim::kIdxDim:
      return Product(1, "index_head_dim", c.index_head_dim);
    case Dim::kLinQkvz:
      return {static_cast<std::uint64_t>(std::max<std::int64_t>(0, 2 * key_dim + 2 * value_dim)),
              "2 x key_dim " + std::to_string(key_dim) + " + 2 x value_dim " +
                  std::to_string(value_dim)};
    case Dim::kLinBa:
      return Product(2, "linear_num_value_heads", c.linear_num_value_heads);
    case Dim::kLinQkv:
      return {
          static_cast<std::uint64_t>(std::max<std::int64_t>(0, 2 * key_dim + value_dim)),
          "2 x key_dim " + std::to_string(key_dim) + " + value_dim " + std::to_string(value_dim)};
    case Dim::kLinNv:
      return Product(1, "linear_num_value_heads", c.linear_num_value_heads);
    case Dim::kLinV:
      return Product(1, "linear_num_value_heads", c.linear_num_value_heads, "linear_value_head_dim",
                     c.linear_value_head_dim);
    case Dim::kLinDv:
      return Product(1, "linear_value_head_dim", c.linear_value_head_dim);
    case Dim::kConvK:
      return Product(1, "linear_conv_kernel_dim", c.linear_conv_kernel_dim);
    case Dim::kHeads:
      return Product(1, "num_attention_heads", c.num_attention_heads);
    case Dim::kH32:
      return {static_cast<std::uint64_t>(c.hidden_size / 32),
              "hidden_size " + std::to_string(c.hidden_size) + " / 32"};
    case Dim::kI32:
      return {static_cast<std::uint64_t>(c.intermediate_size / 32),
              "intermediate_size " + std::to_string(c.intermediate_size) + " / 32"};
    case Dim::kSixteen:
      return {16, "16"};
    case Dim::kImlp:
      return Product(1, "intermediate_size_mlp", c.intermediate_size_mlp);
    default:
      return ResolveV4(d, c, layer);
  }
}

DimValue Resolve(Dim d, const ModelConfig& c, std::int64_t layer = -1) {
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
    default:
      return ResolveMore(d, c, layer);
  }
  return {};
}

std::uint64_t CeilDiv(std::uint64_t a, std::uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

// `tmpl` with {L} the layer, {E} the expert and {P} the parameter.
std::string Instantiate(std::string_view tmpl, std::int64_t layer, std::string_view param,
                        std::int64_t expert = -1) {
  std::string out;
  out.reserve(tmpl.size() + 16);
  for (std::size_t i = 0; i < tmpl.size();) {
    if (tmpl.compare(i, 3, "{L}") == 0) {
      out += std::to_string(layer);
      i += 3;
    } else if (tmpl.compare(i, 3, "{E}") == 0) {
      out += std::to_string(expert);
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

// Why config.json gives a layer the MLP it does, for messages.
std::string SparseRule(const ModelConfig& c, Family family) {
  const FamilyInfo& info = InfoOf(family);
  if (info.sparsity == Sparsity::kEvery) {
    return std::string(info.experts_key) + " " + std::to_string(c.num_experts) +
           "; vLLM and transformers build experts on every layer of a " + info.name;
  }
  return "num_experts " + std::to_string(c.num_experts) + ", decoder_sparse_step " +
         std::to_string(c.decoder_sparse_step) + ", mlp_only_layers " + IntList(c.mlp_only_layers) +
         "; vLLM and transformers build experts where num_experts > 0, the layer is not in "
         "mlp_only_layers and (layer + 1) % decoder_sparse_step == 0";
}

// DeepSeek-V4's per-layer tensors against config.json: a compressor where compress_ratios[L] > 1,
// the indexer where it is 4, the token-id table on hash layers (L < num_hash_layers), the
// score-correction bias on the others.
Status CheckLayerV4(const ModelConfig& c, int layer, When when, std::string_view name,
                    std::string_view file_label) {
  const std::int64_t ratio = RatioOf(c, layer);
  const bool hash = layer < c.num_hash_layers;
  std::string want;
  if (when == When::kCompressed && ratio <= 1) want = "a KV compressor (compress_ratios > 1)";
  if (when == When::kIndexed && ratio != 4) want = "the indexer (compress_ratios = 4)";
  if (when == When::kHashMoe && !hash) want = "hash routing (layer < num_hash_layers)";
  if (when == When::kScoreMoe && hash) want = "score routing (layer >= num_hash_layers)";
  if (want.empty()) return Status::Ok();
  return Status::Corrupt(Where(name, file_label) + ": a tensor of " + want +
                         ", but config.json gives layer " + std::to_string(layer) +
                         " compress_ratios " + std::to_string(ratio) + " and num_hash_layers " +
                         std::to_string(c.num_hash_layers));
}

// The tensor of row kind `when` at `layer` against the layer config.json gives it: the MLP
// (dense or sparse) and, for hybrid families, the attention (full or linear).
Status CheckLayerKind(const ModelConfig& config, Family family, int layer, When when,
                      std::string_view name, std::string_view file_label) {
  if (layer < 0) return Status::Ok();
  if ((when == When::kFullAttn || when == When::kLinearAttn) && InfoOf(family).hybrid) {
    const bool linear = LayerIsLinear(config, family, layer);
    if (linear == (when == When::kLinearAttn)) return Status::Ok();
    return Status::Corrupt(Where(name, file_label) + ": a " +
                           (linear ? "full-attention" : "linear-attention") +
                           " tensor, but config.json makes layer " + std::to_string(layer) + " a " +
                           (linear ? "linear-attention" : "full-attention") +
                           " layer (layer_types, else full_attention_interval " +
                           std::to_string(config.full_attention_interval) + ")");
  }
  HOIST_RETURN_IF_ERROR(CheckLayerV4(config, layer, when, name, file_label));
  const LayerMlp part = MlpPartOf(when);
  if (part == LayerMlp::kAny) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(LayerMlp want, LayerMlpOf(config, family, layer));
  if (want == LayerMlp::kAny || want == part) return Status::Ok();
  const bool sparse = want == LayerMlp::kSparse;
  return Status::Corrupt(
      Where(name, file_label) + ": " + (sparse ? "a dense-MLP" : "a mixture-of-experts") +
      " tensor, but config.json makes layer " + std::to_string(layer) + " a " +
      (sparse ? "sparse MoE" : "dense-MLP") + " layer (" + SparseRule(config, family) + ")");
}

bool ListHas(const char* list, std::string_view item) {
  for (std::string_view entry : Split(list, ',')) {
    if (!item.empty() && entry == item) return true;
  }
  return false;
}

}  // namespace

const FamilyInfo& InfoOf(Family family) { return kFamilies[static_cast<std::size_t>(family)]; }

std::string_view FamilyName(Family family) { return InfoOf(family).name; }

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
    case Role::kParts:
      return "parts";
    case Role::kExpertDim:
      return "experts-dim";
    case Role::kSkip:
      return "skip";
  }
  return "unknown";
}

Result<Family> FamilyOf(const ModelConfig& config) {
  const std::string arch = config.architectures.empty() ? "" : config.architectures[0];
  for (const FamilyInfo& f : kFamilies) {
    if (ListHas(f.architectures, arch)) return f.family;
  }
  for (const FamilyInfo& f : kFamilies) {
    if (ListHas(f.model_types, config.model_type)) return f.family;
  }
  std::string known;
  for (const FamilyInfo& f : kFamilies) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return Status::Unsupported("config.json model_type '" + config.model_type + "'" +
                             (arch.empty() ? "" : " (architectures '" + arch + "')") +
                             " has no family rules (supported: " + known + ")");
}

bool LayerIsLinear(const ModelConfig& c, Family family, std::int64_t layer) {
  if (!InfoOf(family).hybrid || layer < 0) return false;
  if (!c.linear_layers.empty()) {
    return layer < static_cast<std::int64_t>(c.linear_layers.size()) &&
           c.linear_layers[static_cast<std::size_t>(layer)] != 0;
  }
  return c.full_attention_interval > 0 && (layer + 1) % c.full_attention_interval != 0;
}

int LayerVariant(const ModelConfig& c, Family family, std::int64_t layer) {
  if (family != Family::kDeepseekV4) return 0;
  const std::int64_t ratio = RatioOf(c, layer);
  return (ratio == 4 ? 2 : ratio > 1 ? 1 : 0) + (layer < c.num_hash_layers ? 3 : 0);
}

bool Mxfp4Experts(const ModelConfig& config, Family family) {
  for (const Row& row : Rows()) {
    if ((row.families & Bit(family)) != 0 && row.fp4_experts) return Fp4ExpertDtype(config);
  }
  return false;
}

std::string ScaleWeightName(std::string_view scale) {
  for (std::string_view suffix : {"_scale_inv", ".scale"}) {
    if (scale.size() > suffix.size() && scale.ends_with(suffix)) {
      std::string w(scale.substr(0, scale.size() - suffix.size()));
      return suffix == ".scale" ? w + ".weight" : w;
    }
  }
  return "";
}

Result<LayerMlp> LayerMlpOf(const ModelConfig& config, Family family, int layer) {
  const Sparsity sparsity = InfoOf(family).sparsity;
  if (sparsity == Sparsity::kEvery) {
    return config.num_experts > 0 ? LayerMlp::kSparse : LayerMlp::kDense;
  }
  if (sparsity != Sparsity::kStep) return LayerMlp::kAny;
  if (config.num_experts <= 0) return LayerMlp::kDense;
  if (config.decoder_sparse_step < 1) {
    return Status::Corrupt(
        "config.json: decoder_sparse_step " + std::to_string(config.decoder_sparse_step) +
        " must be at least 1 for a " + std::string(FamilyName(family)) +
        " with experts (vLLM and transformers take layer L as sparse when (L + 1) % "
        "decoder_sparse_step == 0)");
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

// Tensors an engine does not load: MTP layers past num_hidden_layers (DeepSeek, GLM) and
// `mtp.*` modules (Qwen3-Next, Qwen3.5), as vLLM skips them (true); a layer past
// num_hidden_layers elsewhere is an error.
Result<bool> SkipsExtraLayer(const ModelConfig& config, Family family, std::string_view name,
                             const std::vector<std::string_view>& parts,
                             const std::vector<std::int64_t>& numbers, std::string_view file_label,
                             TensorRule* rule) {
  const bool skips = InfoOf(family).skips_extra_layers;
  if (skips && parts.size() > 1 && parts[0] == "mtp") {
    rule->role = Role::kSkip;
    return true;
  }
  // model.layers.N.x, or layers.N.x (DeepSeek-V4's names carry no model. prefix).
  const std::size_t at = !parts.empty() && parts[0] == "layers" ? 1 : 2;
  if (parts.size() <= at + 1 || parts[at - 1] != "layers" || (at == 2 && parts[0] != "model") ||
      !AllDigits(parts[at])) {
    return false;
  }
  const std::int64_t layer = numbers.empty() ? 0 : numbers[0];
  if (parts[at].size() <= 9 && layer < config.num_hidden_layers) return false;
  if (skips) {
    rule->role = Role::kSkip;
    rule->layer = static_cast<int>(parts[at].size() > 9 ? -1 : layer);
    return true;
  }
  return Status::Corrupt(Where(name, file_label) + ": layer " + std::string(parts[at]) +
                         " is out of range: config.json num_hidden_layers is " +
                         std::to_string(config.num_hidden_layers));
}

// An FP8 per-tensor scale ([] or [1]; input_scale always) or per-channel weight scale ([N] or
// [N, 1], N the weight's rows).
Status CheckQuantScale(const DimValue& rows, const Compiled& c, std::string_view name,
                       const std::vector<std::uint64_t>& shape, std::string_view file_label,
                       TensorRule* rule) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  rule->expected = shape;
  rule->per_tensor = n == 1 && shape.size() <= 1;
  const bool channel = c.param_name == "weight_scale" && !shape.empty() && shape.size() <= 2 &&
                       shape[0] == rows.value && (shape.size() == 1 || shape[1] == 1);
  if (rule->per_tensor || channel) return Status::Ok();
  return Status::Corrupt(Where(name, file_label) + ": shape " + ShapeString(shape) +
                         " is neither a per-tensor FP8 scale ([] or [1]) nor a per-channel one ([" +
                         std::to_string(rows.value) + "] or [" + std::to_string(rows.value) +
                         ", 1]: " + rows.how + ")");
}

// The shape config.json implies for a non-quant-scale parameter of row `c`, and how (in config
// terms, for messages).
Status ExpectedShape(const ModelConfig& config, const Compiled& c, std::string_view name,
                     std::string_view file_label, std::int64_t layer,
                     std::vector<std::uint64_t>* expected, std::string* how) {
  const Row& row = *c.row;
  DimValue d0 = Resolve(row.d0, config, layer);
  DimValue d1 = Resolve(row.d1, config, layer);
  if (c.param == Param::kScale) {
    BlockSize block = BlockSizeOf(config);
    if (block.rows == 0) {
      return Status::Corrupt(
          Where(name, file_label) +
          ": an FP8 block scale, but config.json has no quantization_config.weight_block_size");
    }
    *expected = {CeilDiv(d0.value, block.rows), CeilDiv(d1.value, block.cols)};
    *how = "ceil((" + d0.how + ") / " + std::to_string(block.rows) + "), ceil((" + d1.how + ") / " +
           std::to_string(block.cols) + ")";
  } else if ((c.param == Param::kWeight || c.param == Param::kOther) && row.d1 != Dim::kNone) {
    *expected = {d0.value, d1.value};
    *how = d0.how + ", " + d1.how;
    for (Dim d : {row.d2, row.d3}) {
      if (d == Dim::kNone) continue;
      DimValue v = Resolve(d, config, layer);
      expected->push_back(v.value);
      *how += ", " + v.how;
    }
  } else {
    *expected = {d0.value};
    *how = d0.how;
  }
  return Status::Ok();
}

std::uint64_t QuantDivOf(QDiv div, const ModelConfig& c, std::uint64_t k) {
  switch (div) {
    case QDiv::kPack:
      return c.quant_bits > 0 && c.quant_bits <= 32 ? 32 / static_cast<std::uint64_t>(c.quant_bits)
                                                    : 8;
    case QDiv::kGroup:
      return c.quant_group_size > 0 ? static_cast<std::uint64_t>(c.quant_group_size) : k;
    case QDiv::kTwo:
      return 2;
    case QDiv::kSixteen:
      return c.quant_group_size > 0 ? static_cast<std::uint64_t>(c.quant_group_size) : 16;
    case QDiv::kThirtyTwo:
      return 32;
    default:
      return 1;
  }
}

// A tensor of an integer / FP4 format (kQuantParams row q): its dims and shape from X's N and K.
Status CheckGrouped(const ModelConfig& config, const Compiled& c, const QuantParamRow& q,
                    std::string_view name, const std::vector<std::uint64_t>& shape,
                    std::string_view file_label, TensorRule* rule) {
  const DimValue n = Resolve(c.row->d0, config, rule->layer),
                 k = Resolve(c.row->d1, config, rule->layer);
  rule->qdims.clear();
  rule->concat_dim = -1;
  rule->expected.clear();
  std::string how;
  for (int i = 0; i < 2; ++i) {
    const QuantAxis axis = i == 0 ? q.a0 : q.a1;
    const QDiv div = i == 0 ? q.d0 : q.d1;
    if (i == 1 && axis == QuantAxis::kOther) break;
    QuantDim d{axis, QuantDivOf(div, config, k.value), false};
    if (i > 0) how += ", ";
    if (axis == QuantAxis::kOther) {
      rule->expected.push_back(2);
      how += "2";
    } else {
      const DimValue& v = axis == QuantAxis::kN ? n : k;
      rule->expected.push_back(CeilDiv(v.value, d.div));
      how += d.div == 1 ? v.how : "(" + v.how + ") / " + std::to_string(d.div);
    }
    d.whole_when_row = axis == QuantAxis::kK && div == QDiv::kGroup &&
                       (config.quant_group_size <= 0 || (q.act_order && config.quant_act_order));
    if (axis == QuantAxis::kN) rule->concat_dim = i;
    rule->qdims.push_back(d);
  }
  rule->param = Param::kGrouped;
  rule->qn = n.value;
  rule->qk = k.value;
  if (shape == rule->expected) return Status::Ok();
  return Status::Corrupt(Where(name, file_label) + ": shape " + ShapeString(shape) +
                         " disagrees with config.json's " +
                         std::string(SchemeName(RowScheme(config, *c.row))) + " format: expected " +
                         ShapeString(rule->expected) + " (" + how + ")");
}

Status CheckShape(const ModelConfig& config, const Compiled& c, std::string_view name,
                  const std::vector<std::uint64_t>& shape, std::string_view file_label,
                  TensorRule* rule) {
  if (const QuantParamRow* q = QuantParamOf(RowScheme(config, *c.row), c.param_name)) {
    TensorRule grouped = *rule;
    Status st = CheckGrouped(config, c, *q, name, shape, file_label, &grouped);
    if (st.ok()) *rule = std::move(grouped);
    // X.weight of a layer the format leaves unquantized (ignore / exclude_modules) is plain.
    if (st.ok() || c.param != Param::kWeight) return st;
  } else if (c.param == Param::kGrouped) {
    const std::string& m = config.quant_method;
    return Status::Corrupt(Where(name, file_label) +
                           ": a tensor of an integer-quantized format, but config.json's "
                           "quantization_config " +
                           (m.empty() ? std::string("is absent")
                                      : "(quant_method " + m + ") has no tensor of this name"));
  }
  if (c.param == Param::kQuantScale) {
    return CheckQuantScale(Resolve(c.row->d0, config, rule->layer), c, name, shape, file_label,
                           rule);
  }
  std::string how;
  HOIST_RETURN_IF_ERROR(
      ExpectedShape(config, c, name, file_label, rule->layer, &rule->expected, &how));
  if (shape == rule->expected) return Status::Ok();
  return Status::Corrupt(Where(name, file_label) + ": shape " + ShapeString(shape) +
                         " disagrees with config.json: expected " + ShapeString(rule->expected) +
                         " (" + how + ")");
}

// The parts of a kParts row's dim 0, as vLLM's loaders cut a tensor fused on disk.
std::vector<Part> PartsOf(Parts parts, const ModelConfig& c) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v < 0 ? 0 : v); };
  switch (parts) {
    case Parts::kQkv: {
      const std::uint64_t kv = u(c.num_key_value_heads * c.head_dim);
      return {{u(c.num_attention_heads * c.head_dim), false}, {kv, true}, {kv, true}};
    }
    case Parts::kTwo:
      return {{u(c.intermediate_size), false}, {u(c.intermediate_size), false}};
    case Parts::kLinQkv: {
      const std::uint64_t key = u(c.linear_num_key_heads * c.linear_key_head_dim);
      return {{key, false},
              {key, false},
              {u(c.linear_num_value_heads * c.linear_value_head_dim), false}};
    }
    case Parts::kNone:
      break;
  }
  return {};
}

// The parameter's name in vLLM's fused parameter: a per-row format's own name for it (MXFP4
// experts' scale: weight_scale), an FP8 block scale weight_scale_inv however the checkpoint spells
// it (DeepSeek-V4: X.scale), else the checkpoint's.
std::string_view FusedParamName(const ModelConfig& config, const Compiled& c) {
  const QuantParamRow* q = QuantParamOf(RowScheme(config, *c.row), c.param_name);
  if (q != nullptr && q->fused != nullptr) return q->fused;
  if (c.param == Param::kScale) return "weight_scale_inv";
  return c.param_name;
}

// The row's role, fusion and parts for this parameter.
void ApplyRow(const ModelConfig& config, const Compiled& c, TensorRule* rule) {
  const Row& row = *c.row;
  rule->role = row.role;
  if (c.param == Param::kBias && row.role == Role::kRow) rule->role = Role::kReplicated;
  if (row.role == Role::kParts) rule->parts = PartsOf(row.parts, config);
  rule->split_dim = row.split_dim;
  rule->split_mul = row.split_mul;
  rule->split_div = row.split_div;
  rule->rank0_only = row.rank0_only;
  rule->transposed = row.transposed;
  rule->halves = row.halves;
  if (row.rotary && c.param == Param::kWeight) {
    rule->rotary_head_dim = static_cast<std::uint64_t>(config.head_dim);
  }
  if (row.fusion != Fusion::kNone && !(row.fuse_needs_q_lora && config.q_lora_rank <= 0)) {
    rule->fusion = row.fusion;
    rule->fused_name = Instantiate(row.fused, rule->layer, FusedParamName(config, c));
    rule->slot = row.slot;
    rule->slots = row.slots;
  }
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
  HOIST_RETURN_IF_ERROR(CheckLayerKind(config, family, rule.layer, row.when, name, file_label));
  if (rule.expert >= 0 && rule.expert >= config.num_experts) {
    return Status::Corrupt(Where(name, file_label) + ": expert " + std::to_string(rule.expert) +
                           " is out of range: config.json num_experts is " +
                           std::to_string(config.num_experts));
  }
  if (row.when == When::kUntied && config.tie_word_embeddings) {
    rule.role = Role::kSkip;
    return rule;
  }
  HOIST_RETURN_IF_ERROR(CheckShape(config, c, name, shape, file_label, &rule));
  ApplyRow(config, c, &rule);
  return rule;
}

QuantScheme SchemeOf(const ModelConfig& c) {
  const std::string& m = c.quant_method;
  if (m == "gptq") return QuantScheme::kGptq;
  if (m == "awq") return QuantScheme::kAwq;
  if (m == "compressed-tensors" && c.quant_format == "pack-quantized") return QuantScheme::kWna16;
  if (m == "compressed-tensors" && c.quant_format == "nvfp4-pack-quantized") {
    return QuantScheme::kNvfp4Ct;
  }
  if (m == "modelopt" && c.quant_algo == "NVFP4") return QuantScheme::kNvfp4;
  return QuantScheme::kNone;
}

std::string_view QuantMainParam(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kGptq:
    case QuantScheme::kAwq:
      return "qweight";
    case QuantScheme::kWna16:
    case QuantScheme::kNvfp4Ct:
      return "weight_packed";
    default:
      return "weight";
  }
}

std::string_view SchemeName(QuantScheme scheme) {
  switch (scheme) {
    case QuantScheme::kGptq:
      return "GPTQ";
    case QuantScheme::kAwq:
      return "AWQ";
    case QuantScheme::kWna16:
      return "compressed-tensors pack-quantized";
    case QuantScheme::kNvfp4:
      return "ModelOpt NVFP4";
    case QuantScheme::kNvfp4Ct:
      return "compressed-tensors NVFP4";
    case QuantScheme::kMxfp4Experts:
      return "DeepSeek-V4 MXFP4 experts";
    default:
      return "unquantized";
  }
}

Result<std::vector<std::uint64_t>> ImpliedShape(const ModelConfig& config, Family family,
                                                std::string_view name) {
  std::vector<std::int64_t> numbers;
  const Table& table = CompiledTables().by_family[static_cast<std::size_t>(family)];
  auto it = table.find(CanonicalKey(Split(name, '.'), &numbers));
  if (it == table.end()) {
    return Status::NotFound("tensor '" + std::string(name) + "': no " +
                            std::string(FamilyName(family)) + " rule matches this tensor name");
  }
  if (const QuantParamRow* q =
          QuantParamOf(RowScheme(config, *it->second.row), it->second.param_name)) {
    TensorRule rule;  // CheckGrouped sets the expected shape before comparing it
    if (!it->second.placeholders.empty() && !numbers.empty() &&
        it->second.placeholders[0] == Slot::kLayer) {
      rule.layer = static_cast<int>(numbers[0]);
    }
    (void)CheckGrouped(config, it->second, *q, name, {}, "", &rule);
    return rule.expected;
  }
  if (it->second.param == Param::kQuantScale || it->second.param == Param::kGrouped) {
    return Status::InvalidArgument("tensor '" + std::string(name) +
                                   "': a quantization scale's shape is the checkpoint's choice");
  }
  std::vector<std::uint64_t> shape;
  std::string how;
  const std::int64_t layer = !it->second.placeholders.empty() && !numbers.empty() &&
                                     it->second.placeholders[0] == Slot::kLayer
                                 ? numbers[0]
                                 : -1;
  HOIST_RETURN_IF_ERROR(ExpectedShape(config, it->second, name, "", layer, &shape, &how));
  return shape;
}

bool HasRule(Family family, std::string_view name) {
  std::vector<std::int64_t> numbers;
  const Table& table = CompiledTables().by_family[static_cast<std::size_t>(family)];
  return table.count(CanonicalKey(Split(name, '.'), &numbers)) > 0;
}

bool LayerIsSparse(const ModelConfig& c, Family family, std::int64_t layer) {
  if (c.num_experts <= 0) return false;
  switch (InfoOf(family).sparsity) {
    case Sparsity::kStep: {
      const std::int64_t step = std::max<std::int64_t>(1, c.decoder_sparse_step);
      const auto& dense = c.mlp_only_layers;
      const bool listed = dense.size() < 16
                              ? std::find(dense.begin(), dense.end(), layer) != dense.end()
                              : std::binary_search(dense.begin(), dense.end(), layer);
      return !listed && (layer + 1) % step == 0;
    }
    case Sparsity::kFirstK: {
      const std::int64_t freq = std::max<std::int64_t>(1, c.moe_layer_freq);
      return layer >= c.first_k_dense_replace && layer % freq == 0;
    }
    case Sparsity::kEvery:
      return true;
    case Sparsity::kDense:
      break;
  }
  return false;
}

namespace {

// Why each kind of tensor is implied, built once per ForEachImpliedTensor call.
std::string Because(When when, const ModelConfig& c, Family family, std::int64_t layer) {
  const FamilyInfo& info = InfoOf(family);
  switch (when) {
    case When::kModel:
    case When::kFamilyLayer:
      return "model_type = " + std::string(info.name);
    case When::kUntied:
      return "tie_word_embeddings = false";
    case When::kAttnBias:
      return "attention_bias = true";
    case When::kQkNorm:
      return "use_qk_norm = true";
    case When::kQLora:
      return "q_lora_rank = " + std::to_string(c.q_lora_rank);
    case When::kFullAttn:
    case When::kLinearAttn:
      return "layer_types[" + std::to_string(layer) +
             "] = " + (when == When::kFullAttn ? "full_attention" : "linear_attention");
    case When::kSparse:
    case When::kExpert:
    case When::kUnquantized:
    case When::kBf16Sparse:
      return std::string(info.experts_key) + " = " + std::to_string(c.num_experts);
    case When::kMxfp4:
      return "quant_method = mxfp4";
    case When::kQuantExpert:
      return std::string(info.experts_key) + " = " + std::to_string(c.num_experts) +
             ", quant_method = " + c.quant_method;
    case When::kNoauxTc:
      return "topk_method = " + c.topk_method;
    case When::kSharedExperts:
      return "n_shared_experts = " + std::to_string(c.n_shared_experts);
    case When::kSharedExpert:
      return "shared_expert_intermediate_size = " +
             std::to_string(c.shared_expert_intermediate_size);
    case When::kCompressed:
    case When::kIndexed:
      return "compress_ratios[" + std::to_string(layer) +
             "] = " + std::to_string(RatioOf(c, layer));
    case When::kHashMoe:
      return "num_hash_layers = " + std::to_string(c.num_hash_layers);
    case When::kScoreMoe:
      return "num_hash_layers = " + std::to_string(c.num_hash_layers) + ", topk_method = noaux_tc";
    default:
      return "num_hidden_layers = " + std::to_string(c.num_hidden_layers);
  }
}

// What config.json makes a layer: sparse (routed experts) or dense MLP, linear or full attention
// (all false at model level).
struct LayerKind {
  bool sparse = false;
  bool linear = false;
  std::int64_t ratio = 1;  // DeepSeek-V4: the layer's KV compression ratio
  bool hash = false;       // DeepSeek-V4: a hash-routed MoE layer
};

// DeepSeek-V4's per-layer kinds; true for the kinds implied on every layer (or model).
bool ImpliedV4(When when, const ModelConfig& c, LayerKind k) {
  switch (when) {
    case When::kCompressed:
      return k.ratio > 1;
    case When::kIndexed:
      return k.ratio == 4;
    case When::kHashMoe:
      return k.sparse && k.hash;
    case When::kScoreMoe:
      return k.sparse && !k.hash && c.topk_method == "noaux_tc";
    default:
      return true;
  }
}

// Whether config.json implies a tensor of kind `when` on a layer of kind `k`.
bool Implied(When when, const ModelConfig& c, LayerKind k) {
  const bool sparse = k.sparse, linear = k.linear;
  switch (when) {
    case When::kNever:
      return false;
    case When::kUntied:
      return !c.tie_word_embeddings;
    case When::kAttnBias:
      return c.attention_bias;
    case When::kQkNorm:
      return c.use_qk_norm;
    case When::kQLora:
      return c.q_lora_rank > 0;
    case When::kNoQLora:
      return c.q_lora_rank <= 0;
    case When::kFullAttn:
      return !linear;
    case When::kLinearAttn:
      return linear;
    case When::kDense:
      return !sparse;
    case When::kSparse:
    case When::kExpert:
      return sparse;
    case When::kNoauxTc:
      return sparse && c.topk_method == "noaux_tc";
    case When::kSharedExperts:
      return sparse && c.n_shared_experts > 0;
    case When::kSharedExpert:
      return sparse && c.shared_expert_intermediate_size > 0;
    case When::kUnquantized:
      return sparse && c.quant_method != "mxfp4";
    case When::kMxfp4:
      return sparse && c.quant_method == "mxfp4";
    case When::kBf16Sparse:
      return sparse && c.quant_method.empty();
    case When::kQuantExpert:
      return sparse && !c.quant_method.empty();
    default:
      return ImpliedV4(when, c, k);
  }
}

// Walks the implied names of one family, stopping for good once the callback returns false.
class Walker {
 public:
  Walker(const ModelConfig& c, Family family, const ImpliedFn& fn)
      : c_(c), family_(family), fn_(fn), main_(QuantMainParam(SchemeOf(c))) {}
  bool stopped() const { return stopped_; }

  // The model-level rows: embed_tokens first (head), the rest after the layers.
  void Model(bool head) {
    for (const Row& row : Rows()) {
      if (!Has(row) || std::string_view(row.pattern).find('{') != std::string_view::npos) continue;
      if ((row.role == Role::kVocab && row.when == When::kModel) == head) Emit(row, -1, -1, {});
    }
  }
  // Layer l's tensors except the routed experts.
  void Layer(std::int64_t l) {
    const LayerKind k = KindOf(l);
    for (const Row& row : Rows()) {
      const std::string_view p = row.pattern;
      if (Has(row) && p.find("{L}") != p.npos && p.find("{E}") == p.npos) Emit(row, l, -1, k);
    }
  }
  // Routed expert e of layer l (nothing for a dense layer or an expert out of range).
  void Expert(std::int64_t l, std::int64_t e) {
    if (l < 0 || l >= c_.num_hidden_layers || e < 0 || e >= c_.num_experts ||
        !LayerIsSparse(c_, family_, l)) {
      return;
    }
    const LayerKind k = KindOf(l);
    for (const Row& row : Rows()) {
      if (Has(row) && std::string_view(row.pattern).find("{E}") != std::string_view::npos) {
        Emit(row, l, e, k);
      }
    }
  }

 private:
  bool Has(const Row& row) const { return (row.families & Bit(family_)) != 0; }
  LayerKind KindOf(std::int64_t l) const {
    return {LayerIsSparse(c_, family_, l), LayerIsLinear(c_, family_, l), RatioOf(c_, l),
            l < c_.num_hash_layers};
  }

  // The row's implied parameters at (layer, expert) of a layer of kind `k`: all but bias per
  // `when`, bias per `bias`.
  void Emit(const Row& row, std::int64_t layer, std::int64_t expert, LayerKind k) {
    const bool main = Implied(row.when, c_, k);
    const bool bias = Implied(row.bias, c_, k) && (row.when != When::kFullAttn || main);
    if (!main && !bias) return;
    const std::string base = Instantiate(row.pattern, layer, "", expert);
    const bool linear = IsLinear(row);
    for (std::string_view param : Split(row.params, ',')) {
      // FP8 block scales follow the weight's dtype (model_checks); DeepSeek-V4 names its X.scale
      // on every linear layer of a checkpoint with a quantization_config.
      if (stopped_ || param == "weight_scale_inv") continue;
      if (param == "scale" && c_.quant_method.empty()) continue;
      if (linear && param == "weight") param = main_;
      const bool is_bias = param == "bias";
      if (is_bias ? !bias : !main) continue;
      name_.assign(base).append(base.empty() ? "" : ".").append(param);
      const std::string why = Because(is_bias ? row.bias : row.when, c_, family_, layer);
      if (!fn_(name_, why)) stopped_ = true;
    }
  }

  const ModelConfig& c_;
  Family family_;
  const ImpliedFn& fn_;
  std::string_view main_;  // what holds a linear layer's weights: weight, qweight, weight_packed
  std::string name_;
  bool stopped_ = false;
};

// Dims and Whens as docs/LAYOUT.md writes them, in enum order.
constexpr const char* kDimSymbols[] = {"",
                                       "1",
                                       "H",
                                       "Q",
                                       "2Q",
                                       "KV",
                                       "Q+2KV",
                                       "I",
                                       "2I",
                                       "moe_I",
                                       "moe_I*n_shared",
                                       "shared_I",
                                       "V",
                                       "E",
                                       "head_dim",
                                       "q_lora",
                                       "kv_lora",
                                       "kv_lora+rope",
                                       "heads*(nope+rope)",
                                       "heads*(nope+v)",
                                       "heads*v",
                                       "idx_heads*idx_dim",
                                       "idx_heads",
                                       "idx_dim",
                                       "2K+2Vd",
                                       "2Nv",
                                       "2K+Vd",
                                       "Nv",
                                       "Vd",
                                       "v_head_dim",
                                       "conv_kernel",
                                       "heads",
                                       "H/32",
                                       "I/32",
                                       "16",
                                       "I_mlp",
                                       "(2+hc)*hc",
                                       "hc*H",
                                       "hc",
                                       "3",
                                       "o_groups*o_lora",
                                       "Q/o_groups",
                                       "ratio_L",
                                       "coff_L*head_dim",
                                       "coff_L*idx_dim",
                                       "topk"};
static_assert(sizeof(kDimSymbols) / sizeof(kDimSymbols[0]) ==
              static_cast<std::size_t>(Dim::kTopK) + 1);
constexpr const char* kWhenText[] = {"never (accepted)",
                                     "always",
                                     "untied embeddings",
                                     "every layer",
                                     "every layer",
                                     "attention_bias",
                                     "use_qk_norm",
                                     "q_lora_rank > 0",
                                     "q_lora_rank = 0",
                                     "full-attention layers",
                                     "linear-attention layers",
                                     "dense-MLP layers",
                                     "MoE layers",
                                     "MoE layers, topk_method noaux_tc",
                                     "MoE layers, n_shared_experts > 0",
                                     "MoE layers, shared_expert_intermediate_size > 0",
                                     "each routed expert",
                                     "MoE layers, unquantized",
                                     "MoE layers, MXFP4 (quant_method mxfp4)",
                                     "MoE layers, no quantization_config",
                                     "each routed expert, with a quantization_config",
                                     "compress_ratios[L] > 1",
                                     "compress_ratios[L] = 4",
                                     "MoE layers L < num_hash_layers",
                                     "MoE layers L >= num_hash_layers, topk_method noaux_tc"};
static_assert(sizeof(kWhenText) / sizeof(kWhenText[0]) ==
              static_cast<std::size_t>(When::kScoreMoe) + 1);

std::string ShapeText(const Row& row) {
  std::string s = "[" + std::string(kDimSymbols[static_cast<int>(row.d0)]);
  if (row.d1 != Dim::kNone) s += ", " + std::string(kDimSymbols[static_cast<int>(row.d1)]);
  for (Dim d : {row.d2, row.d3}) {
    if (d != Dim::kNone) s += ", " + std::string(kDimSymbols[static_cast<int>(d)]);
  }
  return s + "]";
}

std::string FusedText(const Row& row) {
  if (row.fusion == Fusion::kNone) return "as stored";
  std::string s = "`" + std::string(row.fused) + "` ";
  if (row.transposed) {
    return s + "(the rank's slice, its last two dims swapped as vLLM's load does)";
  }
  if (row.fusion == Fusion::kConcat && row.slots == 1) return s + "(vLLM's name)";
  s += row.fusion == Fusion::kExpertStack ? "stacked over local experts, " : "";
  s += "part " + std::to_string(row.slot) + " of " + std::to_string(row.slots);
  if (row.fuse_needs_q_lora) s += " (with q_lora_rank)";
  return s;
}

}  // namespace

std::string FormatTableMarkdown() {
  std::string out =
      "| format | tensor | dtype | shape | column / kv-head split | row split | fused layout "
      "|\n| --- | --- | --- | --- | --- | --- | --- |\n";
  QuantScheme last = QuantScheme::kNone;
  for (const QuantParamRow& q : kQuantParams) {
    const std::string format = q.scheme == last ? ""
                                                : std::string(SchemeName(q.scheme)) + ": " +
                                                      kSchemeConfig[static_cast<int>(q.scheme)];
    last = q.scheme;
    std::string shape = "[" + QuantDimText(q.a0, q.d0);
    if (q.a1 != QuantAxis::kOther) shape += ", " + QuantDimText(q.a1, q.d1);
    shape += "]";
    const int n_dim = q.a0 == QuantAxis::kN ? 0 : q.a1 == QuantAxis::kN ? 1 : -1;
    const std::string fused = n_dim < 0 ? "slot 0's alone (q's, gate's)"
                                        : "parts side by side along dim " + std::to_string(n_dim);
    out += "| " + format + " | `X." + q.name + "` | " + q.dtype + " | `" + shape + "` | " +
           QuantSplitText(q, QuantAxis::kN) + " | " + QuantSplitText(q, QuantAxis::kK) + " | " +
           fused + " |\n";
  }
  return out;
}

std::string FamilyTableMarkdown(Family family) {
  const FamilyInfo& info = InfoOf(family);
  std::string out = "### " + std::string(info.name) + "\n\nSelected by architectures `" +
                    info.architectures + "`, else model_type `" + info.model_types + "`.\n\n";
  out += "| checkpoint tensor | parameters | role | shape | present | fused layout |\n";
  out += "| --- | --- | --- | --- | --- | --- |\n";
  for (const Row& row : Rows()) {
    if ((row.families & Bit(family)) == 0) continue;
    std::string role(RoleName(row.role));
    if (row.role == Role::kParts) {
      role += row.parts == Parts::kQkv   ? ": q, then k and v by kv heads"
              : row.parts == Parts::kTwo ? ": two halves"
                                         : ": q, k, v of linear attention";
    }
    std::string when = kWhenText[static_cast<int>(row.when)];
    if (row.bias != When::kNever)
      when += "; bias: " + std::string(kWhenText[static_cast<int>(row.bias)]);
    if (row.fp4_experts) role += "; MXFP4 with expert_dtype fp4 (format table)";
    const std::string pattern = *row.pattern ? row.pattern : "(top level)";
    out += "| `" + pattern + "` | " + row.params + " | " + role + " | " + ShapeText(row) + " | " +
           when + " | " + FusedText(row) + " |\n";
  }
  return out;
}

void ForEachImpliedTensor(const ModelConfig& c, Family family, const ImpliedFn& fn,
                          ImpliedSlice slice) {
  Walker w(c, family, fn);
  switch (slice.part) {
    case ImpliedPart::kModel:
      w.Model(true);
      w.Model(false);
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
  w.Model(true);
  for (std::int64_t l = 0; l < c.num_hidden_layers && !w.stopped(); ++l) {
    w.Layer(l);
    if (!LayerIsSparse(c, family, l)) continue;
    for (std::int64_t e = 0; e < c.num_experts && !w.stopped(); ++e) w.Expert(l, e);
  }
  w.Model(false);
}

}  // namespace hoist::planner
