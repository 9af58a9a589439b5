#include "launch/cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "coordinator/report.h"
#include "launch/logging.h"
#include "launch/serve_cli.h"
#include "launch/topology.h"
#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "planner/plan_summary.h"

namespace hoist::launch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Flags shared by `plan` and `load`; each overrides the topology file when given.
struct CommonFlags {
  std::string topology;
  std::string model;
  int tp = 1, ep = 0, dp = 1;
  std::string layout = "fused";
  std::string placement = "linear";
  std::string log_level = "info";
  CLI::Option *tp_opt = nullptr, *ep_opt = nullptr, *dp_opt = nullptr, *layout_opt = nullptr,
              *placement_opt = nullptr, *model_opt = nullptr;
  std::string dedup = "none";
  int dedup_step_kib = 0;
  CLI::Option* dedup_opt = nullptr;
};

struct LoadFlags {
  std::string read = "auto";
  std::string device = "auto";
  int slots = 0, slot_mib = 0, threads = 0;
  int rank = 0;
  bool verify = false;
  std::string dump;
  std::string report_json, trace, timeline, metrics;
  std::string staging = "auto";
  int chunk_kib = 0;
  int inject_fail_rank = -1;
  int inject_kill_rank = -1;
  std::string inject_peer_fault;  // KIND:RANK (kill | error | stall), dedup exchange
  double peer_timeout_s = 120;
  CLI::Option* peer_timeout_opt = nullptr;
  bool no_numa = false;
  CLI::Option *read_opt = nullptr, *device_opt = nullptr, *slots_opt = nullptr,
              *slot_mib_opt = nullptr, *threads_opt = nullptr, *verify_opt = nullptr;
};

void AddCommon(CLI::App* app, CommonFlags* f) {
  app->add_option("--topology", f->topology, "YAML topology file (flags override it)");
  f->model_opt = app->add_option("--model", f->model, "checkpoint folder");
  f->tp_opt = app->add_option("--tp", f->tp, "tensor-parallel size")->check(CLI::PositiveNumber);
  f->ep_opt = app->add_option("--ep", f->ep, "expert-parallel size (= world; 0: off)")
                  ->check(CLI::NonNegativeNumber);
  f->dp_opt = app->add_option("--dp", f->dp, "data-parallel groups (without --ep)")
                  ->check(CLI::PositiveNumber);
  f->layout_opt =
      app->add_option("--layout", f->layout, "fused | hf")->check(CLI::IsMember({"fused", "hf"}));
  f->placement_opt = app->add_option("--placement", f->placement, "expert placement under ep")
                         ->check(CLI::IsMember({"linear", "round_robin"}));
  f->dedup_opt = app->add_option("--dedup", f->dedup,
                                 "none | node | job: read bytes several ranks need once per node "
                                 "(or job) and forward them")
                     ->check(CLI::IsMember({"none", "node", "job"}));
  app->add_option("--dedup-step-kib", f->dedup_step_kib,
                  "dedup: KiB of shared bytes per exchange step (0: 1 GiB)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--log-level", f->log_level, "trace | debug | info | warn | error | off");
}

template <typename T>
void Override(const std::optional<T>& from_file, CLI::Option* flag, T* value) {
  if (from_file && (flag == nullptr || flag->count() == 0)) *value = *from_file;
}

