#include "config/job_spec.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "planner/dedup.h"
#include "planner/hub.h"
#include "planner/packed_index.h"
#include "planner/plan_options.h"
#include "transport/staging/pipeline.h"
#include "util/enum_names.h"

namespace hoist::config {
namespace {

// `text` as a value of `table` (an option with named choices), or InvalidArgument listing them:
// "read mode 'x' is not auto, buffered, direct, mmap, pageable or registered".
template <typename E, std::size_t N>
Status Choose(const char* what, const std::string& text, const EnumName<E> (&table)[N], E* out) {
  const std::optional<E> value = EnumFromName(table, text);
  if (!value) {
    return Status::InvalidArgument(std::string(what) + " '" + text + "' is not " +
                                   EnumNameList(table));
  }
  *out = *value;
  return Status::Ok();
}

// Every option's value after flags (or API fields) over the file over the defaults, and where
// each came from, for messages: "--tp" (a flag, or the embedding API's field of the same name),
// "FILE: tp" (the topology file) or "tp (default)".
struct Merged {
  JobOptionSet set;
  std::map<std::string_view, std::string> from;
  const std::string& From(std::string_view name) const { return from.at(name); }
};

template <typename T>
bool Copy(std::optional<T>* to, const std::optional<T>* value) {
  if (!value->has_value()) return false;
  *to = *value;
  return true;
}

// Copies option `o` from `src` to `dst` when `src` has it; true when it did.
bool CopyOption(const OptionInfo& o, JobOptionSet& src, JobOptionSet* dst) {
  const OptionField to = o.field(*dst);
  const OptionField from = o.field(src);
  return std::visit(
      [&](auto* t) { return Copy(t, std::get<std::remove_reference_t<decltype(t)>>(from)); }, to);
}

Merged Merge(const JobSpec& spec, const Topology& file) {
  JobSpec s = spec;
  Topology t = file;
  if (s.model && s.model->empty()) s.model.reset();
  Merged m;
  for (const OptionInfo& o : kOptions) {
    if (CopyOption(o, s, &m.set)) {
      m.from[o.name] = FlagName(o.name);
    } else if (CopyOption(o, t, &m.set)) {
      m.from[o.name] = spec.topology + ": " + t.keys.at(std::string(o.name));
    } else {
      m.from[o.name] = std::string(o.name) + " (default)";
      // The defaults are the table's own text: they convert (tests/config/option_table_test.cc).
      if (!o.default_is.empty()) (void)SetOption(o, o.default_is, m.from[o.name], &m.set);
    }
  }
  return m;
}

// "--threads 1000000 is out of range: the number of fill threads must be 1 to 1024 (or 0: the
// default)"
Status CheckRange(const std::string& from, long long x, const std::string& what, long long lo,
                  long long hi, bool zero_is_default = false) {
  if ((x >= lo && x <= hi) || (zero_is_default && x == 0)) return Status::Ok();
  return Status::InvalidArgument(from + " " + std::to_string(x) + " is out of range: " + what +
                                 " must be " + std::to_string(lo) + " to " + std::to_string(hi) +
                                 (zero_is_default ? " (or 0: the default)" : ""));
}

// The plan selection: tp, ep, dp, layout, placement, dedup, unexpected tensors and the dedup
// step, then the planner's range check of all of them (planner::ValidatePlanOptions, the one
// place for the plan's numbers, which BuildLoadPlan repeats).
Status ResolvePlanOptions(const Merged& m, planner::PlanOptions* p) {
  const JobOptionSet& o = m.set;
  p->tp = *o.tp;
  p->ep = *o.ep;
  p->dp = *o.dp;
  HOIST_RETURN_IF_ERROR(Choose("layout", *o.layout, planner::kLayoutNames, &p->layout));
  HOIST_RETURN_IF_ERROR(Choose("placement", *o.placement, planner::kPlacementNames, &p->placement));
  HOIST_RETURN_IF_ERROR(Choose("dedup", *o.dedup, planner::kDedupNames, &p->dedup));
  HOIST_RETURN_IF_ERROR(Choose("unexpected_tensors", *o.unexpected_tensors,
                               planner::kUnexpectedTensorsNames, &p->unexpected));
  if (const int kib = *o.dedup_step_kib; kib < 0) {
    return Status::InvalidArgument(m.From("dedup_step_kib") + " " + std::to_string(kib) +
                                   " is out of range: it must be 0 (the default) or a size in KiB");
  } else if (kib > 0) {
    p->dedup_step_bytes = static_cast<std::uint64_t>(kib) << 10;
  }
  return planner::ValidatePlanOptions(*p);
}

// The topology's nodes list: as many GPUs as ranks, each ordinal in range; fills p->locations.
Status ResolveNodes(const std::string& file, const Topology& t, planner::PlanOptions* p) {
  if (t.nodes.empty()) return Status::Ok();
  const long long world = planner::WorldSize(*p);
  if (NodesWorld(t) != world) {
    return Status::InvalidArgument(file + ": the nodes list has " + std::to_string(NodesWorld(t)) +
                                   " GPUs but tp/ep/dp give " + std::to_string(world) + " ranks");
  }
  for (std::size_t n = 0; n < t.nodes.size(); ++n) {
    for (int g : t.nodes[n].gpus) {
      HOIST_RETURN_IF_ERROR(CheckRange(file + ": nodes[" + std::to_string(n) + "].gpus:", g,
                                       "a GPU ordinal", 0, kLimits.max_gpu));
      p->locations.push_back({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(g)});
    }
  }
  return Status::Ok();
}

// A packed checkpoint's blocks are decoded out of the staging ring: the modes without one
// cannot load it (a usage error, before any rank starts).
Status CheckPackedReadMode(const std::string& model_dir, transport::ReadMode mode) {
  if (transport::Staged(mode)) return Status::Ok();
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / planner::kPackedIndexFile, ec)) {
    return Status::Ok();
  }
  return Status::InvalidArgument("--read " + std::string(transport::ReadModeName(mode)) + ": " +
                                 model_dir +
                                 " is a packed checkpoint, whose blocks are decoded out of the "
                                 "staging ring: use auto, buffered, direct or mmap");
}

