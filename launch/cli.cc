#include "launch/cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/job_spec.h"
#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "coordinator/report.h"
#include "launch/exit_codes.h"
#include "launch/job_flags.h"
#include "launch/logging.h"
#include "launch/output_paths.h"
#include "launch/pack_cli.h"
#include "launch/serve_cli.h"
#include "launch/status_line.h"
#include "launch/suggest.h"
#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "planner/plan_set.h"
#include "planner/plan_summary.h"
#include "rank/placement.h"
#include "transport/peers/peer.h"
#include "util/printable.h"
#include "util/terminal.h"

namespace hoist::launch {
namespace {

using Clock = std::chrono::steady_clock;

// What `hoist load` adds to the job selection (config/job_spec.h, flags in launch/job_flags.h):
// outputs and, in builds with test hooks (HOIST_TEST_HOOKS: not Release), the hidden --inject-*
// flags.
struct LoadFlags {
  std::string dump;
  std::string report_json, trace, timeline, metrics;
#if HOIST_TEST_HOOKS
  int inject_fail_rank = -1;
  int inject_kill_rank = -1;
  int inject_stop_rank = -1;
  std::string inject_peer_fault;   // KIND:RANK (kill | error | stall), dedup exchange
  std::string inject_plan_format;  // RANK:FORMAT, the plan format that rank says in its hello
#endif
  bool no_progress = false;
  bool rank_given = false;  // --rank on the command line (ignored under a launcher)
};

// Rank 0's progress display: a bar redrawn in place on a terminal (the log's records go above
// it: launch/status_line.h), else a log line at most once a second and one at the end. Under a
// launcher the output is forwarded and interleaved with other ranks', so it is never redrawn in
// place. It counts the bytes of the ranks that run, names what the slowest of them is doing
// while it is not reading, and says "done" only when every rank succeeded.
std::function<void(const coordinator::Progress&)> ProgressPrinter() {
  const bool in_place = ::isatty(STDERR_FILENO) != 0 && !UnderLauncher();
  auto last_line = std::make_shared<double>(-1.0);
  return [in_place, last_line](const coordinator::Progress& p) {
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
    if (in_place) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(std::min(frac, 1.0) * kWidth + 0.5);
      char bar[256];
      std::snprintf(bar, sizeof bar, "hoist: [%s%s] %.2f / %.2f %s%s  %.1f GiB/s%s",
                    std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                    static_cast<double>(p.done) / unit, static_cast<double>(p.total) / unit,
                    unit_name, who.c_str(), rate, what.c_str());
      if (p.final) {
        StderrStatusLine()->Finish(bar);
      } else {
        StderrStatusLine()->Show(bar);
      }
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

int RunPlan(const config::JobSpec& spec, const std::string& log_level, const std::string& json_path,
            const std::string& out_path) {
  // Under a launcher every process would plan the same: only rank 0 prints an error.
  const bool quiet = !PrintsSharedErrors();
  if (Status s = SetUpLogging(log_level, 0, "-"); !s.ok()) return Fail(s, quiet);
  Result<config::ResolvedJob> job = ResolveJob(spec);
  if (!job.ok()) return Fail(job.status(), quiet);
  if (Status s = CheckOutputFiles({{"--json", json_path}, {"--out", out_path}}); !s.ok()) {
    return Fail(s, quiet);
  }
  Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(job->job.model_dir);
  if (!ckpt.ok()) return Fail(ckpt.status(), quiet);
  // The compact plan (planner/plan_set.h): replicas folded, as rank 0 plans it.
  Result<proto::LoadPlan> plan = planner::BuildCompactPlan(*ckpt, job->job.plan);
  if (!plan.ok()) return Fail(plan.status(), quiet);
  std::cout << planner::FormatPlanTable(*plan);
  // What crosses the wire: the compact plan (rank 0's, and --out's), and what one rank receives.
  Result<planner::ViewBytes> views = planner::SampleViewBytes(*plan);
  if (!views.ok()) return Fail(views.status(), quiet);
  std::cout << "wire: plan " << plan->ByteSizeLong() << " bytes (" << plan->ranks_size()
            << " rank plans for " << planner::PlanWorld(*plan) << " ranks); a rank receives "
            << views->min << " (rank " << views->min_rank << ") to " << views->max << " (rank "
            << views->max_rank << ") bytes\n";
  if (!json_path.empty()) {
    nlohmann::json j = planner::PlanToJson(*plan);
    j["wire"] = {{"plan_bytes", plan->ByteSizeLong()},
                 {"rank_plans", plan->ranks_size()},
                 {"view_bytes_min", views->min},
                 {"view_bytes_max", views->max}};
    if (Status s = coordinator::WriteFile(json_path, j.dump(2) + "\n"); !s.ok()) {
      return Fail(s, quiet);
    }
  }
  if (!out_path.empty()) {
    std::string wire;
    if (!plan->SerializeToString(&wire)) {  // over protobuf's 2 GB limit
      return Fail(Status::Internal(out_path + ": the plan does not serialize (" +
                                   std::to_string(plan->ByteSizeLong()) + " bytes)"),
                  quiet);
    }
    if (Status s = coordinator::WriteFile(out_path, wire); !s.ok()) return Fail(s, quiet);
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

#if HOIST_TEST_HOOKS
// `text` as a whole non-negative decimal number (no sign, no spaces, nothing after it).
std::optional<int> WholeNumber(std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || text[0] == '-' || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

// "A:N" (the hooks' KIND:RANK and RANK:FORMAT): A, and N as a WholeNumber; nullopt otherwise.
std::optional<std::pair<std::string, int>> SplitAtColon(const std::string& text) {
  const std::size_t at = text.find(':');
  if (at == std::string::npos) return std::nullopt;
  const std::optional<int> n = WholeNumber(std::string_view(text).substr(at + 1));
  if (!n) return std::nullopt;
  return std::make_pair(text.substr(0, at), *n);
}

// The test hooks of `hoist load` (hidden flags): a failed, killed, stopped or faulty rank. The
// signals are raised here, in the executable, by callbacks the library calls
// (rank/test_hooks.h).
Status ApplyTestHooks(const LoadFlags& l, int rank, coordinator::JobOptions* job) {
  rank::TestHooks& hooks = job->hooks;
  hooks.fail_rank = l.inject_fail_rank;
  if (l.inject_kill_rank == rank) {
    hooks.before_report = [](int) { raise(SIGKILL); };  // a rank that dies before it reports
  }
  if (l.inject_stop_rank == rank) {
    hooks.after_plan = [](int r) {  // a rank that stops (as a hung NFS read or frozen host would)
      spdlog::error("rank {}: injected stop: SIGSTOP", r);
      raise(SIGSTOP);
    };
  }
  if (!l.inject_plan_format.empty()) {
    const std::optional<std::pair<std::string, int>> pf = SplitAtColon(l.inject_plan_format);
    const std::optional<int> victim = pf ? WholeNumber(pf->first) : std::nullopt;
    if (!victim || pf->second < 0) {
      return Status::InvalidArgument("--inject-plan-format wants RANK:FORMAT, got '" +
                                     l.inject_plan_format + "'");
    }
    if (*victim == rank) hooks.hello_plan_format = static_cast<std::uint32_t>(pf->second);
  }
  if (l.inject_peer_fault.empty()) return Status::Ok();
  const std::optional<std::pair<std::string, int>> pf = SplitAtColon(l.inject_peer_fault);
  const std::string kind = pf ? pf->first : "";
  if ((kind != "kill" && kind != "error" && kind != "stall") || pf->second < 0) {
    return Status::InvalidArgument("--inject-peer-fault wants kill|error|stall:RANK, got '" +
                                   l.inject_peer_fault + "'");
  }
  if (pf->second != rank) return Status::Ok();
  if (kind == "kill") {
    hooks.after_first_group = [rank] {
      spdlog::error("rank {}: injected peer fault: killing this rank mid-exchange", rank);
      raise(SIGKILL);
    };
    return Status::Ok();
  }
  const transport::PeerFault fault =
      kind == "error" ? transport::PeerFault::kError : transport::PeerFault::kStall;
  hooks.wrap_peer = [rank, fault](std::unique_ptr<transport::Peer> p) {
    if (fault == transport::PeerFault::kStall) {
      spdlog::error("rank {}: injected peer fault: stalling mid-exchange", rank);
    }
    return transport::WrapFaultyPeer(std::move(p), fault);
  };
  return Status::Ok();
}
#endif

// Opens this rank's device on a helper thread before MPI starts, so that the CUDA context (about
// 0.3 s) is created beside MPI_Init. The GPU is the one the planner will assign: the topology's
// for this rank (the launcher's environment says which rank this is), else the rank's index on
// its host.
std::shared_ptr<std::future<Result<rank::PreparedDevice>>> StartDeviceEarly(
    const coordinator::JobOptions& job, Clock::time_point origin) {
  const bool mpi = coordinator::LaunchedByMpi();
  const int gpu =
      coordinator::ExpectedGpu(job.plan, mpi ? coordinator::LauncherRank() : job.solo_rank,
                               mpi ? coordinator::LauncherLocalRank() : job.solo_rank);
  if (gpu < 0) return nullptr;  // unknown before MPI: RunJob opens it beside planning
  return std::make_shared<std::future<Result<rank::PreparedDevice>>>(
      std::async(std::launch::async, rank::PrepareDevice, job.load.settings.device, gpu, origin,
                 rank::RingOf(job.load.settings)));
}

int RunLoad(const config::JobSpec& spec, const LoadFlags& l, const std::string& log_level,
            int* argc, char*** argv, Clock::time_point origin) {
  // Before MPI: the job's options (pure; configuration errors are the same on every rank, so
  // each process finds them here, rank 0 alone prints, and every rank exits with the same code),
  // then the device and host topology, which load on helper threads while MPI starts, or, under
  // a launcher, once it has started (start_helpers below).
  Result<config::ResolvedJob> resolved = ResolveJob(spec);
  if (!resolved.ok()) return Fail(resolved.status(), !PrintsSharedErrors());
  Status outputs = CheckOutputFiles({{"--report-json", l.report_json},
                                     {"--trace", l.trace},
                                     {"--timeline", l.timeline},
                                     {"--metrics", l.metrics}});
  if (outputs.ok()) outputs = CheckDumpFolder("--dump", l.dump);
  if (!outputs.ok()) return Fail(outputs, !PrintsSharedErrors());
  // MPI_Init adds environment variables (Open MPI's, and PMIx's under srun --mpi=pmix), and
  // glibc's getenv is not safe beside a setenv that adds one: the CUDA and hwloc start-ups read
  // the environment, and a topology load beside MPI_Init crashed in getenv (hosts_slurm, 1 run
  // in 6 under srun). So under a launcher the helpers start after MPI_Init, beside the planning.
  const bool under_launcher = coordinator::LaunchedByMpi();
  std::shared_ptr<std::future<Result<rank::PreparedDevice>>> prepared;
  auto start_helpers = [&] {
    transport::PrepareNcclEnvironment();  // its setenv, too, before any helper thread
    prepared = StartDeviceEarly(resolved->job, origin);
    rank::WarmHostTopology();
  };
  if (!under_launcher) start_helpers();
  Result<std::unique_ptr<coordinator::Comm>> launched = coordinator::CreateLaunchComm(argc, argv);
  if (!launched.ok()) return Fail(launched.status());
  if (under_launcher) start_helpers();
  std::unique_ptr<coordinator::Comm> comm = std::move(launched).value();
  const Clock::time_point init_end = Clock::now();
  // Alone, the process is the plan rank --rank names (its log lines say so); under mpirun, its
  // MPI rank.
  const int log_rank = coordinator::LaunchedByMpi() ? comm->rank() : spec.solo_rank;
  if (Status s = SetUpLogging(log_level, log_rank, comm->host()); !s.ok()) {
    return Fail(s, comm->rank() != 0);
  }
  if (l.rank_given && coordinator::LaunchedByMpi() && comm->rank() == 0) {
    spdlog::warn(
        "--rank is ignored under mpirun: each process loads the plan rank of its MPI rank");
  }
  coordinator::JobOptions job = std::move(resolved->job);
#if HOIST_TEST_HOOKS
  if (Status s = ApplyTestHooks(l, comm->rank(), &job); !s.ok()) {
    return Fail(s, comm->rank() != 0);
  }
#endif
  job.prepared = prepared;
  job.load.settings.dump_dir = l.dump;
  job.load.wiring.origin = origin;
  if (!l.no_progress) job.progress = ProgressPrinter();  // rank 0 calls it
  job.init_s = std::chrono::duration<double>(init_end - origin).count();

  Result<coordinator::JobResult> result = coordinator::RunJob(*comm, std::move(job));
  if (!result.ok()) {
    // A configuration error (e.g. mpirun started a world the plan does not have) is seen by
    // every rank alike: rank 0 prints it.
    const bool shared = result.status().code() == Code::kInvalidArgument;
    const int rc = Fail(result.status(), shared && comm->rank() != 0);
    // The ranks are out of step (one went silent): MPI_Finalize would wait for it forever.
    if (result.status().code() == Code::kAborted && comm->size() > 1) comm->Abort(rc);
    return rc;
  }
  int rc = kExitOk;
  if (comm->rank() != 0) {
    rc = ExitCode(result->failure);
  } else {
    if (Status s = WriteReports(l, *result); !s.ok()) rc = Fail(s);
    if (!result->failure.ok()) rc = Fail(result->failure);
  }
  return rc;
}

// Command-line mistakes: one "hoist: error:" line (rank 0 only under a launcher), where to look,
// exit 2.
int UsageError(const std::string& what, const std::string& command) {
  if (PrintsSharedErrors()) {
    std::fprintf(stderr, "hoist: error: %s\nRun '%s --help' for the usage.\n",
                 Printable(what).c_str(), command.c_str());
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

// " from LO to HI" for a job option's flag (config::kOptions), else " (ranges in the usage)".
std::string RangeOf(const std::string& flag) {
  std::string name = flag.rfind("--", 0) == 0 ? flag.substr(2) : "";
  std::replace(name.begin(), name.end(), '-', '_');
  const config::OptionInfo* o = config::FindOption(name);
  if (o == nullptr || o->type == config::OptionType::kString ||
      o->type == config::OptionType::kBool) {
    return " (ranges in the usage)";
  }
  char range[96];
  std::snprintf(range, sizeof range,
                o->type == config::OptionType::kInt ? " from %.15g to %.15g%s"
                                                    : " above %.15g and at most %.15g%s",
                o->lo, o->hi, o->zero_is_default ? " (0: the default)" : "");
  return range;
}

// Every option that takes a value refuses an empty one ("--slots ''"), which CLI11 would read as
// 0 or as no value: a usage error naming the flag.
void RefuseEmptyValues(CLI::App* app) {
  const CLI::Validator non_empty(
      [](std::string& v) { return v.empty() ? std::string("needs a value, not ''") : ""; }, "",
      "non-empty");
  for (CLI::Option* o : app->get_options()) {
    if (o->get_expected_min() > 0) o->check(non_empty);
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    RefuseEmptyValues(sub);
  }
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
                          takes + RangeOf(m[1].str()),
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
  if (word == "-h" || word == "--help" || word == "--help-all" || word == "--version") {
    return kExitOk;
  }
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

  config::JobSpec plan_spec;
  std::string plan_log_level = "info", json_path, out_path;
  CLI::App* plan = app.add_subcommand("plan", "read headers only and print/write the load plan");
  AddJobFlags(plan, &plan_spec, /*load_flags=*/false);
  plan->add_option("--log-level", plan_log_level, "trace | debug | info | warn | error | off")
      ->check(LogLevels());
  plan->add_option("--json", json_path, "write the plan summary as JSON");
  plan->add_option("--out", out_path, "write the protobuf plan");

  config::JobSpec load_spec;
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
#if HOIST_TEST_HOOKS
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
  load->add_option("--inject-plan-format", l.inject_plan_format,
                   "testing: RANK:FORMAT, the plan format that rank says in its hello")
      ->group("");
#endif

  ServeCommands serve_commands(&app);  // `serve` and `ctl` (launch/serve_cli.h)
  PackCommand pack_command(&app);      // `pack` (launch/pack_cli.h)

  RefuseEmptyValues(&app);
  // One --version, before a command or after any: "hoist 0.1.0", exit 0.
  app.set_version_flag("--version", std::string("hoist ") + HOIST_VERSION);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->set_version_flag("--version", std::string("hoist ") + HOIST_VERSION);
  }
  if (int rc = CheckCommand(app, argc, argv); rc != kExitOk) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // prints the usage, exit 0
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);  // prints the version, exit 0
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }
  if (*plan) return RunPlan(plan_spec, plan_log_level, json_path, out_path);
  if (const CLI::Option* rank = load->get_option_no_throw("--rank")) {
    l.rank_given = rank->count() > 0;
  }
  if (serve_commands.Selected()) return serve_commands.Run(&argc, &argv, origin);
  if (pack_command.Selected()) return pack_command.Run();
  return RunLoad(load_spec, l, load_log_level, &argc, &argv, origin);
}

}  // namespace hoist::launch
