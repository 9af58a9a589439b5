// `hoist serve` (load, then keep the rank's weights resident and serve its unix socket; one rank,
// or every rank under mpirun) and `hoist ctl status|release|restore --socket PATH`.
// launch/cli.cc registers them with one object and hands over when one of them was chosen.
//
// Exit codes as the rest of the CLI (launch/exit_codes.h): 0 ok (serve: stopped by SIGTERM/SIGINT),
// 1 a load, serve or daemon failure, 2 a usage or configuration error. `hoist ctl` waits at most
// --timeout-s (default 10 s) for a reply, so a stopped or hung daemon ends it with exit 1.
// Threading: main thread; serve installs SIGTERM/SIGINT handlers that only wake its loop. With
// --serve-while-loading the daemon's loop runs on a second thread during the initial load (the
// main thread runs the job's end, the only MPI calls) and is joined before serve returns.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "config/job_spec.h"
#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "daemon/serve.h"
#include "launch/job_flags.h"

namespace hoist::launch {

inline constexpr double kMaxCtlTimeoutS = 3600;  // --timeout-s of `hoist ctl`

class ServeCommands {
 public:
  // Adds the `serve` and `ctl` subcommands to `app`.
  explicit ServeCommands(CLI::App* app);
  // True when the parsed command line chose `serve` or `ctl`.
  bool Selected() const;
  int Run(int* argc, char*** argv, std::chrono::steady_clock::time_point origin);

 private:
  int RunServe(int* argc, char*** argv, std::chrono::steady_clock::time_point origin);
  int RunCtl();
  // The daemon over a finished load's arena (the result's local rank), served until stopped.
  int ServeLoaded(coordinator::JobResult* result, rank::ServeOptions so, const std::string& dir);
  // --serve-while-loading (below).
  struct EarlyDaemon;
  int ServeWhileLoading(coordinator::Comm& comm, coordinator::JobOptions job, rank::ServeOptions so,
                        const std::string& dir);
  Status ResolveServe(const config::Topology& t, rank::ServeOptions* so, std::string* dir) const;

  CLI::App* serve_ = nullptr;
  CLI::App* ctl_ = nullptr;
  // serve: the job selection shared with `hoist load` (config/job_spec.h, flags in
  // launch/job_flags.h), then its own flags
  config::JobSpec spec_;
  std::string log_level = "info";
  std::string socket_dir;
  std::vector<long long> allow_uids;
  bool host_cache = false;
  bool serve_while_loading = false;  // open the socket once the arena exists (pending attaches)
  int max_request_kib = 64;
  // ctl
  std::string action, socket;
  bool json = false;
  bool verify = false;  // ctl restore --verify
  double timeout_s = 10;
};

// The default socket directory: $XDG_RUNTIME_DIR/hoist, else /tmp/hoist-<uid>.
std::string DefaultSocketDir();
// <dir>/rank-<R>.sock
std::string RankSocketPath(const std::string& dir, int rank);

}  // namespace hoist::launch
