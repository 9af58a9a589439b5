// The tests' independent reference for sharding: what rank `rank` must hold after a load.
//
// Written from docs/LAYOUT.md and DESIGN.md only; it shares no code with planner/ or
// transport/ (it has its own tiny safetensors reader). It reads each WHOLE tensor from the
// checkpoint and builds every output tensor of the rank by plain row/element loops: obviously
// correct, not fast. Use it on small fixtures.
//
// Rules implemented (LAYOUT.md): column, row, kv-head replication (tp > kv heads), vocab
// padding to a multiple of 64 with zero rows, tied embeddings (no lm_head output), replicated
// tensors, FP8 block scales sliced in whole blocks, FP8 per-channel and per-tensor scales,
// gpt_oss experts (BF16 and MXFP4), Llama 4 (3-D experts in halves, hf layout; q/k heads
// de-interleaved in the fused layout, as vLLM permutes them), experts under EP (linear /
// round-robin, only owned experts, whole) and with EP off (tp-sharded), and both layouts (hf,
// fused).
//
// Quantized linear layers X whose weight is [N, K] (vLLM's loaders; config.json's
// quantization_config picks the format):
//   GPTQ (bits b, p = 32/b, group g, G = K/g or 1 for g = -1): qweight I32 [K/p, N],
//     qzeros I32 [G, N/p], scales F16 [G, N], g_idx I32 [K];
//   AWQ: qweight I32 [K, N/p], qzeros I32 [G, N/p], scales F16 [G, N];
//   compressed-tensors pack-quantized (WNA16): weight_packed I32 [N, K/p], weight_scale [N, G],
//     weight_zero_point I32 [N/p, G], weight_g_idx I32 [K], weight_shape I64 [2];
//   NVFP4, ModelOpt: weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16], weight_scale_2 and
//     input_scale F32 []; compressed-tensors: weight_packed U8 [N, K/2], weight_scale
//     F8_E4M3 [N, K/16], weight_global_scale and input_global_scale F32 [1].
// - Each dim is N or K over a divisor (p, 2, 16, 1), K in groups (G), or nothing. The weight's
//   range [lo, hi) on its split axis (column: N, with the kv-head rule for k/v; row: K;
//   replicated: whole) takes dims on that axis to [lo/div, hi/div); lo or hi not a multiple of
//   div throws ("tp values that work"). Other dims and scalars are whole.
// - Under a row split the group dim of scales and zero points stays whole with act order
//   (GPTQ desc_act, compressed-tensors actorder "group") or one group (channelwise); g_idx
//   is split.
// - Fused layout: slots (q/k/v, gate/up, q_a/kv_a) joined along the N dim (dim 0; dim 1 for
//   GPTQ/AWQ), scalars one value per slot ([slots]), tensors with no N dim (g_idx,
//   weight_shape) slot 0's only; experts stack [E_local, ...] of each expert's gate|up (w13_*)
//   and of the downs (w2_*; a [1] scalar as one value: [E_local]).
//
// Failure: test code, so it throws std::runtime_error with a message naming the file, tensor
// and sizes (bad checkpoint, unsupported tensor, n % tp != 0, a shard boundary inside an FP8
// block, E % ep != 0, ...).
// Threading: no shared state; concurrent calls are fine.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hoist::testref {

struct RefTensor {
  std::string dtype;  // safetensors spelling: BF16, F8_E4M3, F32, ...
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;  // row-major, contiguous
};

struct RefOptions {
  int tp = 1;
  int ep = 0;                // 0: expert parallelism off; > 0: world = ep and tp_rank = rank % tp
  int rank = 0;              // world rank; tp_rank = rank % tp
  bool fused = true;         // fused layout (default) or hf
  bool round_robin = false;  // expert placement under EP: linear (false) or round-robin
};

// Output name -> tensor, exactly what `rank` holds for the checkpoint in `model_dir`.
std::map<std::string, RefTensor> ReferenceRankTensors(const std::string& model_dir,
                                                      const RefOptions& o);

}  // namespace hoist::testref
