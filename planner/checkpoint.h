// A HuggingFace checkpoint folder: config.json, and either model.safetensors.index.json with its
// shards or a single model.safetensors. Everything here is read by rank 0 only, once.
//
// The folder: one that does not exist, is not a directory or has no config.json is the user's
// mistake: Status::InvalidArgument naming the path. Every file is opened only if it is a regular
// file, without ever blocking (planner/regular_file.h): a FIFO, a device or a directory in
// place of config.json, the index or a shard is Status::Corrupt ("<path> is a FIFO, not a
// regular file").
//
// Validation (Status::Corrupt / NotFound naming the file and tensor): the index names a shard
// that is missing (NotFound), a tensor missing from the shard the index names (NotFound), a
// tensor in a shard that the index does not map to that shard (Corrupt: covers duplicates
// across shards), a shard-named file (model-NNNNN-of-NNNNN.safetensors) that the index names no
// tensor of but that holds a tensor the index does not know (Corrupt naming both), invalid index
// JSON or structure, a path leaving the model folder (`..`, absolute, or a symlink resolving
// outside: every file read, config.json and the index included, must resolve inside the canonical
// model folder; note that this refuses a HuggingFace hub cache snapshot, whose files are symlinks
// into ../../blobs). Every shard header is validated as in safetensors.h. config.json shapes that
// disagree with tensor shapes are checked by the planner's family rules, not here.
//
// Threading: pure functions over their inputs; a Checkpoint is immutable once returned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hoist/status.h"
#include "planner/packed_index.h"
#include "planner/safetensors.h"