// Read mode, device, pinning kind and CPU binding (names).
Status ResolveLoadChoices(const JobOptionSet& o, rank::LoadSettings* l) {
  transport::PipelineSettings* p = &l->pipeline;
  HOIST_RETURN_IF_ERROR(Choose("read mode", *o.read, transport::kReadModeNames, &p->mode));
  HOIST_RETURN_IF_ERROR(Choose("device", *o.device, rank::kDeviceKindNames, &l->device));
  HOIST_RETURN_IF_ERROR(Choose("pinning", *o.pinning, transport::kStagingKindNames, &p->staging));
  return Choose("cpu_bind", *o.cpu_bind, rank::kCpuBindNames, &l->cpu_bind);
}

// Every whole number of a rank's load (not the plan's) against its range in kOptions.
Status CheckLoadNumbers(const Merged& m) {
  JobOptionSet o = m.set;
  for (const OptionInfo& info : kOptions) {
    if (info.type != OptionType::kInt || info.plan) continue;
    const std::optional<int> v = *std::get<std::optional<int>*>(info.field(o));
    if (!v) continue;  // no default here: the rank picks it (read_depth_mib)
    HOIST_RETURN_IF_ERROR(CheckRange(m.From(info.name), *v, std::string(info.help),
                                     static_cast<long long>(info.lo),
                                     static_cast<long long>(info.hi), info.zero_is_default));
  }
  return Status::Ok();
}

// Staging ring (0: the measured default, resolved here), fill threads (0 stays: the rank's
// cpus, known only on the rank), chunk size (0 stays: a rule of the slot size), read depth (unset
// stays: the rule of the plan's ranks on the node, transport::ReadDepthBytes) and the peer timeout.
Status ResolveLoadNumbers(const Merged& m, coordinator::JobOptions* job) {
  HOIST_RETURN_IF_ERROR(CheckLoadNumbers(m));
  const JobOptionSet& o = m.set;
  transport::PipelineSettings* l = &job->load.settings.pipeline;
  l->slots = *o.slots > 0 ? *o.slots : transport::kDefaultSlots;
  l->slot_bytes = *o.slot_mib > 0 ? static_cast<std::uint64_t>(*o.slot_mib) << 20
                                  : transport::kDefaultSlotBytes;
  const long long ring_mib =
      static_cast<long long>(l->slots) * static_cast<long long>(l->slot_bytes >> 20);
  if (ring_mib > kLimits.max_staging_mib) {
    return Status::InvalidArgument("staging of " + std::to_string(ring_mib) + " MiB (" +
                                   m.From("slots") + " x " + m.From("slot_mib") +
                                   ") is out of range: slots x slot_mib must be at most " +
                                   std::to_string(kLimits.max_staging_mib) + " MiB per rank");
  }
  l->threads = *o.threads;
  l->chunk_bytes = static_cast<std::uint64_t>(*o.chunk_kib) << 10;
  if (o.read_depth_mib) l->read_depth_bytes = static_cast<std::uint64_t>(*o.read_depth_mib) << 20;

  const double timeout = *o.peer_timeout_s;
  if (!std::isfinite(timeout) || timeout <= 0 || timeout > kLimits.max_peer_timeout_s) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", timeout);
    return Status::InvalidArgument(m.From("peer_timeout_s") + " " + v +
                                   " is out of range: the peer timeout must be a number of "
                                   "seconds above 0 and at most " +
                                   std::to_string(static_cast<int>(kLimits.max_peer_timeout_s)));
  }
  job->exchange.timeout_s = timeout;
  return Status::Ok();
}

}  // namespace

