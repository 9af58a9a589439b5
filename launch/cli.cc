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
#include <regex>
#include <string>
#include <vector>

#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "coordinator/report.h"
#include "launch/exit_codes.h"
#include "launch/job_spec.h"
#include "launch/launcher_env.h"
#include "launch/logging.h"
#include "launch/serve_cli.h"
#include "launch/suggest.h"
#include "launch/topology.h"
#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "planner/plan_summary.h"

namespace hoist::launch {
namespace {

using Clock = std::chrono::steady_clock;

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

int RunPlan(const JobSpec& spec, const std::string& log_level, const std::string& json_path,
            const std::string& out_path) {
  // Under a launcher every process would plan the same: only rank 0 prints an error.
  const bool quiet = !PrintsSharedErrors();
  if (Status s = SetUpLogging(log_level, 0, "-"); !s.ok()) return Fail(s, quiet);
  Result<ResolvedJob> job = ResolveJobSpec(spec);
  if (!job.ok()) return Fail(job.status(), quiet);
  Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(job->job.model_dir);
  if (!ckpt.ok()) return Fail(ckpt.status(), quiet);
  Result<proto::LoadPlan> plan = planner::BuildLoadPlan(*ckpt, job->job.plan);
  if (!plan.ok()) return Fail(plan.status(), quiet);
  std::cout << planner::FormatPlanTable(*plan);
  if (!json_path.empty()) {
    if (Status s = coordinator::WriteFile(json_path, planner::PlanToJson(*plan).dump(2) + "\n");
        !s.ok()) {
      return Fail(s, quiet);
    }
  }
  if (!out_path.empty()) {
    if (Status s = coordinator::WriteFile(out_path, plan->SerializeAsString()); !s.ok()) {
      return Fail(s, quiet);
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

// --inject-peer-fault KIND:RANK (dedup failure tests): the fault this rank plays, if any.
Result<rank::PeerFault> ParsePeerFault(const std::string& spec, int my_rank) {
  if (spec.empty()) return rank::PeerFault::kNone;
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const int victim = colon == std::string::npos ? -1 : std::atoi(spec.c_str() + colon + 1);
  if ((kind != "kill" && kind != "error" && kind != "stall") || victim < 0) {
    return Status::InvalidArgument("--inject-peer-fault wants kill|error|stall:RANK");
  }
  if (victim != my_rank) return rank::PeerFault::kNone;
  return kind == "kill"    ? rank::PeerFault::kKill
         : kind == "error" ? rank::PeerFault::kError
                           : rank::PeerFault::kStall;
}

int RunLoad(const JobSpec& spec, const LoadFlags& l, const std::string& log_level, int* argc,
            char*** argv, Clock::time_point origin) {
  // Configuration errors are the same on every rank (same flags, same file): each process finds
  // them before MPI starts, rank 0 alone prints, and every rank exits with the same code.
  Result<ResolvedJob> resolved = ResolveJobSpec(spec);
  if (!resolved.ok()) return Fail(resolved.status(), !PrintsSharedErrors());
  if (Result<rank::PeerFault> f = ParsePeerFault(l.inject_peer_fault, 0); !f.ok()) {
    return Fail(f.status(), !PrintsSharedErrors());
  }
  std::unique_ptr<coordinator::Comm> comm;
  if (coordinator::LaunchedByMpi()) {
    Result<std::unique_ptr<coordinator::Comm>> c = coordinator::CreateMpiComm(argc, argv);
    if (!c.ok()) return Fail(c.status());
    comm = std::move(c).value();
  } else {
    comm = coordinator::CreateSoloComm();
  }
  const Clock::time_point init_end = Clock::now();
  if (Status s = SetUpLogging(log_level, comm->rank(), comm->host()); !s.ok()) {
    return Fail(s, comm->rank() != 0);
  }
  coordinator::JobOptions job = std::move(resolved->job);
  job.fail_rank = l.inject_fail_rank;
  if (l.inject_kill_rank >= 0) {
    const int victim = l.inject_kill_rank;
    job.before_gather = [victim](int rank) {
      if (rank == victim) raise(SIGKILL);  // a rank that dies mid-job, for the failure tests
    };
  }
  job.load.exchange.fault = *ParsePeerFault(l.inject_peer_fault, comm->rank());
  job.load.dump_dir = l.dump;
  job.load.origin = origin;
  // Every rank sets the callback (so every rank runs the same progress rounds); rank 0 calls it.
  if (!l.no_progress) job.progress = ProgressPrinter();
  job.init_s = std::chrono::duration<double>(init_end - origin).count();

  Result<coordinator::JobResult> result = coordinator::RunJob(*comm, job);
  if (!result.ok()) {
    // A configuration error (e.g. mpirun started a world the plan does not have) is seen by
    // every rank alike: rank 0 prints it.
    const bool shared = result.status().code() == Code::kInvalidArgument;
    return Fail(result.status(), shared && comm->rank() != 0);
  }
  if (comm->rank() != 0) return ExitCode(result->failure);
  int rc = kExitOk;
  if (Status s = WriteReports(l, *result); !s.ok()) rc = Fail(s);
  if (!result->failure.ok()) return Fail(result->failure);
  return rc;
}

// Command-line mistakes: one "hoist: error:" line (rank 0 only under a launcher), where to look,
// exit 2.
int UsageError(const std::string& what, const std::string& command) {
  if (PrintsSharedErrors()) {
    std::fprintf(stderr, "hoist: error: %s\nRun '%s --help' for the usage.\n", what.c_str(),
                 command.c_str());
  }
  return kExitUsage;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string near = Nearest(word, candidates);
  return near.empty() ? "" : " (did you mean '" + near + "'?)";
}

std::vector<std::string> CommandNames(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// The subcommand the command line chose (the app itself when none).
CLI::App* Chosen(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->parsed()) return sub;
  }
  return &app;
}

// Words for CLI11's parse errors: unknown flags get the nearest flag, values that do not convert
// say what the flag takes.
int ParseFailure(CLI::App& app, const CLI::ParseError& e) {
  CLI::App* sub = Chosen(app);
  const std::string command = sub == &app ? "hoist" : "hoist " + sub->get_name();
  const std::vector<std::string> extras = sub->remaining();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !extras.empty()) {
    const std::string& extra = extras.front();
    if (extra.rfind("-", 0) != 0) {
      return UsageError("unexpected argument '" + extra + "' for '" + command + "'", command);
    }
    std::vector<std::string> flags;
    for (const CLI::Option* o : sub->get_options()) {
      for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
    }
    const std::string flag = extra.substr(0, extra.find('='));
    return UsageError("unknown flag '" + flag + "' for '" + command + "'" + DidYouMean(flag, flags),
                      command);
  }
  static const std::regex kMissing("(\\S+): \\d+ required (\\S+) missing");
  static const std::regex kConvert("Could not convert: (\\S+) = (.*)");
  std::smatch m;
  const std::string what = e.what();
  if (std::regex_match(what, m, kMissing)) {
    return UsageError(m[1].str() + " needs a value", command);
  }
  if (std::regex_match(what, m, kConvert)) {
    const CLI::Option* o = sub->get_option_no_throw(m[1].str());
    const std::string type = o != nullptr ? o->get_type_name() : "";
    const std::string takes = type.rfind("INT", 0) == 0     ? "a whole number"
                              : type.rfind("FLOAT", 0) == 0 ? "a number"
                                                            : "another kind of value";
    return UsageError(m[1].str() + " '" + m[2].str() + "' is not valid: " + m[1].str() + " takes " +
                          takes + " (ranges in the usage)",
                      command);
  }
  return UsageError(what, command);
}

// `hoist` alone or `hoist WORD` where WORD is no command: say so, suggest the nearest.
int CheckCommand(CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> commands = CommandNames(app);
  std::string list;
  for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
  if (argc < 2) return UsageError("no command given: the commands are " + list, "hoist");
  const std::string word = argv[1];
  if (word == "-h" || word == "--help" || word == "--help-all") return kExitOk;
  if (word.rfind("-", 0) == 0) {
    return UsageError("'" + word + "' comes before a command: write 'hoist COMMAND " + word +
                          "'; the commands are " + list,
                      "hoist");
  }
  for (const std::string& c : commands) {
    if (word == c) return kExitOk;
  }
  return UsageError(
      "unknown command '" + word + "'" + DidYouMean(word, commands) + "; the commands are " + list,
      "hoist");
}

}  // namespace

int Main(int argc, char** argv) {
  const Clock::time_point origin = Clock::now();
  CLI::App app{"hoist: lift safetensors checkpoints into GPU memory across many ranks", "hoist"};
  app.require_subcommand(1);

  JobSpec plan_spec;
  std::string plan_log_level = "info", json_path, out_path;
  CLI::App* plan = app.add_subcommand("plan", "read headers only and print/write the load plan");
  AddJobFlags(plan, &plan_spec, /*load_flags=*/false);
  plan->add_option("--log-level", plan_log_level, "trace | debug | info | warn | error | off")
      ->check(LogLevels());
  plan->add_option("--json", json_path, "write the plan summary as JSON");
  plan->add_option("--out", out_path, "write the protobuf plan");

  JobSpec load_spec;
  LoadFlags l;
  std::string load_log_level = "info";
  CLI::App* load =
      app.add_subcommand("load", "load weights (one rank, or every rank under mpirun)");
  AddJobFlags(load, &load_spec, /*load_flags=*/true);
  load->add_option("--log-level", load_log_level, "trace | debug | info | warn | error | off")
      ->check(LogLevels());
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

  if (int rc = CheckCommand(app, argc, argv); rc != kExitOk) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the usage, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }
  if (*plan) return RunPlan(plan_spec, plan_log_level, json_path, out_path);
  if (serve_commands.Selected()) return serve_commands.Run(&argc, &argv, origin);
  return RunLoad(load_spec, l, load_log_level, &argc, &argv, origin);
}

}  // namespace hoist::launch
