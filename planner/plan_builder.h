// Building the LoadPlan: family rules x topology -> per-rank copies, fills and tensor table.
//
// Sharding follows vLLM exactly (see docs/DESIGN.md / ../shared/DESIGN.md, "Sharding semantics").
// world = tp x dp; rank r has tp_rank = r % tp, dp_rank = r / tp. With ep > 0 experts are spread
// over all world ranks (ep must equal world) and each expert is whole on its owner; with ep = 0
// experts are tp-sharded like any MLP.
//
// Failure: plan-time errors (an FP8 block split by a shard boundary, a dimension not divisible by
// tp, an unknown family, a tensor no rule matches, config/shape disagreement) are
// Status::InvalidArgument or Unsupported naming the tensor, the sizes and the fix.
// Threading: pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "hoist/status.h"
#include "planner/checkpoint.h"
#include "proto/plan.pb.h"

namespace hoist::planner {

struct RankLocation {
  std::uint32_t node = 0;
  std::uint32_t gpu = 0;
};

struct PlanOptions {
  int tp = 1;
  int dp = 1;  // ignored when ep > 0 (then dp = ep / tp)
  int ep = 0;  // 0: expert parallelism off
  proto::Layout layout = proto::LAYOUT_FUSED;
  proto::ExpertPlacement placement = proto::PLACEMENT_LINEAR;
  std::uint64_t alignment = 256;
  // Optional: where each rank runs; empty means one node, gpu = rank.
  std::vector<RankLocation> locations;
  // Read shared bytes once per node / job and forward them (planner/dedup.h). AUTO decides
  // per plan; gpu_peers says whether the ranks load into GPUs with direct peer access.
  proto::Dedup dedup = proto::DEDUP_AUTO;
  std::uint64_t dedup_step_bytes = 64ull << 20;  // shared bytes per exchange step (per group)
  bool gpu_peers = false;
};

Result<proto::LoadPlan> BuildLoadPlan(const Checkpoint& ckpt, const PlanOptions& options);

}  // namespace hoist::planner