// Merges the topology file under the flags into plan options.
Result<planner::PlanOptions> ResolvePlan(CommonFlags& f, Topology* topo_out) {
  Topology topo;
  if (!f.topology.empty()) {
    HOIST_ASSIGN_OR_RETURN(topo, LoadTopology(f.topology));
  }
  if (!topo.model.empty() && f.model_opt->count() == 0) f.model = topo.model;
  Override(topo.tp, f.tp_opt, &f.tp);
  Override(topo.ep, f.ep_opt, &f.ep);
  Override(topo.dp, f.dp_opt, &f.dp);
  Override(topo.layout, f.layout_opt, &f.layout);
  Override(topo.placement, f.placement_opt, &f.placement);
  Override(topo.dedup, f.dedup_opt, &f.dedup);
  if (f.model.empty())
    return Status::InvalidArgument("no model: give --model or 'model:' in the topology");
  if (f.layout != "fused" && f.layout != "hf") {
    return Status::InvalidArgument("layout '" + f.layout + "' is not fused or hf");
  }
  if (f.placement != "linear" && f.placement != "round_robin") {
    return Status::InvalidArgument("placement '" + f.placement + "' is not linear or round_robin");
  }
  planner::PlanOptions p;
  p.tp = f.tp;
  p.ep = f.ep;
  p.dp = f.dp;
  p.layout = f.layout == "hf" ? proto::LAYOUT_HF : proto::LAYOUT_FUSED;
  p.placement =
      f.placement == "round_robin" ? proto::PLACEMENT_ROUND_ROBIN : proto::PLACEMENT_LINEAR;
  if (!planner::ParseDedup(f.dedup, &p.dedup)) {
    return Status::InvalidArgument("dedup '" + f.dedup + "' is not none, node or job");
  }
  if (f.dedup_step_kib > 0) p.dedup_step_bytes = static_cast<std::uint64_t>(f.dedup_step_kib) << 10;
  if (p.ep > 0 && p.ep % p.tp != 0) {
    return Status::InvalidArgument("ep " + std::to_string(p.ep) + " is not a multiple of tp " +
                                   std::to_string(p.tp) + " (with --ep, world = ep = tp x dp)");
  }
  const int world = p.ep > 0 ? p.ep : p.tp * p.dp;
  if (!topo.nodes.empty()) {
    if (NodesWorld(topo) != world) {
      return Status::InvalidArgument(f.topology + ": the nodes list has " +
                                     std::to_string(NodesWorld(topo)) + " GPUs but tp/ep/dp give " +
                                     std::to_string(world) + " ranks");
    }
    for (std::size_t n = 0; n < topo.nodes.size(); ++n) {
      for (int g : topo.nodes[n].gpus) {
        p.locations.push_back({static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(g)});
      }
    }
  }
  if (topo_out) *topo_out = topo;
  return p;
}

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "hoist: error: %s\n", s.ToString().c_str());
  return code;
}

int RunPlan(CommonFlags& f, const std::string& json_path, const std::string& out_path) {
  if (Status s = SetUpLogging(f.log_level, 0, "-"); !s.ok()) return Fail(s, kExitUsage);
  Result<planner::PlanOptions> opts = ResolvePlan(f, nullptr);
  if (!opts.ok()) return Fail(opts.status(), kExitUsage);
  Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(f.model);
  if (!ckpt.ok()) return Fail(ckpt.status(), kExitFailure);
  Result<proto::LoadPlan> plan = planner::BuildLoadPlan(*ckpt, *opts);
  if (!plan.ok()) return Fail(plan.status(), kExitFailure);
  std::cout << planner::FormatPlanTable(*plan);
  if (!json_path.empty()) {
    if (Status s = coordinator::WriteFile(json_path, planner::PlanToJson(*plan).dump(2) + "\n");
        !s.ok()) {
      return Fail(s, kExitFailure);
    }
  }
  if (!out_path.empty()) {
    if (Status s = coordinator::WriteFile(out_path, plan->SerializeAsString()); !s.ok()) {
      return Fail(s, kExitFailure);
    }
  }
  return 0;
}

Status WriteReports(const LoadFlags& l, const coordinator::JobResult& job) {
  const coordinator::Aggregate agg = coordinator::AggregateReports(job.reports, job.wall_s);
  std::cerr << coordinator::FormatTable(job.plan, job.reports, agg);
  if (!l.report_json.empty()) {
    HOIST_RETURN_IF_ERROR(coordinator::WriteFile(
        l.report_json, coordinator::ReportJson(job.plan, job.reports, agg).dump(2) + "\n"));
  }
  if (!l.trace.empty()) {
    HOIST_RETURN_IF_ERROR(
        coordinator::WriteFile(l.trace, coordinator::ChromeTrace(job.reports).dump() + "\n"));
  }
  if (!l.timeline.empty()) {
    HOIST_RETURN_IF_ERROR(
        coordinator::WriteFile(l.timeline, coordinator::TimelineSvg(job.reports)));
  }
  if (!l.metrics.empty()) {
    HOIST_RETURN_IF_ERROR(
        coordinator::WriteFile(l.metrics, coordinator::PrometheusText(job.reports, agg)));
  }
  return Status::Ok();
}

