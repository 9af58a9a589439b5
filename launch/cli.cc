#include "launch/cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "coordinator/report.h"
#include "launch/job_spec.h"
#include "launch/logging.h"
#include "launch/serve_cli.h"
#include "launch/topology.h"
#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "planner/plan_summary.h"
#include "rank/placement.h"
#include "transport/peer.h"

namespace hoist::launch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// What `hoist load` adds to the job selection (launch/job_spec.h): outputs and test hooks.
struct LoadFlags {
  std::string dump;
  std::string report_json, trace, timeline, metrics;
  int inject_fail_rank = -1;
  int inject_kill_rank = -1;
  int inject_stop_rank = -1;
  std::string inject_peer_fault;  // KIND:RANK (kill | error | stall), dedup exchange
  bool no_progress = false;
};

// Rank 0's progress display: a bar redrawn in place on a terminal, else a log line at most once
// a second and one at the end. It counts the bytes of the ranks that run, names what the slowest
// of them is doing while it is not reading, and says "done" only when every rank succeeded.
std::function<void(const coordinator::Progress&)> ProgressPrinter() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_line = std::make_shared<double>(-1.0);
  return [tty, last_line](const coordinator::Progress& p) {
    const bool gib = p.total >= (1ull << 30);
    const double unit = gib ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
    const char* unit_name = gib ? "GiB" : "MiB";
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const double frac =
        p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
    const double rate = p.seconds > 0 ? static_cast<double>(p.done) / kGiB / p.seconds : 0.0;
    const std::string who = p.ranks == 1 ? "" : " over " + std::to_string(p.ranks) + " ranks";
    const std::string what = p.final ? (p.ok ? ", done" : ", FAILED")
                             : p.activity == "reading" || p.activity.empty()
                                 ? ""
                                 : ", " + std::string(p.activity);
    if (tty) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth + 0.5);
      std::fprintf(stderr, "\rhoist: [%s%s] %.2f / %.2f %s%s  %.1f GiB/s%s\033[K%s",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   static_cast<double>(p.done) / unit, static_cast<double>(p.total) / unit,
                   unit_name, who.c_str(), rate, what.c_str(), p.final ? "\n" : "");
      return;
    }
    if (p.final || p.seconds - *last_line >= 1.0) {
      *last_line = p.seconds;
      spdlog::info("progress: {:.2f} / {:.2f} {} ({:.0f}%){}, {:.1f} GiB/s{}",
                   static_cast<double>(p.done) / unit, static_cast<double>(p.total) / unit,
                   unit_name, frac * 100, who, rate, what);
    }
  };
}

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "hoist: error: %s\n", s.ToString().c_str());
  return code;
}