namespace hoist::planner {

// The fields of config.json the planner uses. Missing (or null) optional fields keep their
// defaults; a missing or null required field (hidden_size, num_hidden_layers,
// num_attention_heads, vocab_size: all must be positive) is an error, and so is a field of the
// wrong type (integers must be non-negative JSON integers) or a num_key_value_heads of 0.
// Sizes are bounded so that nothing derived from them overflows or runs away: every integer at
// most 2^30, num_hidden_layers and the expert count at most 65536, integer arrays at most 65536
// entries (Corrupt naming the key, the value and the bound). Errors are Status::Corrupt naming
// `label` (the config.json path) and the key.
struct ModelConfig {
  std::string model_type;  // "llama", "qwen2", "qwen3_moe", "deepseek_v3", "mixtral", ...
  std::vector<std::string> architectures;
  // A vision-language checkpoint (config.json with a text_config): the fields come from
  // text_config (architectures, tie_word_embeddings and quantization_config from the top level
  // when given there), and OpenCheckpoint takes its text model (see Checkpoint::tensors).
  bool text_model = false;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t intermediate_size_mlp = 0;  // Llama 4: the dense layers' intermediate size
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  std::int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  std::int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // GQA families: q/k/v/o biases (Qwen2 always has q/k/v biases)
  // Mixture of experts (Qwen3-MoE: num_experts; DeepSeek-V3: n_routed_experts).
  std::int64_t num_experts = 0;  // also read from n_routed_experts / num_local_experts
  std::int64_t moe_intermediate_size = 0;
  std::int64_t n_shared_experts = 0;
  std::int64_t first_k_dense_replace = 0;     // DeepSeek: layers [0, k) are dense
  std::int64_t decoder_sparse_step = 1;       // Qwen3-MoE
  std::int64_t moe_layer_freq = 1;            // DeepSeek: MoE layers are those with L % freq == 0
  std::string topk_method;                    // DeepSeek: "noaux_tc" has e_score_correction_bias
  std::vector<std::int64_t> mlp_only_layers;  // Qwen3-MoE; sorted, no duplicates
  // DeepSeek MLA.
  std::int64_t q_lora_rank = 0;  // 0: no q_a/q_b (plain q_proj)
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  // DeepSeek sparse attention's indexer (GLM-5): index_n_heads x index_head_dim.
  std::int64_t index_n_heads = 0;
  std::int64_t index_head_dim = 0;
  // Qwen2-MoE / Qwen3-Next / Qwen3.5-MoE: one shared expert of this size (0: none).
  std::int64_t shared_expert_intermediate_size = 0;
  bool use_qk_norm = false;  // GLM-4.5: per-head q_norm / k_norm
  // DeepSeek-V4: grouped low-rank output projection (wo_a [o_groups x o_lora_rank, heads x
  // head_dim / o_groups], wo_b), hyper-connections of hc_mult streams, per-layer KV compression
  // (compress_ratios[L]: 0 or 1 none, 4 with the sparse-attention indexer, else a compressor
  // alone), hash-routed MoE on layers [0, num_hash_layers) (a [vocab, num_experts_per_tok]
  // tid2eid table), and the routed experts' format (expert_dtype "fp4": MXFP4, "fp8": FP8
  // blocks; empty when absent, which vLLM reads as "fp4").
  std::int64_t o_groups = 0;
  std::int64_t o_lora_rank = 0;
  std::int64_t hc_mult = 0;
  std::int64_t num_hash_layers = 0;
  std::int64_t num_experts_per_tok = 0;
  std::vector<std::int64_t> compress_ratios;
  std::string expert_dtype;
  // Hybrid linear attention (Qwen3-Next, Qwen3.5): gated delta-net layers beside full attention.
  std::int64_t linear_num_key_heads = 0;
  std::int64_t linear_num_value_heads = 0;
  std::int64_t linear_key_head_dim = 0;
  std::int64_t linear_value_head_dim = 0;
  std::int64_t linear_conv_kernel_dim = 0;
  std::int64_t full_attention_interval = 0;  // layer L is full attention when (L+1) % this == 0
  // layer_types: per layer, 1 for "linear_attention" (empty when absent: the interval decides).
  std::vector<std::uint8_t> linear_layers;
  // Quantization (DeepSeek-V3 FP8): weight_block_size, e.g. {128, 128}; empty when absent.
  std::string quant_method;
  std::string quant_format;  // compressed-tensors: "float-quantized", "pack-quantized", ...
  std::string quant_algo;    // ModelOpt: "FP8", "NVFP4", ...
  std::vector<std::int64_t> weight_block_size;
  // Integer and FP4 formats (GPTQ, AWQ, compressed-tensors pack-quantized / nvfp4-pack-quantized,
  // ModelOpt NVFP4): GPTQ/AWQ `bits`, `group_size` and `desc_act`; compressed-tensors from its
  // first config group's `weights` (num_bits, group_size, actorder, symmetric; its `format` when
  // quantization_config has none); ModelOpt `group_size`.
  std::int64_t quant_bits = 0;
  std::int64_t quant_group_size = 0;  // 0: one group over the input dim (-1, null, "channel")
  bool quant_act_order = false;       // GPTQ desc_act; compressed-tensors actorder "group"
  bool quant_symmetric = true;        // compressed-tensors: false adds weight_zero_point
};

Result<ModelConfig> ParseModelConfig(std::string_view label, std::string_view json_text);

struct ShardFile {
  std::string rel_path;  // as named by the index, e.g. "model-00001-of-00002.safetensors"
  std::string abs_path;  // canonical absolute path
  FileStat stat;
  SafetensorsHeader header;
};

struct TensorLocation {
  std::uint32_t file = 0;   // index into Checkpoint::files
  std::uint32_t entry = 0;  // index into files[file].header.tensors
};

struct Checkpoint {
  std::string dir;  // canonical absolute model folder
  ModelConfig config;
  std::vector<ShardFile> files;  // sorted by rel_path; one entry per distinct canonical file
  // By name. For a vision-language checkpoint, the text model's tensors under the text model's
  // own names (model.language_model.X and language_model.model.X are model.X,
  // language_model.lm_head.X is lm_head.X; their TensorEntry names are renamed alike), without
  // the vision tower and projector (vision_tensors counts them; their bytes are not read).
  std::unordered_map<std::string, TensorLocation> tensors;
  std::uint64_t tensor_bytes = 0;  // sum of the bytes of `tensors`
  std::uint64_t vision_tensors = 0;
  // A packed checkpoint (docs/PACKED.md): files are its shards, each with a made-up header whose
  // tensors lie back to back in a logical data section (data_start 0, offsets of the original
  // bytes); `packed` says where their codec streams really are.
  std::optional<PackedIndex> packed;

  const TensorEntry* Find(std::string_view name) const;
  const TensorEntry& Entry(const TensorLocation& loc) const {
    return files[loc.file].header.tensors[loc.entry];
  }
};

// Reads config.json, the index (or the single file) and every shard's header. A folder holding
// hoist-packed.json is a packed checkpoint: its index (ReadPackedIndex) replaces the safetensors
// index and headers.
Result<Checkpoint> OpenCheckpoint(const std::string& dir);

}  // namespace hoist::planner
