#include "config/job_spec.h"

#include <cmath>
#include <cstdio>

#include "planner/dedup.h"
#include "planner/hub.h"
#include "planner/plan_options.h"
#include "transport/pipeline.h"

namespace hoist::config {
namespace {

// A value and where it came from, for messages: "--tp" (a flag, or the embedding API's field of
// the same name), "FILE: tp" (the topology file) or "tp (default)".
template <typename T>
struct Sourced {
  T value;
  std::string from;
};

template <typename T>
Sourced<T> Pick(const std::optional<T>& flag, const std::optional<T>& file, T fallback,
                const std::string& flag_name, const std::string& key, const std::string& path) {
  if (flag) return {*flag, flag_name};
  if (file) return {*file, path + ": " + key};
  return {fallback, key + " (default)"};
}

// "--threads 1000000 is out of range: fill threads must be 1 to 1024 (or 0: the default)"
template <typename T>
Status CheckRange(const Sourced<T>& v, const std::string& what, long long lo, long long hi,
                  bool zero_is_default = false) {
  const long long x = static_cast<long long>(v.value);
  if ((x >= lo && x <= hi) || (zero_is_default && x == 0)) return Status::Ok();
  return Status::InvalidArgument(v.from + " " + std::to_string(x) + " is out of range: " + what +
                                 " must be " + std::to_string(lo) + " to " + std::to_string(hi) +
                                 (zero_is_default ? " (or 0: the default)" : ""));
}

// The plan selection: tp, ep, dp, layout, placement, dedup, unexpected tensors and the dedup
// step, then the planner's range check of all of them (planner::ValidatePlanOptions, the one
// place for the plan's numbers, which BuildLoadPlan repeats).
Status ResolvePlanOptions(const JobSpec& s, const Topology& t, planner::PlanOptions* p) {
  p->tp = s.tp.value_or(t.tp.value_or(1));
  p->ep = s.ep.value_or(t.ep.value_or(0));
  p->dp = s.dp.value_or(t.dp.value_or(1));
  const std::string layout = s.layout.value_or(t.layout.value_or("fused"));
  if (layout != "fused" && layout != "hf") {
    return Status::InvalidArgument("layout '" + layout + "' is not fused or hf");
  }
  p->layout = layout == "hf" ? proto::LAYOUT_HF : proto::LAYOUT_FUSED;
  const std::string placement = s.placement.value_or(t.placement.value_or("linear"));
  if (placement != "linear" && placement != "round_robin") {
    return Status::InvalidArgument("placement '" + placement + "' is not linear or round_robin");
  }
  p->placement =
      placement == "round_robin" ? proto::PLACEMENT_ROUND_ROBIN : proto::PLACEMENT_LINEAR;
  const std::string dedup = s.dedup.value_or(t.dedup.value_or("auto"));
  if (!planner::ParseDedup(dedup, &p->dedup)) {
    return Status::InvalidArgument("dedup '" + dedup + "' is not auto, none, node or job");
  }
  const std::string unexpected =
      s.unexpected_tensors.value_or(t.unexpected_tensors.value_or("warn"));
  if (!planner::ParseUnexpectedTensors(unexpected, &p->unexpected)) {
    return Status::InvalidArgument("unexpected_tensors '" + unexpected +
                                   "' is not error, warn or ignore");
  }
  if (const int kib = s.dedup_step_kib.value_or(0); kib < 0) {
    return Status::InvalidArgument("--dedup-step-kib " + std::to_string(kib) +
                                   " is out of range: it must be 0 (the default) or a size in KiB");
  } else if (kib > 0) {
    p->dedup_step_bytes = static_cast<std::uint64_t>(kib) << 10;
  }
  return planner::ValidatePlanOptions(*p);
}

// The topology's nodes list: as many GPUs as ranks, each ordinal in range; fills p->locations.
Status ResolveNodes(const std::string& file, const Topology& t, planner::PlanOptions* p) {
  if (t.nodes.empty()) return Status::Ok();
  const long long world = p->ep > 0 ? p->ep : static_cast<long long>(p->tp) * p->dp;
  if (NodesWorld(t) != world) {
    return Status::InvalidArgument(file + ": the nodes list has " + std::to_string(NodesWorld(t)) +
                                   " GPUs but tp/ep/dp give " + std::to_string(world) + " ranks");
  }
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    for (int g : t.nodes[n].gpus) {
      const Sourced<int> gpu{g, file + ": nodes[" + std::to_string(n) + "].gpus:"};
      HOIST_RETURN_IF_ERROR(CheckRange(gpu, "a GPU ordinal", 0, kLimits.max_gpu));
      p->locations.push_back({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(g)});
    }
  }
  return Status::Ok();
}

// Read mode, device and staging kind (names).
Status ResolveLoadChoices(const JobSpec& s, const Topology& t, rank::LoadOptions* l) {
  const std::string read = s.read.value_or(t.read.value_or("auto"));
  std::optional<transport::ReadMode> mode = transport::ParseReadMode(read);
  if (!mode) {
    return Status::InvalidArgument("read mode '" + read +
                                   "' is not auto, buffered, direct, mmap, pageable or registered");
  }
  l->read_mode = *mode;
  const std::string device = s.device.value_or(t.device.value_or("auto"));
  if (device == "auto") {
    l->device = rank::DeviceKind::kAuto;
  } else if (device == "cuda") {
    l->device = rank::DeviceKind::kCuda;
  } else if (device == "host") {
    l->device = rank::DeviceKind::kHost;
  } else {
    return Status::InvalidArgument("device '" + device + "' is not auto, cuda or host");
  }
  const std::string staging = s.staging.value_or("auto");
  std::optional<transport::StagingKind> kind = transport::ParseStagingKind(staging);
  if (!kind) {
    return Status::InvalidArgument("staging '" + staging + "' is not auto, register or mallochost");
  }
  l->staging = *kind;
  return Status::Ok();
}

// Staging ring, fill threads, chunk size and the peer timeout.
Status ResolveLoadNumbers(const JobSpec& s, const Topology& t, coordinator::JobOptions* job) {
  rank::LoadOptions* l = &job->load;
  const std::string& f = s.topology;
  const auto slots = Pick(s.slots, t.slots, 0, "--slots", "staging.slots", f);
  const auto slot_mib = Pick(s.slot_mib, t.slot_mib, 0, "--slot-mib", "staging.slot_mib", f);
  const auto threads = Pick(s.threads, t.threads, 0, "--threads", "staging.threads", f);
  const Sourced<int> chunk_kib{s.chunk_kib.value_or(0), "--chunk-kib"};
  HOIST_RETURN_IF_ERROR(CheckRange(slots, "the number of staging slots", 1, kLimits.max_slots,
                                   /*zero_is_default=*/true));
  HOIST_RETURN_IF_ERROR(CheckRange(slot_mib, "the staging slot size in MiB", 1,
                                   kLimits.max_slot_mib, /*zero_is_default=*/true));
  HOIST_RETURN_IF_ERROR(CheckRange(threads, "the number of fill threads", 1, kLimits.max_threads,
                                   /*zero_is_default=*/true));
  HOIST_RETURN_IF_ERROR(CheckRange(chunk_kib, "the fill chunk in KiB", 1, kLimits.max_chunk_kib,
                                   /*zero_is_default=*/true));
  const long long ring_mib =
      static_cast<long long>(slots.value > 0 ? slots.value : transport::kDefaultSlots) *
      (slot_mib.value > 0 ? slot_mib.value
                          : static_cast<long long>(transport::kDefaultSlotBytes >> 20));
  if (ring_mib > kLimits.max_staging_mib) {
    return Status::InvalidArgument("staging of " + std::to_string(ring_mib) + " MiB (" +
                                   slots.from + " x " + slot_mib.from +
                                   ") is out of range: slots x slot_mib must be at most " +
                                   std::to_string(kLimits.max_staging_mib) + " MiB per rank");
  }
  l->slots = slots.value;
  l->slot_bytes = static_cast<std::uint64_t>(slot_mib.value) << 20;
  l->threads = threads.value;
  l->chunk_bytes = static_cast<std::uint64_t>(chunk_kib.value) << 10;

  const auto timeout = Pick(s.peer_timeout_s, t.peer_timeout_s, job->exchange.timeout_s,
                            "--peer-timeout-s", "peer_timeout_s", f);
  if (!std::isfinite(timeout.value) || timeout.value <= 0 ||
      timeout.value > kLimits.max_peer_timeout_s) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", timeout.value);
    return Status::InvalidArgument(timeout.from + " " + v +
                                   " is out of range: the peer timeout must be a number of "
                                   "seconds above 0 and at most " +
                                   std::to_string(static_cast<int>(kLimits.max_peer_timeout_s)));
  }
  job->exchange.timeout_s = timeout.value;
  return Status::Ok();
}

}  // namespace

