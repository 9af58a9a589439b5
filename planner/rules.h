// Model-family rules: what role each checkpoint tensor plays (how it is sharded) and where it
// goes in the fused layout, as a TABLE keyed by tensor-name pattern. Adding a family (or a
// tensor kind) is adding rows to the table in rules.cc, not code paths.
//
// A pattern is a dotted name whose numeric components are placeholders: `{L}` a layer index,
// `{E}` an expert index; each row lists the parameter names it accepts (the last component:
// `weight`, `bias`, `weight_scale_inv`, ...). The table is compiled once, on first use, into one
// hash map per family (numeric components canonicalised to '#'), so classifying a name costs one
// pass over it plus one lookup.
//
// Roles of parameters: `X.weight` has the row's role; `X.bias` follows it for column / kv-heads
// rows and is replicated for row-parallel rows (vLLM); `X.weight_scale_inv` (FP8 block scales)
// follows X.weight's role, sliced in whole blocks by the plan builder.
//
// Which tensors a config implies (ForEachImpliedTensor) follows the same families: per layer
// the norms, the attention projections (q/k norms for Qwen3, MLA for DeepSeek), a dense MLP or
// the router, the routed experts and DeepSeek's shared experts, as vLLM builds its layers.
//
// Failure: ClassifyTensor returns Status::NotFound naming the tensor when no rule of the family
// matches its name (the plan builder reports such "unexpected" tensors per
// PlanOptions::unexpected), and Status::Corrupt when a layer or expert index is out of the
// config's range, when the tensor belongs to the other kind of MLP than config.json gives its
// layer (LayerMlpOf: a dense MLP where vLLM builds experts, or experts where it builds a dense
// MLP), or when the tensor's shape disagrees with config.json (expected and actual shapes in
// the message); FamilyOf returns Unsupported for a model_type with no rows.
// Threading: all functions are pure; the compiled table is immutable after a thread-safe
// one-time initialisation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "planner/checkpoint.h"

