// hoist-mkckpt: writes a real HuggingFace-layout checkpoint (config.json, the sharded index and
// safetensors shards, or one model.safetensors) with deterministic, non-trivial tensor content.
//
// Families: llama, qwen2, qwen3 (dense), qwen3-moe, deepseek-v3 (MLA + MoE + FP8 E4M3 weights
// with F32 128x128 block scales). Tensor names and shapes are exactly the HuggingFace ones.
//
// Content: every byte is a pure function of (seed, tensor name, byte position), so the same
// seed gives the same files whatever the thread count or shard size. BF16 values are small
// normal numbers (never zero, never inf/NaN); FP8 E4M3 bytes are never NaN (0x7F / 0xFF) or
// zero; F32 scales are positive, finite and normal.
//
// Layout: tensors are assigned to shards in model order (embed, layer 0, 1, ..., norm,
// lm_head); a new shard starts when the next tensor would push the current one past
// shard_size (default 5 GB, as HF). Inside a shard tensors are stored in name order. When
// everything fits one shard the output is a single model.safetensors and no index.
//
// Failure: every function returns a Status naming the preset, config key or file; nothing
// throws across this interface and nothing exits.
// Threading: MakeCheckpoint runs its own pool of `threads` workers (0 = hardware concurrency)
// and joins them before returning; all functions are safe to call concurrently on distinct
// output folders.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"

namespace hoist::tools {

struct MkckptOptions {
  std::string family;       // qwen3 | qwen2 | qwen3-moe | deepseek-v3 | llama (may be empty
                            // with a preset, which implies its family)
  std::string preset;       // one of PresetNames(); exclusive with config_path
  std::string config_path;  // a config.json of a supported family
  // With config_path: a JSON object {name: [dtype, shape]} listing the tensors to write instead
  // of those the config implies (tests/data/hf: the lists transformers writes), any family.
  std::string tensors_path;
  std::string out_dir;           // created if missing; existing checkpoint files are overwritten
  std::uint64_t shard_size = 0;  // bytes; 0 = 5,000,000,000
  std::uint64_t seed = 0;
  int threads = 0;  // 0 = std::thread::hardware_concurrency()
};

inline constexpr std::uint64_t kDefaultShardSize = 5'000'000'000ull;

// Writes the checkpoint described by `options` into options.out_dir.
hoist::Status MakeCheckpoint(const MkckptOptions& options);

// The built-in presets, sorted.
std::vector<std::string> PresetNames();

// The family (e.g. "qwen3-moe") of a preset.
Result<std::string> PresetFamily(const std::string& preset);

// The config.json text of a preset (what MakeCheckpoint writes for it).
Result<std::string> PresetConfigJson(const std::string& preset);

// "qwen3-moe" -> "qwen3_moe", "deepseek-v3" -> "deepseek_v3"; error for an unknown family.
Result<std::string> FamilyModelType(const std::string& family);

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling: BF16, F8_E4M3, F32
  std::vector<std::uint64_t> shape;
  std::uint64_t Bytes() const;
};

// Every tensor of a checkpoint with this config.json, in model order (see Layout above),
// without writing anything. The family is the config's model_type.
Result<std::vector<TensorSpec>> ListTensorSpecs(std::string_view config_json);

// Fills out[0, end - begin) with bytes [begin, end) of tensor `spec`'s content for `seed`.
// `begin` must be a multiple of 8. Exposed for tests and benchmarks.
void GenerateTensorBytes(const TensorSpec& spec, std::uint64_t seed, std::uint64_t begin,
                         std::uint64_t end, std::uint8_t* out);

}  // namespace hoist::tools
