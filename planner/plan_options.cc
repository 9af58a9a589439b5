// Plan option ranges. See plan_options.h for the contract.
#include "planner/plan_options.h"

#include <string>

namespace hoist::planner {
namespace {

std::string N(std::int64_t v) { return std::to_string(v); }

Status OutOfRange(const std::string& what, std::int64_t value, const std::string& range) {
  return Status::InvalidArgument(what + " " + N(value) + " is out of range: " + range);
}

std::string Bytes(std::uint64_t v) {
  if (v >= (1ull << 40) && v % (1ull << 40) == 0) return std::to_string(v >> 40) + " TiB";
  if (v >= (1ull << 30) && v % (1ull << 30) == 0) return std::to_string(v >> 30) + " GiB";
  if (v >= (1ull << 20) && v % (1ull << 20) == 0) return std::to_string(v >> 20) + " MiB";
  if (v >= (1ull << 10) && v % (1ull << 10) == 0) return std::to_string(v >> 10) + " KiB";
  return std::to_string(v) + " bytes";
}

Status CheckSizes(const PlanOptions& o) {
  const std::string max = N(kMaxWorld);
  if (o.tp < 1 || o.tp > kMaxWorld) {
    return OutOfRange("tp", o.tp, "tp must be between 1 and " + max);
  }
  if (o.dp < 1 || o.dp > kMaxWorld) {
    return OutOfRange("dp", o.dp, "dp must be between 1 and " + max);
  }
  if (o.ep < 0 || o.ep > kMaxWorld) {
    return OutOfRange("ep", o.ep, "ep must be 0 (off) or between 1 and " + max);
  }
  if (o.ep > 0) {
    if (o.ep % o.tp != 0) {
      return Status::InvalidArgument("tp " + N(o.tp) + " must divide ep " + N(o.ep) +
                                     " (with ep, world = ep and dp = ep / tp): use an ep that is "
                                     "a multiple of tp");
    }
    return Status::Ok();
  }
  const std::int64_t world = static_cast<std::int64_t>(o.tp) * o.dp;  // both <= 2^16: no overflow
  if (world > kMaxWorld) {
    return Status::InvalidArgument("tp " + N(o.tp) + " x dp " + N(o.dp) + " = " + N(world) +
                                   " ranks is out of range: the world (tp x dp, or ep) must be "
                                   "between 1 and " +
                                   max + " ranks");
  }
  return Status::Ok();
}

}  // namespace

std::string_view UnexpectedTensorsName(UnexpectedTensors mode) {
  return NameOfEnum(kUnexpectedTensorsNames, mode, "unknown");
}

bool ParseUnexpectedTensors(std::string_view name, UnexpectedTensors* out) {
  const std::optional<UnexpectedTensors> mode = EnumFromName(kUnexpectedTensorsNames, name);
  if (mode) *out = *mode;
  return mode.has_value();
}

Status ValidatePlanOptions(const PlanOptions& o) {
  HOIST_RETURN_IF_ERROR(CheckSizes(o));
  if (o.alignment == 0 || o.alignment > kMaxAlignment || (o.alignment & (o.alignment - 1)) != 0) {
    return Status::InvalidArgument("alignment " + std::to_string(o.alignment) +
                                   " is out of range: it must be a power of two between 1 and " +
                                   std::to_string(kMaxAlignment) + " (1 GiB)");
  }
  if (o.dedup_step_bytes < kMinDedupStepBytes || o.dedup_step_bytes > kMaxDedupStepBytes) {
    return Status::InvalidArgument(
        "dedup step " + Bytes(o.dedup_step_bytes) + " is out of range: it must be between " +
        Bytes(kMinDedupStepBytes) + " and " + Bytes(kMaxDedupStepBytes) + " (--dedup-step-kib " +
        std::to_string(kMinDedupStepBytes >> 10) + " to " +
        std::to_string(kMaxDedupStepBytes >> 10) + ")");
  }
  if (!proto::Layout_IsValid(o.layout)) {
    return Status::InvalidArgument("layout " + N(o.layout) + " is not fused or hf");
  }
  if (!proto::ExpertPlacement_IsValid(o.placement)) {
    return Status::InvalidArgument("placement " + N(o.placement) + " is not linear or round_robin");
  }
  if (!proto::Dedup_IsValid(o.dedup)) {
    return Status::InvalidArgument("dedup " + N(o.dedup) + " is not auto, none, node or job");
  }
  if (UnexpectedTensorsName(o.unexpected) == "unknown") {
    return Status::InvalidArgument("unexpected-tensors mode " + N(static_cast<int>(o.unexpected)) +
                                   " is not error, warn or ignore");
  }
  const std::int64_t world = WorldSize(o);
  if (!o.locations.empty() && static_cast<std::int64_t>(o.locations.size()) != world) {
    return Status::InvalidArgument("locations name " + std::to_string(o.locations.size()) +
                                   " ranks but world is " + N(world));
  }
  return Status::Ok();
}

std::int64_t WorldSize(const PlanOptions& o) {
  return o.ep > 0 ? o.ep : static_cast<std::int64_t>(o.tp) * o.dp;
}

}  // namespace hoist::planner