namespace hoist::planner {

enum class Family : std::uint8_t {
  kLlama,
  kQwen2,
  kQwen3,
  kQwen3Moe,
  kDeepseekV3,
  kDeepseekV2,
  kGlmMoeDsa,
  kMixtral,
  kMinimaxM2,
  kQwen2Moe,
  kGlm4Moe,
  kGemma3,
  kPhi3,
  kQwen3Next,
  kQwen35,
  kQwen35Moe,
  kGptOss,
  kLlama4,
  kDeepseekV4,
};
constexpr int kFamilyCount = 19;

// "llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "mixtral", ...
std::string_view FamilyName(Family family);

// What a family's layers are made of, beyond its table rows (rules.cc: kFamilies).
enum class Attention : std::uint8_t { kGqa, kMla };
enum class Sparsity : std::uint8_t {
  kDense,   // no routed experts
  kStep,    // Qwen-MoE: (L + 1) % decoder_sparse_step == 0 and L not in mlp_only_layers
  kFirstK,  // DeepSeek / GLM: L >= first_k_dense_replace and L % moe_layer_freq == 0
  kEvery,   // Mixtral / MiniMax: every layer
};
enum class SharedExperts : std::uint8_t {
  kNone,
  kDeepseek,  // mlp.shared_experts.*: moe_intermediate_size x n_shared_experts
  kQwen,      // mlp.shared_expert.* + shared_expert_gate: shared_expert_intermediate_size
};
struct FamilyInfo {
  Family family;
  const char* name;           // FamilyName
  const char* architectures;  // config.json architectures that select it, comma-separated
  const char* model_types;    // model_type values that select it when no architecture does
  Attention attention;
  Sparsity sparsity;
  SharedExperts shared;
  const char* experts_key;      // the config key that counts routed experts, for messages
  const char* expert_size_key;  // the config key of a routed expert's intermediate size
  bool hybrid;                  // linear-attention layers beside full attention (layer_types)
  bool skips_extra_layers;      // MTP layers past num_hidden_layers and `mtp.*` are not loaded
  // The config key of a dense MLP's intermediate size (nullptr: intermediate_size).
  const char* dense_size_key = nullptr;
  // tp must divide the routed experts even with EP off (vLLM's DeepseekV4MoE asserts it).
  bool experts_divide_tp = false;
};
const FamilyInfo& InfoOf(Family family);

// The family of config.json: its first `architectures` entry when the table knows it (vLLM's
// registry is keyed so: model_type kimi_k2 is DeepseekV3ForCausalLM), else its model_type.
// Unsupported naming both and the supported architectures otherwise.
Result<Family> FamilyOf(const ModelConfig& config);

// What else makes a layer's tensors differ from another's of the same MLP and attention kind:
// DeepSeek-V4's KV compression (compress_ratios[layer]: 0 none or ratio 1, 1 a compressor, 2 a
// compressor and the sparse-attention indexer at ratio 4) + 3 x (hash-routed MoE: layer <
// num_hash_layers). 0 for other families.
int LayerVariant(const ModelConfig& config, Family family, std::int64_t layer);
constexpr int kLayerVariants = 6;

// True when `family`'s routed experts are MXFP4 in this checkpoint: DeepSeek-V4 with a
// quantization_config and expert_dtype "fp4" or absent (vLLM's default).
bool Mxfp4Experts(const ModelConfig& config, Family family);

// The weight an FP8 block scale belongs to: X.weight for X.weight_scale_inv and for X.scale
// (DeepSeek-V4's spelling); "" for another name.
std::string ScaleWeightName(std::string_view scale);

// Hybrid families: layer `layer` is a linear-attention layer (layer_types, else every layer but
// each full_attention_interval-th). False for other families.
bool LayerIsLinear(const ModelConfig& config, Family family, std::int64_t layer);

enum class Role : std::uint8_t {
  kColumn,      // rows [t*n/tp, (t+1)*n/tp)
  kRow,         // columns [t*k/tp, (t+1)*k/tp)
  kKvHeads,     // k/v: column, or one replicated kv head when tp > num_key_value_heads
  kVocab,       // rows of the vocab padded to a multiple of 64, padding zero-filled
  kReplicated,  // whole on every rank
  kRouter,      // MoE router gate / e_score_correction_bias: replicated
  kExpertGate,  // routed expert gate_proj: whole on its owner under EP, else column
  kExpertUp,    // routed expert up_proj: whole on its owner under EP, else column
  kExpertDown,  // routed expert down_proj: whole on its owner under EP, else row
  kParts,       // fused on disk (phi3 qkv_proj, a conv1d over q/k/v): each part column-split
  // Every routed expert of a layer in one tensor (gpt_oss's experts.gate_up_proj [E, H, 2I]):
  // under EP the rank's experts (rows of dim 0, linear placement); under TP a range of dim
  // TensorRule::split_dim, from the rank's share of the expert intermediate size.
  kExpertDim,
  kSkip,  // not loaded: lm_head with tied embeddings, DeepSeek MTP layers
};

// One part of a kParts tensor: `rows` rows along dim 0, sliced as a column (or kv-heads) part.
struct Part {
  std::uint64_t rows = 0;
  bool kv_heads = false;
};

std::string_view RoleName(Role role);

enum class Param : std::uint8_t {
  kWeight,  // X.weight
  kBias,    // X.bias
  kScale,   // X.weight_scale_inv (FP8 block scale of X.weight; DeepSeek-V4 spells it X.scale)
  // X.weight_scale / X.input_scale of FP8 per-tensor or per-channel checkpoints
  // (compressed-tensors, ModelOpt): a scalar ([] or [1]) is replicated; a per-channel weight scale
  // ([N] or [N, 1]) follows X.weight's rows (column, kv heads, experts' gate/up) and is whole on
  // row-parallel X.
  kQuantScale,
  // A tensor of an integer or FP4 format (GPTQ qweight/qzeros/scales/g_idx, AWQ, compressed-
  // tensors weight_packed/weight_scale/weight_zero_point/weight_g_idx/weight_shape, NVFP4's packed
  // weight and its FP8 group scales): its dims are X's output (N) or input (K) dim over a pack
  // factor or group size (TensorRule::qdims), sliced where X.weight would be.
  kGrouped,
  kOther,  // another parameter a row lists (e.g. e_score_correction_bias)
};

// The integer and FP4 checkpoint formats (quantization_config), each a table of the tensors a
// quantized linear layer X holds (rules.cc: kQuantParams).
enum class QuantScheme : std::uint8_t {
  kNone,     // unquantized, FP8 (block, channel, tensor scales) or gpt_oss MXFP4
  kGptq,     // quant_method gptq: qweight [K/p, N], qzeros [G, N/p], scales [G, N], g_idx [K]
  kAwq,      // quant_method awq: qweight [K, N/p], qzeros [G, N/p], scales [G, N]
  kWna16,    // compressed-tensors pack-quantized: weight_packed [N, K/p], weight_scale [N, G],
             // weight_zero_point [N/p, G], weight_g_idx [K], weight_shape [2]
  kNvfp4,    // ModelOpt NVFP4: weight U8 [N, K/2], weight_scale F8 [N, K/16], weight_scale_2
  kNvfp4Ct,  // compressed-tensors nvfp4-pack-quantized: weight_packed [N, K/2], weight_scale
             // [N, K/16], weight_global_scale
  // DeepSeek-V4's MXFP4 routed experts (expert_dtype fp4; its other linear layers are FP8
  // blocks): weight I8 [N, K/2] (two E2M1 codes a byte), scale F8_E8M0 [N, K/32]. Per row, not
  // per checkpoint: SchemeOf never returns it.
  kMxfp4Experts,
};
QuantScheme SchemeOf(const ModelConfig& config);
std::string_view SchemeName(QuantScheme scheme);  // "GPTQ", "AWQ", ...
// The tensor that holds a quantized linear layer X's weights: X.qweight (GPTQ, AWQ),
// X.weight_packed (compressed-tensors), else X.weight. The implied walk names it in place of
// X.weight; a layer the format leaves unquantized keeps X.weight (model_checks accepts either).
std::string_view QuantMainParam(QuantScheme scheme);

// One dim of a kGrouped tensor: X's output (N) or input (K) dim divided by `div` (a pack factor
// or group size); kOther: not a dim of X (weight_shape's 2). whole_when_row: under a row split
// the dim is whole on every rank (act order's scales and zeros; one group over K).
enum class QuantAxis : std::uint8_t { kN, kK, kOther };
struct QuantDim {
  QuantAxis axis = QuantAxis::kOther;
  std::uint64_t div = 1;
  bool whole_when_row = false;
};

enum class Fusion : std::uint8_t {
  kNone,         // output keeps the checkpoint name
  kConcat,       // output `fused_name` = concatenation along dim 0 of slots 0..slots-1
  kExpertStack,  // output `fused_name` = stack over local experts of [slot 0; slot 1; ...]
};

// Which MLP a decoder layer has.
enum class LayerMlp : std::uint8_t {
  kAny,     // not constrained by config.json (DeepSeek-style and dense families)
  kDense,   // mlp.{gate,up,down}_proj
  kSparse,  // mlp.gate (router) + mlp.experts.<e>.*
};

// The MLP config.json gives `layer`, exactly as vLLM's (and transformers') Qwen3MoeDecoderLayer
// decide: Qwen3-MoE layer L is sparse when num_experts > 0 (also spelled num_local_experts, as
// transformers 5 writes it), L is not in mlp_only_layers and (L + 1) % decoder_sparse_step == 0,
// dense otherwise. Other families: kAny. InvalidArgument when a Qwen3-MoE with experts has
// decoder_sparse_step 0 (vLLM and transformers divide by it).
Result<LayerMlp> LayerMlpOf(const ModelConfig& config, Family family, int layer);

// The classification of one checkpoint tensor.
struct TensorRule {
  Role role =
      Role::kReplicated;  // the parameter's own role (bias of a row-parallel -> kReplicated)
  Param param = Param::kWeight;
  int layer = -1;   // -1: not a per-layer tensor
  int expert = -1;  // -1: not a routed expert
  Fusion fusion = Fusion::kNone;
  std::string fused_name;    // output name in the fused layout (empty when fusion == kNone)
  int slot = 0;              // position inside the fused output
  int slots = 1;             // parts per fused output (per expert for stacks)
  std::string_view pattern;  // the matching row's pattern, for messages
  bool scalable = false;     // the row accepts X.weight_scale_inv (FP8 block scales)
  std::vector<std::uint64_t> expected;  // shape config.json implies
  std::vector<Part> parts;              // kParts: dim 0's parts in order
  bool per_tensor = false;              // kQuantScale: one value for the whole of X.weight
  // kExpertDim: the dim TP splits and its index range per unit of intermediate size
  // ([s * split_mul / split_div, e * split_mul / split_div)); rank0_only: under TP only tp rank
  // 0 holds the values, the others zeros (a row-parallel bias summed once); transposed: vLLM
  // transposes it at load, and the fused layout holds it so (its last two dims swapped, by the
  // rank after the copies: TensorOut.transpose).
  int split_dim = 0;
  std::uint32_t split_mul = 1;
  std::uint32_t split_div = 1;
  bool rank0_only = false;
  bool transposed = false;
  // kExpertDim: dim split_dim holds [gate; up] halves (llama4's gate_up_proj [E, H, 2I]): under TP
  // the rank's range of each half, side by side.
  bool halves = false;
  // The fused layout de-interleaves each head's rotary pairs (rows 0, 2, 4, ... then 1, 3, ...), as
  // vLLM's Llama 4 loader permutes q/k for its neox-style rotary embedding; 0: as stored.
  std::uint64_t rotary_head_dim = 0;
  // kGrouped: the tensor's dims; concat_dim: the dim the fused layout concatenates slots along
  // (X's N dim), -1 when it has none (g_idx, weight_shape: the fused output is slot 0's alone).
  std::vector<QuantDim> qdims;
  int concat_dim = 0;
  std::uint64_t qn = 0;  // kGrouped: X's output and input sizes
  std::uint64_t qk = 0;
};

// FP8 block size from quantization_config.weight_block_size ({rows, cols}); {0, 0} when absent.
struct BlockSize {
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
};
BlockSize BlockSizeOf(const ModelConfig& config);

// Classifies `name` (a tensor of `shape` stored in file `file_label`) and checks its shape
// against config.json. Skipped tensors (lm_head with tied embeddings, DeepSeek MTP layers past
// num_hidden_layers) come back as Role::kSkip without a shape check.
Result<TensorRule> ClassifyTensor(const ModelConfig& config, Family family, std::string_view name,
                                  const std::vector<std::uint64_t>& shape,
                                  std::string_view file_label);

// The shape config.json implies for tensor `name` of `family` (what ClassifyTensor checks), e.g.
// for writing a checkpoint from ForEachImpliedTensor's names. NotFound when no row matches;
// InvalidArgument for an FP8 per-tensor/per-channel scale, whose shape ([], [1], [N], [N, 1]) the
// checkpoint chooses.
Result<std::vector<std::uint64_t>> ImpliedShape(const ModelConfig& config, Family family,
                                                std::string_view name);

// True when a row of `family` accepts `name` (layer and expert indices are not range-checked).
bool HasRule(Family family, std::string_view name);

// True when decoder layer `layer` has routed experts (else a dense MLP): Qwen3-MoE: num_experts
// > 0, not in mlp_only_layers (sorted, as ParseModelConfig leaves it) and
// (layer + 1) % decoder_sparse_step == 0; DeepSeek-V3:
// n_routed_experts > 0, layer >= first_k_dense_replace and layer % moe_layer_freq == 0.
bool LayerIsSparse(const ModelConfig& config, Family family, std::int64_t layer);

// Which part of the implied tensors to walk: all of them (model order: embed_tokens, layer 0
// with its experts, layer 1, ..., norm, lm_head); the model-level ones (embed_tokens, norm,
// lm_head); layer `layer`'s tensors without its routed experts; or routed expert `expert` of
// layer `layer` (nothing for a dense layer). Indices out of the config's range give nothing.
enum class ImpliedPart : std::uint8_t { kAll, kModel, kLayer, kExpert };
struct ImpliedSlice {
  ImpliedPart part = ImpliedPart::kAll;
  std::int64_t layer = 0;
  std::int64_t expert = 0;
};

// Called per implied tensor with the config key and value that imply it ("num_hidden_layers =
// 36", "num_experts = 8", "tie_word_embeddings = false"; valid during the call only). Returns
// false to stop the walk.
using ImpliedFn = std::function<bool(const std::string& name, std::string_view because)>;

// Walks every tensor config.json implies for `family` in `slice`: per layer the two norms, the
// attention projections (MLA for DeepSeek: q_a/q_a_layernorm/q_b with q_lora_rank, else q_proj),
// Qwen3's q/k norms, biases (Qwen2's q/k/v; q/k/v/o with attention_bias), then a dense MLP or
// the router (DeepSeek: e_score_correction_bias with topk_method noaux_tc, shared experts with
// n_shared_experts) and the routed experts; embed_tokens, norm, and lm_head unless
// tie_word_embeddings. FP8 scales are not listed: a weight needs one when it is stored in an FP8
// dtype (model_checks.h checks that), whatever the config says. Cost: one name per call; the
// config's sizes are bounded by ParseModelConfig.
void ForEachImpliedTensor(const ModelConfig& config, Family family, const ImpliedFn& fn,
                          ImpliedSlice slice = {});

// docs/LAYOUT.md's table for `family`, made from the rule table: a markdown heading naming the
// architectures that select it, then one line per tensor kind (checkpoint name, role, shape in
// config.json's terms, when config.json implies it, vLLM's fused output). A test keeps the doc
// equal to it.
std::string FamilyTableMarkdown(Family family);

// docs/LAYOUT.md's table of the integer and FP4 formats, made from the format table: per format
// (and the config.json keys that select it) each tensor of a quantized linear layer X (weight
// [N, K]), its dtype and shape, how column, kv-head and row splits slice it, and its fused form.
// A test keeps the doc equal to it.
std::string FormatTableMarkdown();

// Checks the compiled table: no family has two rows for one name (Status::Internal naming both
// patterns otherwise).
Status ValidateRuleTable();

// "[a, b, c]".
std::string ShapeString(const std::vector<std::uint64_t>& shape);

}  // namespace hoist::planner
