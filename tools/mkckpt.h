// hoist-mkckpt: writes a real HuggingFace-layout checkpoint (config.json, the sharded index and
// safetensors shards, or one model.safetensors) with deterministic, non-trivial tensor content.
//
// Families: every family the planner has rules for (planner/rules.h), spelled with '-' for '_'
// (llama, qwen2, qwen3, qwen3-moe, deepseek-v3, deepseek-v2, glm-moe-dsa, mixtral, minimax-m2,
// qwen2-moe, glm4-moe, gemma3-text, phi3, qwen3-next, qwen3-5, qwen3-5-moe, gpt-oss, llama4,
// deepseek-v4), and
// mistral (the llama rules). A config's tensor list is the planner's: ForEachImpliedTensor names
// the tensors in model order and ImpliedShape gives their shapes, so planning, docs/LAYOUT.md and
// these checkpoints follow one table. Dtypes: BF16, except what transformers saves otherwise (the
// DeepSeek-style router's mlp.gate.e_score_correction_bias F32; gpt_oss MXFP4 _blocks / _scales
// U8); with quantization_config quant_method fp8 and weight_block_size, every weight whose rule
// accepts block scales (the linear projections, not norms, embeddings, routers or lm_head) is
// F8_E4M3 followed by its F32 weight_scale_inv; DeepSeek-V4 as DeepSeek publishes it (X.scale
// F8_E8M0, or F32 with expert_dtype fp8; MXFP4 experts I8; F32 hc_*, ape, sinks, router bias;
// I64 tid2eid). tests/tools/presets_test.cc checks the lists
// against the ones transformers writes (tests/data/hf).
//
// Presets (--list-presets): the original shapes (qwen3-4b, qwen3-tiny, qwen3-tiny-untied,
// qwen3-fp8-tiny, qwen2-tiny, llama-tiny, qwen3-moe-tiny, deepseek-v3-tiny, deepseek-v3-small);
// <family>-tiny for every other family, with the exact config.json transformers 5.17 writes for
// tests/data/hf (hidden 128, 8 heads, 4 kv heads, 8 experts, 2-4 layers, vocab 1000; gpt-oss-
// mxfp4-tiny in MXFP4); and <family>-mid for every MoE family (2-3 GB: hidden 2048, 16-32
// experts, vocab 32000; deepseek-v3-small is DeepSeek-V3's), the same configs scaled.
// deepseek-v3-671b is DeepSeek-V3-671B's shape (627 GiB, 90,427 tensors), meant for planning at
// scale with header_only.
//
// Content: every byte is a pure function of (seed, tensor name, byte position), so the same
// seed gives the same files whatever the thread count or shard size. BF16 values are small
// normal numbers (never zero, never inf/NaN); FP8 E4M3 weights are block-quantized normal
// weights as real FP8 checkpoints hold them (tools/fp8_content.h: 128 x 128 blocks, scale amax /
// 448, so each block's largest magnitude is 448; never NaN); F32 scales are positive, finite and
// normal (not the weights' actual block scales).
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
  std::string family;       // a family (see Families above; may be empty with a preset,
                            // which implies its family, or with a config)
  std::string preset;       // one of PresetNames(); exclusive with config_path
  std::string config_path;  // a config.json of a supported family
  // With config_path: a JSON object {name: [dtype, shape]} listing the tensors to write instead
  // of those the config implies (tests/data/hf: the lists transformers writes), any family.
  std::string tensors_path;
  std::string out_dir;           // created if missing; existing checkpoint files are overwritten
  std::uint64_t shard_size = 0;  // bytes; 0 = 5,000,000,000
  std::uint64_t seed = 0;
  int threads = 0;  // 0 = std::thread::hardware_concurrency()
  // Headers only: config.json, the index and every shard's header are written as usual, but no
  // tensor byte; each shard is sized with ftruncate, so its data section is a sparse hole (reads
  // as zeros). For planning at full scale (a 671B shape in a few MB of disk).
  bool header_only = false;
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

// The model_type a family's configs carry: "qwen3-moe" -> "qwen3_moe", "deepseek-v3" ->
// "deepseek_v3", "qwen3-5" -> "qwen3_5_text" (as transformers 5 writes Qwen3_5ForCausalLM);
// InvalidArgument naming the known families for an unknown one.
Result<std::string> FamilyModelType(const std::string& family);

// Ok when the planner selects `family` for config.json (architectures, else model_type; see
// planner/rules.h FamilyOf); InvalidArgument naming the config's model_type and family otherwise,
// and ListTensorSpecs's errors for a config it cannot read.
Status CheckConfigFamily(const std::string& family, std::string_view config_json);

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors spelling: BF16, F8_E4M3, F32
  std::vector<std::uint64_t> shape;
  std::uint64_t Bytes() const;
};

// Every tensor of a checkpoint with this config.json, in model order (see Layout above),
// without writing anything. The family is the planner's (architectures, else model_type); a
// vision-language config (text_config) lists its text model under the text model's names
// (model.X), without the vision tower. Errors: Unsupported for an architecture without family
// rules or a quantization other than FP8 block scales (and gpt_oss MXFP4); InvalidArgument for a
// config the planner refuses (its message names the key).
Result<std::vector<TensorSpec>> ListTensorSpecs(std::string_view config_json);

// Fills out[0, end - begin) with bytes [begin, end) of tensor `spec`'s content for `seed`.
// `begin` must be a multiple of 8. Exposed for tests and benchmarks.
void GenerateTensorBytes(const TensorSpec& spec, std::uint64_t seed, std::uint64_t begin,
                         std::uint64_t end, std::uint8_t* out);

}  // namespace hoist::tools
