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
// Failure: ClassifyTensor returns Status::InvalidArgument naming the tensor when no rule matches,
// when a layer or expert index is out of the config's range, when the tensor belongs to the
// other kind of MLP than config.json gives its layer (LayerMlpOf: a dense MLP where vLLM builds
// experts, or experts where it builds a dense MLP), or when the tensor's shape disagrees with
// config.json (expected and actual shapes in the message); FamilyOf returns
// Unsupported for a model_type with no rows.
// Threading: all functions are pure; the compiled table is immutable after a thread-safe
// one-time initialisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "planner/checkpoint.h"

namespace hoist::planner {

enum class Family : std::uint8_t { kLlama, kQwen2, kQwen3, kQwen3Moe, kDeepseekV3 };

// "llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3".
std::string_view FamilyName(Family family);

// The family of config.json's model_type ("mistral" uses the llama rows). Unsupported otherwise.
Result<Family> FamilyOf(const ModelConfig& config);

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
  kSkip,        // not loaded: lm_head with tied embeddings, DeepSeek MTP layers
};

std::string_view RoleName(Role role);

enum class Param : std::uint8_t {
  kWeight,  // X.weight
  kBias,    // X.bias
  kScale,   // X.weight_scale_inv (FP8 block scale of X.weight)
  kOther,   // another parameter a row lists (e.g. e_score_correction_bias)
};

enum class Fusion : std::uint8_t {
  kNone,         // output keeps the checkpoint name
  kConcat,       // output `fused_name` = concatenation along dim 0 of slots 0..slots-1
  kExpertStack,  // output `fused_name` = stack over local experts of [slot 0; slot 1; ...]
};

// Which MLP a decoder layer has.
enum class LayerMlp : std::uint8_t {
  kAny,     // not constrained by config.json (families other than Qwen3-MoE)
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
  std::vector<std::uint64_t> expected;  // shape config.json implies
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

// Checks the compiled table: no family has two rows for one name (Status::Internal naming both
// patterns otherwise).
Status ValidateRuleTable();

// "[a, b, c]".
std::string ShapeString(const std::vector<std::uint64_t>& shape);

}  // namespace hoist::planner
