// Human and machine summaries of a LoadPlan, for `hoist plan`.
//
// FormatPlanTable: one line per rank (tensors, payload bytes, arena bytes, copies, fills, files
// touched) and a totals line. PlanToJson: top-level source_tensors, source_bytes, model_type,
// layout, topology, alignment, files, totals and `ranks` (array of per-rank objects with rank,
// node, gpu, tp_rank, dp_rank, tensors, bytes (payload, without alignment padding), arena_bytes,
// copies, fills, files (count of distinct files its copies touch), copy_bytes, fill_bytes).
//
// Failure: none (pure formatting of a well-formed plan). Ownership: returns values.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace hoist::planner {

struct RankSummary {
  std::uint32_t rank = 0;
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;        // payload (sum of TensorOut.bytes)
  std::uint64_t arena_bytes = 0;  // with alignment padding
  std::uint64_t copies = 0;
  std::uint64_t fills = 0;
  std::uint64_t files = 0;       // distinct files its copies read
  std::uint64_t copy_bytes = 0;  // bytes its copies move (width x rows)
  std::uint64_t fill_bytes = 0;
};

RankSummary SummarizeRank(const proto::RankPlan& rank);

std::string FormatPlanTable(const proto::LoadPlan& plan);

nlohmann::json PlanToJson(const proto::LoadPlan& plan);

}  // namespace hoist::planner
