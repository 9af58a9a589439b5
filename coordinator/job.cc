#include "coordinator/job.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <thread>

#include "planner/checkpoint.h"
#include "planner/io_stats.h"
#include "rank/exchange.h"

namespace hoist::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void AddPhase(proto::RankReport* report, const char* name, Clock::time_point origin,
              Clock::time_point start, Clock::time_point end, std::uint64_t bytes = 0) {
  proto::Phase* p = report->add_phases();
  p->set_name(name);
  p->set_start_s(Seconds(origin, start));
  p->set_seconds(Seconds(start, end));
  p->set_busy_s(Seconds(start, end));
  p->set_bytes(bytes);
}

// Wire format of the plan broadcast: one byte status ('P' plan follows, 'E' error text follows).
std::string EncodePlan(const Result<proto::LoadPlan>& plan) {
  if (!plan.ok()) return "E" + plan.status().ToString();
  return "P" + plan->SerializeAsString();
}

}  // namespace

Result<JobResult> RunJob(Comm& comm, const JobOptions& options) {
  const Clock::time_point origin = options.load.origin;
  JobResult result;

  // The world the plan will have must be the world mpirun started. Every rank computes this
  // from the same options, so all of them return here and none waits in a collective.
  const bool mpi_world = comm.size() > 1 || LaunchedByMpi();
  const int planned_world =
      options.plan.ep > 0 ? options.plan.ep : options.plan.tp * options.plan.dp;
  if (mpi_world && comm.size() != planned_world) {
    return Status::InvalidArgument(
        "the plan needs " + std::to_string(planned_world) + " ranks (" +
        (options.plan.ep > 0 ? "ep " + std::to_string(options.plan.ep)
                             : "tp " + std::to_string(options.plan.tp) + " x dp " +
                                   std::to_string(options.plan.dp)) +
        ") but mpirun started " + std::to_string(comm.size()) + " processes");
  }

  // Open the device (a CUDA context takes ~0.3 s) while MPI settles and rank 0 plans. The
  // ordinal guessed here is what the planner will assign: the topology's gpu for this rank, else
  // the rank's index on its node (the solo rank without MPI); LoadRank reopens if it differs.
  const int guess_rank = mpi_world ? comm.rank() : options.solo_rank;
  int gpu_guess = mpi_world ? comm.local_rank() : options.solo_rank;
  if (guess_rank >= 0 && static_cast<std::size_t>(guess_rank) < options.plan.locations.size()) {
    gpu_guess = static_cast<int>(options.plan.locations[guess_rank].gpu);
  }
  std::future<Result<rank::PreparedDevice>> prepared =
      std::async(std::launch::async, rank::PrepareDevice, options.load.device, gpu_guess, origin);

  // Where each rank runs, unless the topology said: node from the shared-memory split, gpu =
  // index among the node's ranks.
  const Clock::time_point plan_start = Clock::now();
  planner::PlanOptions plan_options = options.plan;
  if (plan_options.locations.empty() && comm.size() > 1) {
    HOIST_ASSIGN_OR_RETURN(
        std::vector<std::string> where,
        comm.Gather(std::to_string(comm.node()) + " " + std::to_string(comm.local_rank())));
    for (const std::string& w : where) {
      planner::RankLocation loc;
      std::sscanf(w.c_str(), "%u %u", &loc.node, &loc.gpu);
      plan_options.locations.push_back(loc);
    }
  }

  // Plan: rank 0 alone reads config, index and headers.
  std::string wire;
  Status plan_status;
  if (comm.rank() == 0) {
    Result<proto::LoadPlan> plan = [&]() -> Result<proto::LoadPlan> {
      HOIST_ASSIGN_OR_RETURN(planner::Checkpoint ckpt, planner::OpenCheckpoint(options.model_dir));
      return planner::BuildLoadPlan(ckpt, plan_options);
    }();
    wire = EncodePlan(plan);
    plan_status = plan.status();
  }
  HOIST_RETURN_IF_ERROR(comm.Broadcast(&wire));
  if (wire.empty() || wire[0] != 'P') {
    std::string cause = wire.empty() ? "empty plan message" : wire.substr(1);
    if (comm.rank() == 0) return plan_status.ok() ? Status::Internal(cause) : plan_status;
    return Status::Aborted("rank 0 failed to plan: " + cause);
  }
  if (!result.plan.ParseFromArray(wire.data() + 1, static_cast<int>(wire.size() - 1))) {
    return Status::Corrupt("rank " + std::to_string(comm.rank()) + ": plan message does not parse");
  }
  const Clock::time_point plan_end = Clock::now();

  const int world = static_cast<int>(result.plan.ranks_size());
  int my_rank = comm.rank();
  if (!mpi_world) {
    my_rank = options.solo_rank;
  } else if (comm.size() != world) {
    // Every rank sees the same plan, so every rank takes this branch: no collective is skipped
    // by only some of them.
    return Status::InvalidArgument("the plan has " + std::to_string(world) +
                                   " ranks but mpirun started " + std::to_string(comm.size()) +
                                   " processes (world = tp x dp, or ep when expert parallel)");
  }
  if (my_rank < 0 || my_rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(my_rank) + " is outside the plan's " +
                                   std::to_string(world) + " ranks");
  }

  // Dedup: the data plane between ranks (rank/exchange.h), opened by every rank or by none.
  std::unique_ptr<transport::Peer> peer;
  Status peer_status;
  if (mpi_world && result.plan.dedup() != proto::DEDUP_NONE) {
    const rank::ControlPlane control{[&comm](const std::string& s) { return comm.Gather(s); },
                                     [&comm](std::string* s) { return comm.Broadcast(s); }};
    Result<std::unique_ptr<transport::Peer>> opened = rank::OpenPeer(
        result.plan, my_rank,
        {options.load.device, options.load.gpu, options.load.exchange.timeout_s}, control);
    if (opened.ok()) {
      peer = std::move(opened).value();
    } else {
      peer_status = opened.status();
    }
  }
  rank::ExchangeOptions exchange = options.load.exchange;
  exchange.peer = peer.get();

  // Load this rank's part. Errors stay local until the gather.
  proto::RankReport report;
  Status load_status;
  const bool show_progress = options.progress && result.plan.dedup() == proto::DEDUP_NONE;
  std::atomic<std::uint64_t> progress{0};
  auto work = [&] {
    if (!peer_status.ok()) {
      load_status = peer_status;
      return;
    }
    if (options.fail_rank == my_rank) {
      load_status = Status::IoError("injected failure (--inject-fail-rank)");
      rank::AbandonExchange(result.plan, exchange);  // its peers must not wait for it
      return;
    }
    rank::LoadOptions load = options.load;
    load.exchange = exchange;
    load.prepared = &prepared;
    if (show_progress) load.progress = &progress;
    Result<rank::LoadedRank> loaded =
        rank::LoadRank(result.plan, static_cast<std::uint32_t>(my_rank), load);
    if (loaded.ok()) {
      report = loaded->report;
      result.local.emplace(std::move(loaded).value());
    } else {
      load_status = loaded.status();
    }
  };
  if (show_progress) {
    // The work runs on a worker thread while this thread, the one that owns MPI, sums every
    // rank's progress a few times a second. Every rank takes this branch (same plan, same
    // options), whatever its work does, and leaves the loop on the same round: when every rank's
    // work has finished.
    std::atomic<bool> finished{false};
    std::thread worker([&] {
      work();
      finished.store(true);
    });
    std::uint64_t total = 0;
    for (const proto::RankPlan& rp : result.plan.ranks()) {
      for (const proto::Copy& c : rp.copies()) total += c.width() * c.rows();
    }
    const Clock::time_point start = Clock::now();
    Status progress_status;
    for (bool all_done = false; !all_done && progress_status.ok();) {
      const Clock::time_point wake =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(options.progress_interval_s));
      while (!finished.load() && Clock::now() < wake) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      double v[2] = {static_cast<double>(progress.load()), finished.load() ? 1.0 : 0.0};
      progress_status = comm.AllreduceSum(v, 2);
      all_done = v[1] >= comm.size();
      if (comm.rank() == 0 && progress_status.ok()) {
        options.progress(static_cast<std::uint64_t>(v[0]), total, Seconds(start, Clock::now()),
                         all_done);
      }
    }
    worker.join();
    if (!progress_status.ok()) return progress_status;
  } else {
    work();
  }
  report.set_rank(my_rank);
  report.set_host(comm.host());
  report.set_node(result.plan.ranks(my_rank).node());
  report.set_gpu(result.plan.ranks(my_rank).gpu());
  report.set_ok(load_status.ok());
  if (!load_status.ok()) report.set_error(load_status.ToString());
  report.set_header_opens(planner::HeaderOpenCount());
  AddPhase(&report, "init", origin, origin,
           origin + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(options.init_s)));
  AddPhase(&report, "plan", origin, plan_start, plan_end, wire.size());
  if (!load_status.ok()) {
    spdlog::error("load failed: {}", load_status.ToString());
    result.failure = load_status;
  }

  if (options.before_gather) options.before_gather(my_rank);

  // Gather: every rank gets here, failed or not.
  HOIST_ASSIGN_OR_RETURN(std::vector<std::string> blobs, comm.Gather(report.SerializeAsString()));
  if (comm.rank() == 0) {
    bool by_peer = !result.failure.ok() && rank::CausedByPeer(result.failure.message());
    for (size_t i = 0; i < blobs.size(); ++i) {
      proto::RankReport r;
      if (!r.ParseFromString(blobs[i])) {
        r.set_rank(static_cast<std::uint32_t>(i));
        r.set_ok(false);
        r.set_error("report does not parse");
      }
      // Name the first rank that failed on its own, not one that stopped because of a peer.
      if (!r.ok() && (result.failure.ok() || (by_peer && !rank::CausedByPeer(r.error())))) {
        by_peer = rank::CausedByPeer(r.error());
        result.failure = Status(Code::kAborted, "rank " + std::to_string(r.rank()) + " on " +
                                                    r.host() + " failed: " + r.error());
      }
      result.reports.push_back(std::move(r));
    }
    result.wall_s = Seconds(origin, Clock::now());
  }
  return result;
}

}  // namespace hoist::coordinator