int RunLoad(CommonFlags& f, LoadFlags& l, int* argc, char*** argv, Clock::time_point origin) {
  std::unique_ptr<coordinator::Comm> comm;
  if (coordinator::LaunchedByMpi()) {
    Result<std::unique_ptr<coordinator::Comm>> c = coordinator::CreateMpiComm(argc, argv);
    if (!c.ok()) return Fail(c.status(), kExitFailure);
    comm = std::move(c).value();
  } else {
    comm = coordinator::CreateSoloComm();
  }
  const Clock::time_point init_end = Clock::now();
  if (Status s = SetUpLogging(f.log_level, comm->rank(), comm->host()); !s.ok()) {
    return Fail(s, kExitUsage);
  }
  // Configuration errors are the same on every rank (same flags, same file), so every rank
  // returns here and none waits in a collective.
  Topology topo;
  Result<planner::PlanOptions> plan = ResolvePlan(f, &topo);
  if (!plan.ok()) return Fail(plan.status(), kExitUsage);
  coordinator::JobOptions job;
  job.model_dir = f.model;
  job.plan = *plan;
  job.solo_rank = l.rank;
  job.fail_rank = l.inject_fail_rank;
  if (l.inject_kill_rank >= 0) {
    const int victim = l.inject_kill_rank;
    job.before_gather = [victim](int rank) {
      if (rank == victim) raise(SIGKILL);  // a rank that dies mid-job, for the failure tests
    };
  }
  Override(topo.peer_timeout_s, l.peer_timeout_opt, &l.peer_timeout_s);
  job.load.exchange.timeout_s = l.peer_timeout_s;
  if (!l.inject_peer_fault.empty()) {  // KIND:RANK, for the dedup failure tests
    const std::size_t colon = l.inject_peer_fault.find(':');
    const std::string kind = l.inject_peer_fault.substr(0, colon);
    const int victim =
        colon == std::string::npos ? -1 : std::atoi(l.inject_peer_fault.c_str() + colon + 1);
    if ((kind != "kill" && kind != "error" && kind != "stall") || victim < 0) {
      return Fail(Status::InvalidArgument("--inject-peer-fault wants kill|error|stall:RANK"),
                  kExitUsage);
    }
    if (victim == comm->rank()) {
      job.load.exchange.fault = kind == "kill"    ? rank::PeerFault::kKill
                                : kind == "error" ? rank::PeerFault::kError
                                                  : rank::PeerFault::kStall;
    }
  }
  Override(topo.read, l.read_opt, &l.read);
  Override(topo.device, l.device_opt, &l.device);
  Override(topo.slots, l.slots_opt, &l.slots);
  Override(topo.slot_mib, l.slot_mib_opt, &l.slot_mib);
  Override(topo.threads, l.threads_opt, &l.threads);
  Override(topo.verify, l.verify_opt, &l.verify);
  std::optional<transport::ReadMode> mode = transport::ParseReadMode(l.read);
  if (!mode) return Fail(Status::InvalidArgument("unknown read mode '" + l.read + "'"), kExitUsage);
  job.load.read_mode = *mode;
  if (l.device == "auto") {
    job.load.device = rank::DeviceKind::kAuto;
  } else if (l.device == "cuda") {
    job.load.device = rank::DeviceKind::kCuda;
  } else if (l.device == "host") {
    job.load.device = rank::DeviceKind::kHost;
  } else {
    return Fail(Status::InvalidArgument("device '" + l.device + "' is not auto, cuda or host"),
                kExitUsage);
  }
  std::optional<transport::StagingKind> staging = transport::ParseStagingKind(l.staging);
  if (!staging) {
    return Fail(
        Status::InvalidArgument("staging '" + l.staging + "' is not auto, register or mallochost"),
        kExitUsage);
  }
  job.load.staging = *staging;
  job.load.chunk_bytes = static_cast<std::uint64_t>(l.chunk_kib) << 10;
  job.load.slots = l.slots;
  job.load.slot_bytes = static_cast<std::uint64_t>(l.slot_mib) << 20;
  job.load.threads = l.threads;
  job.load.verify = l.verify;
  job.load.dump_dir = l.dump;
  job.load.bind_numa = !l.no_numa;
  job.load.origin = origin;
  job.init_s = std::chrono::duration<double>(init_end - origin).count();

  Result<coordinator::JobResult> result = coordinator::RunJob(*comm, job);
  if (!result.ok()) return Fail(result.status(), kExitFailure);
  int rc = 0;
  if (comm->rank() == 0) {
    if (Status s = WriteReports(l, *result); !s.ok()) {
      Fail(s, kExitFailure);
      rc = kExitFailure;
    }
    if (!result->failure.ok()) return Fail(result->failure, kExitFailure);
  } else if (!result->failure.ok()) {
    rc = kExitFailure;
  }
  return rc;
}

}  // namespace

