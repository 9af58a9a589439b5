// What a load plan is built for (PlanOptions) and the one place its ranges are checked
// (ValidatePlanOptions): BuildLoadPlan calls it first, and config/ calls it while resolving
// flags and the topology file, so that an absurd value is refused at once with its range
// (e.g. dp 10^9 never reaches the per-rank loop).
//
// Ranges: tp and dp in [1, kMaxWorld]; ep 0 (off) or in [1, kMaxWorld], a multiple of tp; the
// world (tp x dp, or ep) in [1, kMaxWorld], computed in 64 bits; alignment a power of two in
// [1, 1 GiB]; dedup_step_bytes in [kMinDedupStepBytes, kMaxDedupStepBytes]; enums among their
// values; locations empty or one per rank.
//
// Failure: Status::InvalidArgument naming the option, its value and the allowed range.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "planner/dedup.h"
#include "proto/plan.pb.h"
#include "util/enum_names.h"

namespace hoist::planner {

inline constexpr std::int64_t kMaxWorld = 65536;
inline constexpr std::uint64_t kMinDedupStepBytes = 4ull << 10;  // 4 KiB
inline constexpr std::uint64_t kMaxDedupStepBytes = 1ull << 40;  // 1 TiB
inline constexpr std::uint64_t kMaxAlignment = 1ull << 30;       // 1 GiB

struct RankLocation {
  std::uint32_t node = 0;
  std::uint32_t gpu = 0;
};

// What to do with a checkpoint tensor that no family rule knows (planner/rules.h); such a
// tensor is never loaded. kWarn logs one warning naming up to 5 of them and the count; kError
// fails the plan (Status::Corrupt naming them).
enum class UnexpectedTensors : std::uint8_t { kWarn, kError, kIgnore };

// The one name table of each plan choice (the options' choices, in this order).
inline constexpr EnumName<UnexpectedTensors> kUnexpectedTensorsNames[] = {
    {UnexpectedTensors::kError, "error"},
    {UnexpectedTensors::kWarn, "warn"},
    {UnexpectedTensors::kIgnore, "ignore"},
};
inline constexpr EnumName<proto::Layout> kLayoutNames[] = {
    {proto::LAYOUT_FUSED, "fused"},
    {proto::LAYOUT_HF, "hf"},
};
inline constexpr EnumName<proto::ExpertPlacement> kPlacementNames[] = {
    {proto::PLACEMENT_LINEAR, "linear"},
    {proto::PLACEMENT_ROUND_ROBIN, "round_robin"},
};

std::string_view UnexpectedTensorsName(UnexpectedTensors mode);
bool ParseUnexpectedTensors(std::string_view name, UnexpectedTensors* out);

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
  // --dedup job: the chunk K (planner/job_dedup.h); 0 chooses it. Tests force small ones.
  std::uint64_t dedup_chunk_bytes = 0;
  bool gpu_peers = false;
  HostRates host_rates{};  // AUTO across hosts: measured before the plan (planner/dedup.h)
  UnexpectedTensors unexpected = UnexpectedTensors::kWarn;
};

Status ValidatePlanOptions(const PlanOptions& options);

// The number of ranks a plan with these options has: ep when expert parallel, else tp x dp
// (computed in 64 bits; within kMaxWorld once ValidatePlanOptions passed).
std::int64_t WorldSize(const PlanOptions& options);

}  // namespace hoist::planner
