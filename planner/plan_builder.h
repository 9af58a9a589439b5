// Building the LoadPlan: family rules x topology -> per-rank copies, fills and tensor table.
//
// Sharding follows vLLM exactly (see docs/DESIGN.md / ../shared/DESIGN.md, "Sharding semantics").
// world = tp x dp; rank r has tp_rank = r % tp, dp_rank = r / tp. With ep > 0 experts are spread
// over all world ranks (ep must equal world) and each expert is whole on its owner; with ep = 0
// experts are tp-sharded like any MLP.
//
// Checks, in order (each failure names the file, key or tensor and the fix):
//  1. the options' ranges (ValidatePlanOptions, planner/plan_options.h): InvalidArgument;
//  2. the family (Unsupported for a model_type without rules);
//  3. every divisibility the layout needs, as vLLM checks it (planner/model_checks.h):
//     InvalidArgument naming the config key, its value and the tp / ep values that work;
//  4. every tensor config.json implies must be present (planner/model_checks.h; Corrupt naming
//     the first missing tensor, the config key and the folder, and how many are missing);
//     then every tensor: its rule and shape (planner/rules.h; Corrupt), tensors no rule knows
//     per PlanOptions::unexpected;
//  5. slicing: an FP8 block split by a shard boundary is InvalidArgument naming the tensor,
//     the sizes and the fix.
// Threading: a pure function, apart from the one spdlog warning of UnexpectedTensors::kWarn.
#pragma once

#include <cstdint>

#include "hoist/status.h"
#include "planner/checkpoint.h"
#include "planner/plan_options.h"
#include "proto/plan.pb.h"

namespace hoist::planner {

// What a LoadPlan's fields mean (LoadPlan.version). Every rank of a job reads the plan rank 0
// writes, so each says its format in its hello and rank 0 refuses a job whose ranks differ
// (coordinator/job.cc): hosts running different hoist builds would otherwise misread fields
// silently. Raise it whenever a field's meaning changes or a field a rank must not ignore is
// added. 1: the first; 2: codec format 4 packed streams and job dedup's class templates
// (2026-12-06), and the first hoist that checks it.
inline constexpr std::uint32_t kPlanFormat = 2;

// The compact plan (planner/plan_set.h): one rank plan per class (tp rank, or rank under ep), the
// placement and the dedup templates; what rank 0 plans and `hoist plan --out` writes. Its size
// and the work grow with the classes and the tensors, not with the world.
Result<proto::LoadPlan> BuildCompactPlan(const Checkpoint& ckpt, const PlanOptions& options);

// The expanded plan (every rank's; ExpandPlan of BuildCompactPlan): for tests and small worlds.
Result<proto::LoadPlan> BuildLoadPlan(const Checkpoint& ckpt, const PlanOptions& options);

}  // namespace hoist::planner