Result<ResolvedJob> ResolveJobSpec(const JobSpec& s) {
  ResolvedJob out;
  Topology& t = out.topology;
  if (!s.topology.empty()) {
    HOIST_ASSIGN_OR_RETURN(t, LoadTopology(s.topology));
  }
  out.warnings = s.warnings;
  out.warnings.insert(out.warnings.end(), t.warnings.begin(), t.warnings.end());
  const Merged m = Merge(s, t);
  coordinator::JobOptions& job = out.job;
  job.model_dir = m.set.model.value_or("");
  if (job.model_dir.empty()) {
    return Status::InvalidArgument(
        "no model: give --model DIR (LoadOptions::model) or 'model:' in the topology file");
  }
  // A Hugging Face repo id (owner/name[@revision]) becomes its snapshot in the local cache.
  HOIST_ASSIGN_OR_RETURN(job.model_dir,
                         planner::ResolveModelPath(job.model_dir, planner::HubEnv::FromProcess()));
  HOIST_RETURN_IF_ERROR(ResolvePlanOptions(m, &job.plan));
  HOIST_RETURN_IF_ERROR(ResolveNodes(s.topology, t, &job.plan));
  for (const NodeSpec& n : t.nodes) job.node_names.push_back(n.name);
  const planner::PlanOptions& p = job.plan;
  const int world = static_cast<int>(planner::WorldSize(p));  // at most planner::kMaxWorld
  if (s.solo_rank < 0 || s.solo_rank >= world) {
    return Status::InvalidArgument("--rank " + std::to_string(s.solo_rank) +
                                   " is out of range: the plan has " + std::to_string(world) +
                                   " ranks, so the rank must be 0 to " + std::to_string(world - 1));
  }
  rank::LoadSettings& l = job.load.settings;
  HOIST_RETURN_IF_ERROR(ResolveLoadChoices(m.set, &l));
  HOIST_RETURN_IF_ERROR(CheckPackedReadMode(job.model_dir, l.pipeline.mode));
  HOIST_RETURN_IF_ERROR(ResolveLoadNumbers(m, &job));
  l.verify = *m.set.verify;
  l.bind_numa = *m.set.numa;
  job.solo_rank = s.solo_rank;
  return out;
}

std::string DescribeJob(const coordinator::JobOptions& j) {
  const planner::PlanOptions& p = j.plan;
  const rank::LoadSettings& l = j.load.settings;
  const transport::PipelineSettings& ring = l.pipeline;
  std::string out = "model_dir=" + j.model_dir + "\n";
  auto add = [&out](const char* name, auto v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
    out += std::string(name) + "=" + buf + "\n";
  };
  add("plan.tp", p.tp);
  add("plan.ep", p.ep);
  add("plan.dp", p.dp);
  add("plan.layout", p.layout);
  add("plan.placement", p.placement);
  add("plan.unexpected", static_cast<int>(p.unexpected));
  add("plan.dedup", p.dedup);
  add("plan.dedup_step_bytes", p.dedup_step_bytes);
  add("plan.locations", p.locations.size());
  add("load.device", static_cast<int>(l.device));
  add("load.read_mode", static_cast<int>(ring.mode));
  add("load.staging", static_cast<int>(ring.staging));
  add("load.slots", ring.slots);
  add("load.slot_bytes", ring.slot_bytes);
  add("load.threads", ring.threads);
  add("load.chunk_bytes", ring.chunk_bytes);
  if (ring.read_depth_bytes) {
    add("load.read_depth_bytes", *ring.read_depth_bytes);
  } else {
    out += "load.read_depth_bytes=by node\n";
  }
  add("load.cpu_bind", static_cast<int>(l.cpu_bind));
  add("load.bind_numa", l.bind_numa);
  add("load.verify", l.verify);
  add("exchange.timeout_s", j.exchange.timeout_s);
  add("solo_rank", j.solo_rank);
  return out;
}

}  // namespace hoist::config