Result<ResolvedJob> ResolveJobSpec(const JobSpec& s) {
  ResolvedJob out;
  Topology& t = out.topology;
  if (!s.topology.empty()) {
    HOIST_ASSIGN_OR_RETURN(t, LoadTopology(s.topology));
  }
  coordinator::JobOptions& job = out.job;
  job.model_dir = s.model ? *s.model : t.model;
  if (job.model_dir.empty()) {
    return Status::InvalidArgument(
        "no model: give --model DIR (LoadOptions::model) or 'model:' in the topology file");
  }
  // A Hugging Face repo id (owner/name[@revision]) becomes its snapshot in the local cache.
  HOIST_ASSIGN_OR_RETURN(job.model_dir,
                         planner::ResolveModelPath(job.model_dir, planner::HubEnv::FromProcess()));
  HOIST_RETURN_IF_ERROR(ResolvePlanOptions(s, t, &job.plan));
  HOIST_RETURN_IF_ERROR(ResolveNodes(s.topology, t, &job.plan));
  const planner::PlanOptions& p = job.plan;
  const int world = p.ep > 0 ? p.ep : p.tp * p.dp;  // at most planner::kMaxWorld
  if (s.solo_rank < 0 || s.solo_rank >= world) {
    return Status::InvalidArgument("--rank " + std::to_string(s.solo_rank) +
                                   " is out of range: the plan has " + std::to_string(world) +
                                   " ranks, so the rank must be 0 to " + std::to_string(world - 1));
  }
  rank::LoadOptions& l = job.load;
  HOIST_RETURN_IF_ERROR(ResolveLoadChoices(s, t, &l));
  HOIST_RETURN_IF_ERROR(ResolveLoadNumbers(s, t, &job));
  l.verify = s.verify.value_or(t.verify.value_or(false));
  l.bind_numa = !s.no_numa;
  const std::string cpu_bind = s.cpu_bind.value_or(t.cpu_bind.value_or("auto"));
  std::optional<rank::CpuBind> bind = rank::ParseCpuBind(cpu_bind);
  if (!bind) {
    return Status::InvalidArgument("cpu_bind '" + cpu_bind + "' is not auto, launcher or none");
  }
  l.cpu_bind = *bind;
  job.solo_rank = s.solo_rank;
  return out;
}

}  // namespace hoist::config
