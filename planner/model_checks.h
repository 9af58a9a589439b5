// Checks of a model against a topology and against its own config.json, run by BuildLoadPlan
// before it slices anything.
//
// CheckParallelism: every divisibility the layout needs, as vLLM asserts it when it builds the
// model (facts from vLLM's LlamaAttention / DeepseekV2MLAAttention / ColumnParallelLinear /
// RowParallelLinear / VocabParallelEmbedding / FusedMoE):
//   num_attention_heads % tp == 0 (GQA and MLA heads);
//   GQA: tp <= num_key_value_heads ? num_key_value_heads % tp == 0 : tp % num_key_value_heads == 0;
//   intermediate_size % tp when a layer has a dense MLP;
//   moe_intermediate_size % tp when routed experts are tp-sliced (ep == 0);
//   DeepSeek: (moe_intermediate_size x n_shared_experts) % tp for the shared experts;
//   vocab_size padded to a multiple of 64, % tp;
//   ep > 0: num_experts % ep == 0 (hoist places an equal number of experts on every rank).
// Failure: InvalidArgument "tp 32 does not divide num_attention_heads = 16 (<dir>/config.json);
// tp values that work for this model: 1, 2, 4, 8, 16". The tp values listed satisfy every rule
// above and keep the checkpoint's FP8 scale blocks whole.
//
// CheckComplete: every tensor ForEachImpliedTensor (planner/rules.h) lists must be in the
// checkpoint. The common (complete) case costs one pass over the names against small key sets;
// only a failure walks the implied names to the first missing one.
// Failure: Corrupt "<dir>: the checkpoint is incomplete: tensor 'X' is missing, which
// config.json implies (num_hidden_layers = 36); N implied tensors are missing in all" (and,
// when the layers stop early, "the checkpoint holds tensors of layers 0 to K only, but
// num_hidden_layers = L").
//
// CheckScales: the weight_scale_inv of every FP8 weight whose rule accepts one must be present
// (the plan builder calls it only when its counts say one is missing: it is a lookup per
// tensor). Failure: Corrupt as above, "... which config.json implies ('X.weight' is stored as
// F8_E4M3, which needs its block scales)".
//
// ReportUnexpected: tensors no rule of the family knows, per UnexpectedTensors.
// Failure (kError): Corrupt "<dir>: N tensors that no <family> rule knows: 'a', 'b', ...".
//
// Threading: pure functions (ReportUnexpected logs one spdlog warning under kWarn).
#pragma once

#include <string>
#include <vector>

#include "hoist/status.h"
#include "planner/checkpoint.h"
#include "planner/plan_options.h"
#include "planner/rules.h"

namespace hoist::planner {

Status CheckParallelism(const Checkpoint& ckpt, Family family, const PlanOptions& options);

Status CheckComplete(const Checkpoint& ckpt, Family family);

Status CheckScales(const Checkpoint& ckpt, Family family);

// Unsupported naming config.json's quantization_config when hoist cannot slice its format: FP8
// (block, per-channel or per-tensor scales: quant_method fp8, fbgemm_fp8, compressed-tensors
// float-quantized, ModelOpt FP8), gpt_oss's MXFP4 experts and unquantized checkpoints plan;
// GPTQ, AWQ, integer compressed-tensors, NVFP4 and MXFP4 elsewhere do not yet.
Status CheckQuantization(const Checkpoint& ckpt, Family family);

Status ReportUnexpected(const Checkpoint& ckpt, Family family,
                        const std::vector<std::string>& names, UnexpectedTensors mode);

}  // namespace hoist::planner