int Main(int argc, char** argv) {
  const Clock::time_point origin = Clock::now();
  CLI::App app{"hoist: lift safetensors checkpoints into GPU memory across many ranks"};
  app.require_subcommand(1);

  CommonFlags plan_flags;
  std::string json_path, out_path;
  CLI::App* plan = app.add_subcommand("plan", "read headers only and print/write the load plan");
  AddCommon(plan, &plan_flags);
  plan->add_option("--json", json_path, "write the plan summary as JSON");
  plan->add_option("--out", out_path, "write the protobuf plan");

  CommonFlags load_flags;
  LoadFlags l;
  CLI::App* load =
      app.add_subcommand("load", "load weights (one rank, or every rank under mpirun)");
  AddCommon(load, &load_flags);
  load->add_option("--rank", l.rank, "without mpirun: which rank of the plan to execute")
      ->check(CLI::NonNegativeNumber);
  l.read_opt =
      load->add_option("--read", l.read, "auto | buffered | direct | mmap | pageable | registered");
  l.device_opt = load->add_option("--device", l.device, "auto | cuda | host");
  l.slots_opt = load->add_option("--slots", l.slots, "pinned staging slots (0: default)");
  l.slot_mib_opt = load->add_option("--slot-mib", l.slot_mib, "MiB per staging slot (0: default)");
  l.threads_opt = load->add_option("--threads", l.threads, "fill threads (0: default)");
  load->add_option(
      "--staging", l.staging,
      "how staging is pinned: auto | register (touch + cudaHostRegister) | mallochost");
  load->add_option("--chunk-kib", l.chunk_kib, "KiB per fill task (0: slot size / threads)")
      ->check(CLI::NonNegativeNumber);
  l.verify_opt = load->add_flag("--verify", l.verify, "prove every device byte equals the plan's");
  load->add_option("--dump", l.dump, "write <DIR>/rank-<R>.safetensors from device memory");
  load->add_option("--report-json", l.report_json, "write the aggregated report as JSON (rank 0)");
  load->add_option("--trace", l.trace, "write Chrome trace events (rank 0)");
  load->add_option("--timeline", l.timeline, "write an SVG timeline (rank 0)");
  load->add_option("--metrics", l.metrics, "write Prometheus text (rank 0)");
  load->add_flag("--no-numa", l.no_numa, "do not bind to the GPU's NUMA node");
  load->add_option("--inject-fail-rank", l.inject_fail_rank, "testing: fail this rank's load")
      ->group("");
  load->add_option("--inject-kill-rank", l.inject_kill_rank, "testing: SIGKILL this rank")
      ->group("");
  l.peer_timeout_opt =
      load->add_option("--peer-timeout-s", l.peer_timeout_s,
                       "dedup: seconds any wait for a peer may take before the job fails")
          ->check(CLI::PositiveNumber);
  load->add_option("--inject-peer-fault", l.inject_peer_fault,
                   "testing: kill:RANK, error:RANK or stall:RANK mid-exchange (dedup)")
      ->group("");

  ServeCommands serve_commands(&app);  // `serve` and `ctl` (launch/serve_cli.h)

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (*plan) return RunPlan(plan_flags, json_path, out_path);
  if (serve_commands.Selected()) return serve_commands.Run(&argc, &argv, origin);
  return RunLoad(load_flags, l, &argc, &argv, origin);
}

}  // namespace hoist::launch
