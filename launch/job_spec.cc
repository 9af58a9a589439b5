#include "launch/job_spec.h"

#include "planner/dedup.h"
#include "planner/hub.h"
#include "planner/plan_options.h"

namespace hoist::launch {
namespace {

template <typename T>
T Pick(const std::optional<T>& flag, const std::optional<T>& file, T fallback) {
  if (flag) return *flag;
  if (file) return *file;
  return fallback;
}

// A flag that sets an optional only when given.
template <typename T>
CLI::Option* AddOptional(CLI::App* app, const std::string& name, std::optional<T>* out,
                         const std::string& help) {
  return app->add_option_function<T>(
      name, [out](const T& v) { *out = v; }, help);
}

}  // namespace

void AddJobFlags(CLI::App* app, JobSpec* s, bool load_flags) {
  app->add_option("--topology", s->topology, "YAML topology file (flags override it)");
  AddOptional(app, "--model", &s->model,
              "checkpoint folder, or a Hugging Face repo id owner/name[@revision] in the local "
              "cache (never downloaded)");
  AddOptional(app, "--tp", &s->tp, "tensor-parallel size")->check(CLI::PositiveNumber);
  AddOptional(app, "--ep", &s->ep, "expert-parallel size (= world; 0: off)")
      ->check(CLI::NonNegativeNumber);
  AddOptional(app, "--dp", &s->dp, "data-parallel groups (without --ep)")
      ->check(CLI::PositiveNumber);
  AddOptional(app, "--layout", &s->layout, "fused | hf")->check(CLI::IsMember({"fused", "hf"}));
  AddOptional(app, "--placement", &s->placement, "expert placement under ep")
      ->check(CLI::IsMember({"linear", "round_robin"}));
  AddOptional(app, "--dedup", &s->dedup,
              "auto | none | node | job: read bytes several ranks need once per node (or job) "
              "and forward them (auto: node where it pays)")
      ->check(CLI::IsMember({"auto", "none", "node", "job"}));
  AddOptional(app, "--dedup-step-kib", &s->dedup_step_kib,
              "dedup: KiB of shared bytes per exchange step (0: 64 MiB)")
      ->check(CLI::NonNegativeNumber);
  AddOptional(app, "--unexpected-tensors", &s->unexpected_tensors,
              "error | warn | ignore: checkpoint tensors no family rule knows (default warn)")
      ->check(CLI::IsMember({"error", "warn", "ignore"}));
  if (!load_flags) return;
  app->add_option("--rank", s->solo_rank, "without mpirun: which rank of the plan to run")
      ->check(CLI::NonNegativeNumber);
  AddOptional(app, "--read", &s->read, "auto | buffered | direct | mmap | pageable | registered");
  AddOptional(app, "--device", &s->device, "auto | cuda | host");
  AddOptional(app, "--staging", &s->staging,
              "how staging is pinned: auto | register (touch + cudaHostRegister) | mallochost");
  AddOptional(app, "--slots", &s->slots, "pinned staging slots (0: default)");
  AddOptional(app, "--slot-mib", &s->slot_mib, "MiB per staging slot (0: default)");
  AddOptional(app, "--threads", &s->threads, "fill threads (0: default)");
  AddOptional(app, "--chunk-kib", &s->chunk_kib, "KiB per fill task (0: slot size / threads)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag_function(
      "--verify", [s](std::int64_t) { s->verify = true; },
      "prove every device byte equals the plan's");
  AddOptional(app, "--cpu-bind", &s->cpu_bind,
              "where fill threads run: auto (the GPU's NUMA cores, shared among the node's "
              "ranks) | launcher (as mpirun bound them) | none")
      ->check(CLI::IsMember({"auto", "launcher", "none"}));
  AddOptional(app, "--peer-timeout-s", &s->peer_timeout_s,
              "seconds any wait for another rank may take before the job fails naming it")
      ->check(CLI::PositiveNumber);
  app->add_flag("--no-numa", s->no_numa, "do not bind to the GPU's NUMA node");
}

Result<ResolvedJob> ResolveJobSpec(const JobSpec& s) {
  ResolvedJob out;
  Topology& t = out.topology;
  if (!s.topology.empty()) {
    HOIST_ASSIGN_OR_RETURN(t, LoadTopology(s.topology));
  }
  coordinator::JobOptions& job = out.job;
  job.model_dir = s.model ? *s.model : t.model;
  if (job.model_dir.empty()) {
    return Status::InvalidArgument("no model: give a model folder or 'model:' in the topology");
  }
  // A Hugging Face repo id (owner/name[@revision]) becomes its snapshot in the local cache.
  HOIST_ASSIGN_OR_RETURN(job.model_dir,
                         planner::ResolveModelPath(job.model_dir, planner::HubEnv::FromProcess()));
  planner::PlanOptions& p = job.plan;
  p.tp = Pick(s.tp, t.tp, 1);
  p.ep = Pick(s.ep, t.ep, 0);
  p.dp = Pick(s.dp, t.dp, 1);
  if (p.tp < 1 || p.dp < 1 || p.ep < 0) {
    return Status::InvalidArgument("tp and dp must be >= 1 and ep >= 0 (tp " +
                                   std::to_string(p.tp) + ", dp " + std::to_string(p.dp) + ", ep " +
                                   std::to_string(p.ep) + ")");
  }
  const std::string layout = Pick<std::string>(s.layout, t.layout, "fused");
  if (layout != "fused" && layout != "hf") {
    return Status::InvalidArgument("layout '" + layout + "' is not fused or hf");
  }
  p.layout = layout == "hf" ? proto::LAYOUT_HF : proto::LAYOUT_FUSED;
  const std::string placement = Pick<std::string>(s.placement, t.placement, "linear");
  if (placement != "linear" && placement != "round_robin") {
    return Status::InvalidArgument("placement '" + placement + "' is not linear or round_robin");
  }
  p.placement = placement == "round_robin" ? proto::PLACEMENT_ROUND_ROBIN : proto::PLACEMENT_LINEAR;
  const std::string dedup = Pick<std::string>(s.dedup, t.dedup, "auto");
  if (!planner::ParseDedup(dedup, &p.dedup)) {
    return Status::InvalidArgument("dedup '" + dedup + "' is not auto, none, node or job");
  }
  if (s.dedup_step_kib && *s.dedup_step_kib > 0) {
    p.dedup_step_bytes = static_cast<std::uint64_t>(*s.dedup_step_kib) << 10;
  }
  if (p.ep > 0 && p.ep % p.tp != 0) {
    return Status::InvalidArgument("ep " + std::to_string(p.ep) + " is not a multiple of tp " +
                                   std::to_string(p.tp) + " (with ep, world = ep = tp x dp)");
  }
  const std::string unexpected =
      Pick<std::string>(s.unexpected_tensors, t.unexpected_tensors, "warn");
  if (!planner::ParseUnexpectedTensors(unexpected, &p.unexpected)) {
    return Status::InvalidArgument("unexpected_tensors '" + unexpected +
                                   "' is not error, warn or ignore");
  }
  HOIST_RETURN_IF_ERROR(planner::ValidatePlanOptions(p));  // ranges, before any world arithmetic
  const int world = p.ep > 0 ? p.ep : p.tp * p.dp;
  if (!t.nodes.empty()) {
    if (NodesWorld(t) != world) {
      return Status::InvalidArgument(s.topology + ": the nodes list has " +
                                     std::to_string(NodesWorld(t)) + " GPUs but tp/ep/dp give " +
                                     std::to_string(world) + " ranks");
    }
    for (std::size_t n = 0; n < t.nodes.size(); ++n) {
      for (int g : t.nodes[n].gpus) {
        p.locations.push_back({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(g)});
      }
    }
  }

  rank::LoadOptions& l = job.load;
  const std::string read = Pick<std::string>(s.read, t.read, "auto");
  std::optional<transport::ReadMode> mode = transport::ParseReadMode(read);
  if (!mode) return Status::InvalidArgument("unknown read mode '" + read + "'");
  l.read_mode = *mode;
  const std::string device = Pick<std::string>(s.device, t.device, "auto");
  if (device == "auto") {
    l.device = rank::DeviceKind::kAuto;
  } else if (device == "cuda") {
    l.device = rank::DeviceKind::kCuda;
  } else if (device == "host") {
    l.device = rank::DeviceKind::kHost;
  } else {
    return Status::InvalidArgument("device '" + device + "' is not auto, cuda or host");
  }
  const std::string staging = s.staging.value_or("auto");
  std::optional<transport::StagingKind> kind = transport::ParseStagingKind(staging);
  if (!kind) {
    return Status::InvalidArgument("staging '" + staging + "' is not auto, register or mallochost");
  }
  l.staging = *kind;
  l.slots = Pick(s.slots, t.slots, 0);
  l.slot_bytes = static_cast<std::uint64_t>(Pick(s.slot_mib, t.slot_mib, 0)) << 20;
  l.threads = Pick(s.threads, t.threads, 0);
  l.verify = Pick(s.verify, t.verify, false);
  l.chunk_bytes = static_cast<std::uint64_t>(s.chunk_kib.value_or(0)) << 10;
  l.bind_numa = !s.no_numa;
  const std::string cpu_bind = Pick<std::string>(s.cpu_bind, t.cpu_bind, "auto");
  std::optional<rank::CpuBind> bind = rank::ParseCpuBind(cpu_bind);
  if (!bind) {
    return Status::InvalidArgument("cpu_bind '" + cpu_bind + "' is not auto, launcher or none");
  }
  l.cpu_bind = *bind;
  job.exchange.timeout_s = Pick(s.peer_timeout_s, t.peer_timeout_s, job.exchange.timeout_s);
  job.solo_rank = s.solo_rank;
  return out;
}

}  // namespace hoist::launch
