// The tests' independent reference for sharding: what rank `rank` must hold after a load.
//
// Written from docs/LAYOUT.md and DESIGN.md only; it shares no code with planner/ or
// transport/ (it has its own tiny safetensors reader). It reads each WHOLE tensor from the
// checkpoint and builds every output tensor of the rank by plain row/element loops: obviously
// correct, not fast. Use it on small fixtures.
//
// Rules implemented (LAYOUT.md): column, row, kv-head replication (tp > kv heads), vocab
// padding to a multiple of 64 with zero rows, tied embeddings (no lm_head output), replicated
// tensors, FP8 block scales sliced in whole blocks, experts under EP (linear / round-robin,
// only owned experts, whole) and with EP off (tp-sharded), and both layouts (hf, fused).
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
