#include "launch/serve_cli.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include "config/job_spec.h"
#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "coordinator/report.h"
#include "daemon/serve.h"
#include "daemon/serve_wire.h"
#include "launch/exit_codes.h"
#include "launch/job_flags.h"
#include "launch/logging.h"
#include "launch/suggest.h"
#include "rank/load_watch.h"
#include "util/printable.h"

namespace hoist::launch {
namespace {

std::atomic<rank::Daemon*> g_daemon{nullptr};

void OnStopSignal(int) {
  if (rank::Daemon* d = g_daemon.load()) d->RequestStop();
}

// 395520 -> "386.3 KiB"
std::string Gib(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

void InstallStopHandlers(rank::Daemon* daemon) {
  g_daemon.store(daemon);
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

void PrintReady(const proto::LoadPlan& plan, std::uint32_t rank, const rank::ServeOptions& so,
                std::uint64_t arena_bytes, const std::string& device_name) {
  std::printf("hoist serve: rank %u ready at %s (%d tensors, %s on %s%s)\n", rank,
              so.socket_path.c_str(), plan.ranks(static_cast<int>(rank)).tensors_size(),
              Gib(arena_bytes).c_str(), device_name.c_str(), so.host_cache ? ", host cache" : "");
  std::fflush(stdout);
  spdlog::info("serving rank {} at {}", rank, so.socket_path);
}

// `ctl status`'s residency: yes, or why not.
const char* ResidentText(const proto::StatusReply& s) {
  if (s.resident()) return "yes";
  if (s.loading()) return "no (loading)";
  return s.restoring() ? "no (restoring)" : "no (released)";
}

// The job's table (rank 0) and outcome: the exit code when it failed, -1 when it succeeded.
int ReportLoad(int comm_rank, const Result<coordinator::JobResult>& result) {
  if (!result.ok()) {
    const bool shared = result.status().code() == Code::kInvalidArgument;
    return Fail(result.status(), shared && comm_rank != 0);
  }
  if (comm_rank == 0 && !result->reports.empty()) {
    const coordinator::Aggregate agg =
        coordinator::AggregateReports(result->reports, result->wall_s);
    std::cerr << coordinator::FormatTable(result->plan, result->reports, agg);
  }
  if (!result->failure.ok()) return Fail(result->failure);
  if (!result->local) return Fail(Status::Internal("serve: the load left no arena"));
  return -1;
}

}  // namespace

// The daemon of --serve-while-loading, served on its own thread while the job runs. A stop (the
// daemon's Serve returning) before the job finished cancels this rank's load.
// Threading: Start, JobFinished, End and Join on the job's thread; the serving thread only
// serves and cancels.
struct ServeCommands::EarlyDaemon {
  explicit EarlyDaemon(coordinator::JobInFlight& j) : job(j) {}
  ~EarlyDaemon() { (void)Join(); }

  // Starts the daemon over the load's arena once it exists (not when the load failed first; a
  // daemon that cannot start cancels the load with its error).
  void Start(rank::LoadWatch& watch, rank::ServeOptions so, std::string socket_path) {
    Result<transport::DeviceBuffer> arena = watch.AwaitArena();
    if (!arena.ok()) return;
    so.socket_path = std::move(socket_path);
    Result<std::unique_ptr<rank::Daemon>> d = rank::Daemon::StartLoading(
        *watch.arena_device(), *arena, job.plan(), static_cast<std::uint32_t>(job.rank()), so);
    if (!d.ok()) {
      Cancel(d.status(), false);
      return;
    }
    daemon = std::move(d).value();
    InstallStopHandlers(daemon.get());
    std::printf("hoist serve: rank %d serving at %s while it loads\n", job.rank(),
                so.socket_path.c_str());
    std::fflush(stdout);
    thread = std::thread([this] {
      served = daemon->Serve();
      Cancel(Status::Aborted("serve: stopped during the initial load"), true);
    });
  }
  // Cancels the load unless it finished; `by_stop`: because the daemon was stopped.
  void Cancel(const Status& why, bool by_stop) {
    std::lock_guard lock(mu);
    if (finished) return;
    stopped = stopped || by_stop;
    if (rank::RankJob* load = job.load()) load->Cancel(why);
  }
  // True when a stop cancelled the load before it finished.
  bool JobFinished() {
    std::lock_guard lock(mu);
    finished = true;
    return stopped;
  }
  // The load failed with `failure` (or was cancelled): the daemon answers its waiting clients
  // with it and stops.
  void End(const Status& failure) {
    if (daemon != nullptr) daemon->LoadEnded(failure);
    (void)Join();
  }
  Status Join() {
    if (thread.joinable()) thread.join();
    g_daemon.store(nullptr);
    return served;
  }

  coordinator::JobInFlight& job;
  std::unique_ptr<rank::Daemon> daemon;
  std::thread thread;
  Status served;
  std::mutex mu;
  bool finished = false, stopped = false;
};

std::string DefaultSocketDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/hoist";
  return "/tmp/hoist-" + std::to_string(::geteuid());
}

std::string RankSocketPath(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".sock";
}

ServeCommands::ServeCommands(CLI::App* app) {
  serve_ = app->add_subcommand(
      "serve", "load, then keep the weights resident and serve engines on a unix socket per rank");
  AddJobFlags(serve_, &spec_, /*load_flags=*/true);
  serve_->add_option("--socket-dir", socket_dir,
                     "directory of the rank-<R>.sock sockets (default: topology socket_dir, else "
                     "$XDG_RUNTIME_DIR/hoist or /tmp/hoist-<uid>)");
  serve_->add_option("--allow-uid", allow_uids,
                     "peer uid allowed to attach (repeatable; default: topology allow_uids, else "
                     "the daemon's own uid)");
  serve_->add_flag("--host-cache", host_cache,
                   "keep a pinned host copy of the weights (hoist ctl release/restore)");
  serve_->add_flag("--serve-while-loading", serve_while_loading,
                   "open the socket as soon as the arena exists: attaches with pending_ok get it "
                   "at once and wait for the bytes (docs/EMBEDDING.md); others wait for the load");
  serve_->add_option(
      "--max-request-kib", max_request_kib,
      "largest request accepted, KiB (1 to " + std::to_string(rank::kMaxRequestKib) + ")");
  serve_->add_option("--log-level", log_level, "trace | debug | info | warn | error | off")
      ->check(LogLevels());

  ctl_ = app->add_subcommand("ctl", "talk to a running `hoist serve` rank");
  ctl_->add_option("action", action, "status | release | restore")
      ->required()
      ->check(CLI::Validator(
          [](std::string& a) -> std::string {
            const std::vector<std::string> actions = {"status", "release", "restore"};
            for (const std::string& ok : actions) {
              if (a == ok) return "";
            }
            const std::string near = Nearest(a, actions);
            return "'" + a + "' is not status, release or restore" +
                   (near.empty() ? "" : " (did you mean '" + near + "'?)");
          },
          "status | release | restore"));
  ctl_->add_option("--socket", socket, "the rank's socket (<socket_dir>/rank-<R>.sock)")
      ->required();
  ctl_->add_flag("--json", json, "print the reply as JSON");
  ctl_->add_flag("--verify", verify,
                 "restore: the daemon then proves the arena equals the checkpoint before it "
                 "replies (seconds for GBs: raise --timeout-s)");
  ctl_->add_option("--timeout-s", timeout_s,
                   "seconds to wait for the daemon's reply (default 10, at most " +
                       std::to_string(static_cast<int>(kMaxCtlTimeoutS)) + ")");
}

bool ServeCommands::Selected() const { return serve_->parsed() || ctl_->parsed(); }

int ServeCommands::Run(int* argc, char*** argv, std::chrono::steady_clock::time_point origin) {
  if (ctl_->parsed()) return RunCtl();
  return RunServe(argc, argv, origin);
}

// serve's own numbers and names: the socket directory, allowed uids, request limit.
Status ServeCommands::ResolveServe(const config::Topology& t, rank::ServeOptions* so,
                                   std::string* dir) const {
  *dir = !socket_dir.empty() ? socket_dir : t.socket_dir.value_or(DefaultSocketDir());
  const std::vector<long long> uids =
      !allow_uids.empty() ? allow_uids : t.allow_uids.value_or(std::vector<long long>{});
  for (long long u : uids) {
    if (u < 0 || u > 0xfffffffell) {
      return Status::InvalidArgument("--allow-uid " + std::to_string(u) + " is not a uid");
    }
    so->allow_uids.push_back(static_cast<uid_t>(u));
  }
  so->host_cache = host_cache || t.host_cache.value_or(false);
  HOIST_ASSIGN_OR_RETURN(so->max_request_bytes, rank::MaxRequestBytesFromKib(max_request_kib));
  return Status::Ok();
}

int ServeCommands::RunServe(int* argc, char*** argv, std::chrono::steady_clock::time_point origin) {
  // Configuration errors are every rank's alike: found before MPI starts, printed by rank 0.
  Result<config::ResolvedJob> resolved = ResolveJob(spec_);
  if (!resolved.ok()) return Fail(resolved.status(), !PrintsSharedErrors());
  rank::ServeOptions so;
  std::string dir;
  if (Status s = ResolveServe(resolved->topology, &so, &dir); !s.ok()) {
    return Fail(s, !PrintsSharedErrors());
  }
  Result<std::unique_ptr<coordinator::Comm>> launched = coordinator::CreateLaunchComm(argc, argv);
  if (!launched.ok()) return Fail(launched.status());
  std::unique_ptr<coordinator::Comm> comm = std::move(launched).value();
  const auto init_end = std::chrono::steady_clock::now();
  if (Status s = SetUpLogging(log_level, comm->rank(), comm->host()); !s.ok()) {
    return Fail(s, comm->rank() != 0);
  }
  coordinator::JobOptions& job = resolved->job;
  job.load.wiring.origin = origin;
  job.init_s = std::chrono::duration<double>(init_end - origin).count();
  if (Result<rank::Admission> a = rank::PrepareSocketDir(dir, so.allow_uids); !a.ok()) {
    // The directory is the user's choice (flag, topology or default): a configuration error.
    return Fail(Status(Code::kInvalidArgument, a.status().message()));
  }

  if (serve_while_loading) return ServeWhileLoading(*comm, std::move(job), std::move(so), dir);
  Result<coordinator::JobResult> result = coordinator::RunJob(*comm, std::move(job));
  if (const int code = ReportLoad(comm->rank(), result); code >= 0) return code;
  return ServeLoaded(&*result, std::move(so), dir);
}

int ServeCommands::ServeLoaded(coordinator::JobResult* result, rank::ServeOptions so,
                               const std::string& dir) {
  const auto my_rank = result->local->report.rank();
  so.socket_path = RankSocketPath(dir, static_cast<int>(my_rank));
  const std::uint64_t arena_bytes = result->local->arena.bytes;
  const std::string device_name = result->local->device->Name();
  Result<std::unique_ptr<rank::Daemon>> daemon =
      rank::Daemon::Start(std::move(*result->local), result->plan, my_rank, so);
  result->local.reset();
  if (!daemon.ok()) return Fail(daemon.status());

  InstallStopHandlers(daemon->get());
  PrintReady(result->plan, my_rank, so, arena_bytes, device_name);
  Status s = (*daemon)->Serve();
  g_daemon.store(nullptr);
  daemon->reset();
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

// --serve-while-loading: the job begun, the daemon started over the arena as soon as it exists
// and served on a thread while this (the MPI) thread runs the job's end; then the load's outcome
// is handed to the daemon. A stop during the load cancels it (exit 0); a failed load ends the
// daemon with the load's error (its waiting clients get it).
int ServeCommands::ServeWhileLoading(coordinator::Comm& comm, coordinator::JobOptions job,
                                     rank::ServeOptions so, const std::string& dir) {
  rank::LoadWatch watch;
  const bool mpi_world = comm.size() > 1 || coordinator::LaunchedByMpi();
  rank::InstallStreamingTestHooks(&watch, mpi_world ? comm.rank() : spec_.solo_rank);
  job.load.wiring.watch = &watch;
  Result<std::unique_ptr<coordinator::JobInFlight>> begun =
      coordinator::BeginJob(comm, std::move(job));
  if (!begun.ok()) {
    const bool shared = begun.status().code() == Code::kInvalidArgument;
    return Fail(begun.status(), shared && comm.rank() != 0);
  }
  EarlyDaemon early(**begun);
  early.Start(watch, so, RankSocketPath(dir, (*begun)->rank()));
  Result<coordinator::JobResult> result = coordinator::FinishJob(comm, **begun);
  if (early.JobFinished()) {  // SIGTERM/SIGINT during the load: it was cancelled
    early.End(Status::Aborted("serve: stopped during the initial load"));
    if (const Status served = early.Join(); !served.ok()) return Fail(served);
    spdlog::info("serve: stopped during the initial load");
    return kExitOk;
  }
  const int code = ReportLoad(comm.rank(), result);
  if (early.daemon == nullptr) return code >= 0 ? code : ServeLoaded(&*result, std::move(so), dir);
  if (code >= 0) {
    early.End(!result.ok()            ? result.status()
              : !result->failure.ok() ? result->failure
                                      : Status::Internal("serve: the load left no arena"));
    return code;
  }
  const auto my_rank = static_cast<std::uint32_t>((*begun)->rank());
  so.socket_path = early.daemon->socket_path();
  const std::uint64_t arena_bytes = result->local->arena.bytes;
  const std::string device_name = result->local->device->Name();
  early.daemon->LoadEnded(std::move(*result->local));
  result->local.reset();
  PrintReady(result->plan, my_rank, so, arena_bytes, device_name);
  const Status served = early.Join();
  return served.ok() ? kExitOk : Fail(served);
}

int ServeCommands::RunCtl() {
  if (!std::isfinite(timeout_s) || timeout_s <= 0 || timeout_s > kMaxCtlTimeoutS) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", timeout_s);
    return Fail(Status::InvalidArgument(std::string("--timeout-s ") + v +
                                        " is out of range: the reply timeout must be a number of "
                                        "seconds above 0 and at most " +
                                        std::to_string(static_cast<int>(kMaxCtlTimeoutS))));
  }
  const int timeout_ms = static_cast<int>(std::ceil(timeout_s * 1000));
  Result<std::unique_ptr<rank::DaemonConnection>> conn =
      rank::DaemonConnection::Connect(socket, timeout_ms);
  if (!conn.ok()) return Fail(conn.status());
  proto::DaemonRequest req;
  if (action == "status") {
    req.mutable_status();
  } else if (action == "release") {
    req.mutable_release();
  } else {
    req.mutable_restore()->set_verify(verify);
  }
  Result<proto::DaemonResponse> r = (*conn)->Call(req);
  if (!r.ok()) return Fail(r.status());
  if (json) {  // 64-bit counts as JSON numbers (daemon/serve_wire.h)
    std::cout << rank::MessageJson(*r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  if (r->has_status()) {
    const proto::StatusReply& s = r->status();
    std::printf(
        "rank %u (%s) at %s\n  model: %s\n  resident: %s, arena %s\n  host cache: %s\n"
        "  clients attached: %u (%u connections), attaches served %llu, refused %llu, "
        "bad requests %llu\n  generation %llu, %llu tensors",
        s.rank(), s.device().c_str(), s.socket().c_str(), s.model_dir().c_str(), ResidentText(s),
        Gib(s.arena_bytes()).c_str(), s.host_cache() ? Gib(s.host_cache_bytes()).c_str() : "off",
        s.clients_attached(), s.connections(), static_cast<unsigned long long>(s.attaches_served()),
        static_cast<unsigned long long>(s.refused()),
        static_cast<unsigned long long>(s.bad_requests()),
        static_cast<unsigned long long>(s.generation()),
        static_cast<unsigned long long>(s.tensors()));
    if (s.last_restore_s() > 0) {
      std::printf(", last restore %.3f s (%.1f GiB/s)", s.last_restore_s(), s.last_restore_gib_s());
    }
    std::printf("\n");
  } else if (r->has_release()) {
    std::printf("released: %s freed on the device (host cache kept)\n",
                Gib(r->release().freed_bytes()).c_str());
  } else if (r->has_restore()) {
    if (r->restore().bytes() == 0) {
      std::printf("restore: already resident\n");
      if (r->restore().verified()) {
        std::printf("verified: PASS in %.1f s\n", r->restore().verify_seconds());
      }
    } else {
      const proto::RestoreReply& rr = r->restore();
      if (rr.packed()) {  // compressed bytes cross the link; the rate is of the original bytes
        std::printf(
            "restored: %s in %.3f s (%.1f GiB/s); DMA %.3f s (%s moved, %.1f GiB/s); decode "
            "%.3f s; arena allocation %.1f ms\n",
            Gib(rr.bytes()).c_str(), rr.seconds(), rr.gib_per_s(), rr.dma_seconds(),
            Gib(rr.moved_bytes()).c_str(),
            rr.dma_seconds() > 0 ? rr.moved_bytes() / rr.dma_seconds() / (1ull << 30) : 0.0,
            rr.decode_seconds(), rr.alloc_seconds() * 1e3);
      } else {
        std::printf(
            "restored: %s in %.3f s (%.1f GiB/s); DMA %.3f s (%.1f GiB/s); arena allocation "
            "%.1f ms\n",
            Gib(rr.bytes()).c_str(), rr.seconds(), rr.gib_per_s(), rr.dma_seconds(),
            rr.dma_seconds() > 0 ? rr.bytes() / rr.dma_seconds() / (1ull << 30) : 0.0,
            rr.alloc_seconds() * 1e3);
      }
      if (rr.verified()) std::printf("verified: PASS in %.1f s\n", rr.verify_seconds());
    }
  }
  return 0;
}

}  // namespace hoist::launch
