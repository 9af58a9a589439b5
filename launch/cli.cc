#include "launch/cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
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
#include "util/printable.h"

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
  std::string inject_peer_fault;  // KIND:RANK (kill | error | stall), dedup exchange
  bool no_progress = false;
};

// Rank 0's progress display: a bar redrawn in place on a terminal, else a log line at most once
// a second and one at the end.
std::function<void(std::uint64_t, std::uint64_t, double, bool)> ProgressPrinter() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_line = std::make_shared<double>(-1.0);
  return [tty, last_line](std::uint64_t done, std::uint64_t total, double s, bool final) {
    const double unit = total >= (1ull << 30) ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
    const char* unit_name = total >= (1ull << 30) ? "GiB" : "MiB";
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const double rate = s > 0 ? static_cast<double>(done) / kGiB / s : 0.0;
    if (tty) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(frac * kWidth + 0.5);
      std::fprintf(stderr, "\rhoist: [%s%s] %.2f / %.2f %s  %.1f GiB/s%s",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   static_cast<double>(done) / unit, static_cast<double>(total) / unit, unit_name,
                   rate, final ? "\n" : "");
      return;
    }
    if (final || s - *last_line >= 1.0) {
      *last_line = s;
      spdlog::info("progress: {:.2f} / {:.2f} {} ({:.0f}%) over all ranks, {:.1f} GiB/s{}",
                   static_cast<double>(done) / unit, static_cast<double>(total) / unit, unit_name,
                   frac * 100, rate, final ? ", done" : "");
    }
  };
}

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "hoist: error: %s\n", Printable(s.ToString(), true).c_str());
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

int RunLoad(const JobSpec& spec, const LoadFlags& l, const std::string& log_level, int* argc,
            char*** argv, Clock::time_point origin) {
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
  // returns here and none waits in a collective.
  Result<ResolvedJob> resolved = ResolveJobSpec(spec);
  if (!resolved.ok()) return Fail(resolved.status(), kExitUsage);
  coordinator::JobOptions job = std::move(resolved->job);
  job.fail_rank = l.inject_fail_rank;
  if (l.inject_kill_rank >= 0) {
    const int victim = l.inject_kill_rank;
    job.before_gather = [victim](int rank) {
      if (rank == victim) raise(SIGKILL);  // a rank that dies mid-job, for the failure tests
    };
  }
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
  job.load.dump_dir = l.dump;
  job.load.origin = origin;
  // Every rank sets the callback (so every rank runs the same progress rounds); rank 0 calls it.
  if (!l.no_progress) job.progress = ProgressPrinter();
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