int RunPlan(const JobSpec& spec, const std::string& log_level, const std::string& json_path,
            const std::string& out_path) {
  if (Status s = SetUpLogging(log_level, 0, "-"); !s.ok()) return Fail(s, kExitUsage);
  Result<ResolvedJob> job = ResolveJobSpec(spec);
  if (!job.ok()) return Fail(job.status(), kExitUsage);
  Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(job->job.model_dir);
  if (!ckpt.ok()) return Fail(ckpt.status(), kExitFailure);
  Result<proto::LoadPlan> plan = planner::BuildLoadPlan(*ckpt, job->job.plan);
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

// The test hooks of `hoist load` (hidden flags): a failed, killed, stopped or faulty rank.
Status ApplyTestHooks(const LoadFlags& l, int rank, coordinator::JobOptions* job) {
  job->fail_rank = l.inject_fail_rank;
  if (l.inject_kill_rank == rank) {
    job->before_report = [](int) { raise(SIGKILL); };  // a rank that dies before it reports
  }
  if (l.inject_stop_rank == rank) {
    job->after_plan = [](int r) {  // a rank that stops (as a hung NFS read or frozen host would)
      spdlog::error("rank {}: injected stop: SIGSTOP", r);
      raise(SIGSTOP);
    };
  }
  if (l.inject_peer_fault.empty()) return Status::Ok();
  const std::size_t colon = l.inject_peer_fault.find(':');
  const std::string kind = l.inject_peer_fault.substr(0, colon);
  const int victim =
      colon == std::string::npos ? -1 : std::atoi(l.inject_peer_fault.c_str() + colon + 1);
  if ((kind != "kill" && kind != "error" && kind != "stall") || victim < 0) {
    return Status::InvalidArgument("--inject-peer-fault wants kill|error|stall:RANK");
  }
  if (victim != rank) return Status::Ok();
  if (kind == "kill") {
    job->exchange.after_first_group = [rank] {
      spdlog::error("rank {}: injected peer fault: killing this rank mid-exchange", rank);
      raise(SIGKILL);
    };
    return Status::Ok();
  }
  const transport::PeerFault fault =
      kind == "error" ? transport::PeerFault::kError : transport::PeerFault::kStall;
  job->wrap_peer = [rank, fault](std::unique_ptr<transport::Peer> p) {
    if (fault == transport::PeerFault::kStall) {
      spdlog::error("rank {}: injected peer fault: stalling mid-exchange", rank);
    }
    return transport::WrapFaultyPeer(std::move(p), fault);
  };
  return Status::Ok();
}

// Opens this rank's device on a helper thread before MPI starts, so that the CUDA context (about
// 0.3 s) is created beside MPI_Init. The GPU is the one the planner will assign: the topology's
// for this rank (the launcher's environment says which rank this is), else the rank's index on
// its host.
std::shared_ptr<std::future<Result<rank::PreparedDevice>>> StartDeviceEarly(
    const coordinator::JobOptions& job, Clock::time_point origin) {
  const int rank = coordinator::LaunchedByMpi() ? coordinator::LauncherRank() : job.solo_rank;
  int gpu = coordinator::LaunchedByMpi() ? coordinator::LauncherLocalRank() : job.solo_rank;
  if (rank >= 0 && static_cast<std::size_t>(rank) < job.plan.locations.size()) {
    gpu = static_cast<int>(job.plan.locations[static_cast<std::size_t>(rank)].gpu);
  }
  if (gpu < 0) return nullptr;  // unknown before MPI: RunJob opens it beside planning
  return std::make_shared<std::future<Result<rank::PreparedDevice>>>(
      std::async(std::launch::async, rank::PrepareDevice, job.load.device, gpu, origin));
}

int RunLoad(const JobSpec& spec, const LoadFlags& l, const std::string& log_level, int* argc,
            char*** argv, Clock::time_point origin) {
  // Before MPI: the job's options (pure) and the device and host topology, which load while
  // MPI starts.
  Result<ResolvedJob> resolved = ResolveJobSpec(spec);
  std::shared_ptr<std::future<Result<rank::PreparedDevice>>> prepared;
  if (resolved.ok()) prepared = StartDeviceEarly(resolved->job, origin);
  rank::WarmHostTopology();
  std::unique_ptr<coordinator::Comm> comm;
  if (coordinator::LaunchedByMpi()) {
    Result<std::unique_ptr<coordinator::Comm>> c = coordinator::CreateMpiComm(argc, argv);
    if (!c.ok()) return Fail(c.status(), kExitFailure);
    comm = std::move(c).value();
  } else {
    comm = coordinator::CreateSoloComm();
  }
  const Clock::time_point init_end = Clock::now();
  if (Status s = SetUpLogging(log_level, comm->rank(), comm->host()); !s.ok()) {
    return Fail(s, kExitUsage);
  }
  // Configuration errors are the same on every rank (same flags, same file), so every rank
  // returns here and none waits for another.
  if (!resolved.ok()) return Fail(resolved.status(), kExitUsage);
  coordinator::JobOptions job = std::move(resolved->job);
  if (Status s = ApplyTestHooks(l, comm->rank(), &job); !s.ok()) return Fail(s, kExitUsage);
  job.prepared = prepared;
  job.load.dump_dir = l.dump;
  job.load.origin = origin;
  if (!l.no_progress) job.progress = ProgressPrinter();  // rank 0 calls it
  job.init_s = std::chrono::duration<double>(init_end - origin).count();

  Result<coordinator::JobResult> result = coordinator::RunJob(*comm, std::move(job));
  if (!result.ok()) {
    const int rc =
        Fail(result.status(),
             result.status().code() == Code::kInvalidArgument ? kExitUsage : kExitFailure);
    // The ranks are out of step (one went silent): MPI_Finalize would wait for it forever.
    if (result.status().code() == Code::kAborted && comm->size() > 1) comm->Abort(rc);
    return rc;
  }
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

  JobSpec plan_spec;
  std::string plan_log_level = "info", json_path, out_path;
  CLI::App* plan = app.add_subcommand("plan", "read headers only and print/write the load plan");
  AddJobFlags(plan, &plan_spec, /*load_flags=*/false);
  plan->add_option("--log-level", plan_log_level, "trace | debug | info | warn | error | off");
  plan->add_option("--json", json_path, "write the plan summary as JSON");
  plan->add_option("--out", out_path, "write the protobuf plan");

  JobSpec load_spec;
  LoadFlags l;
  std::string load_log_level = "info";
  CLI::App* load =
      app.add_subcommand("load", "load weights (one rank, or every rank under mpirun)");
  AddJobFlags(load, &load_spec, /*load_flags=*/true);
  load->add_option("--log-level", load_log_level, "trace | debug | info | warn | error | off");
  load->add_option("--dump", l.dump, "write <DIR>/rank-<R>.safetensors from device memory");
  load->add_option("--report-json", l.report_json, "write the aggregated report as JSON (rank 0)");
  load->add_option("--trace", l.trace, "write Chrome trace events (rank 0)");
  load->add_option("--timeline", l.timeline, "write an SVG timeline (rank 0)");
  load->add_option("--metrics", l.metrics, "write Prometheus text (rank 0)");
  load->add_flag("--no-progress", l.no_progress,
                 "no progress display (rank 0: a bar on a terminal, else a log line a second)");
  load->add_option("--inject-fail-rank", l.inject_fail_rank, "testing: fail this rank's load")
      ->group("");
  load->add_option("--inject-kill-rank", l.inject_kill_rank, "testing: SIGKILL this rank")
      ->group("");
  load->add_option("--inject-stop-rank", l.inject_stop_rank,
                   "testing: SIGSTOP this rank after the plan arrives")
      ->group("");
  load->add_option("--inject-peer-fault", l.inject_peer_fault,
                   "testing: kill:RANK, error:RANK or stall:RANK mid-exchange (dedup)")
      ->group("");

  ServeCommands serve_commands(&app);  // `serve` and `ctl` (launch/serve_cli.h)

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  if (*plan) return RunPlan(plan_spec, plan_log_level, json_path, out_path);
  if (serve_commands.Selected()) return serve_commands.Run(&argc, &argv, origin);
  return RunLoad(load_spec, l, load_log_level, &argc, &argv, origin);
}

}  // namespace hoist::launch
