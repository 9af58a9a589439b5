#include "coordinator/job.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "coordinator/control.h"
#include "planner/checkpoint.h"
#include "planner/io_stats.h"
#include "proto/control.pb.h"
#include "rank/placement.h"
#include "rank/rank_job.h"
#include "transport/phase.h"

namespace hoist::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Waits for one message from `from` on `channel`, bounded by timeout_s.
Result<Message> Await(Comm& comm, int from, Channel channel, double timeout_s,
                      const std::string& what) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, timeout_s)));
  for (int spin = 0;; ++spin) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, comm.TryRecv(from, channel));
    if (m) return std::move(*m);
    if (Clock::now() > deadline) {
      return Status::Aborted(what + ": nothing within " + std::to_string(timeout_s) + " s (" +
                             transport::kPeerFailureNote + ")");
    }
    if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 500));
  }
}

// What a rank tells rank 0 before the plan.
proto::Hello MyHello(const Comm& comm, const JobOptions& o) {
  proto::Hello h;
  h.set_node(static_cast<std::uint32_t>(comm.node()));
  h.set_local_rank(static_cast<std::uint32_t>(comm.local_rank()));
  h.set_host(comm.host());
  h.set_gpu(rank::ResolveOrdinal(o.load.device, 0) >= 0);
  return h;
}

// Rank 0: every rank's hello, in rank order.
Result<std::vector<proto::Hello>> CollectHellos(Comm& comm, const JobOptions& o) {
  std::vector<proto::Hello> hellos(static_cast<std::size_t>(comm.size()));
  hellos[0] = MyHello(comm, o);
  for (int got = 1; got < comm.size(); ++got) {
    HOIST_ASSIGN_OR_RETURN(Message m, Await(comm, -1, Channel::kHello, o.exchange.timeout_s,
                                            "rank 0 waiting for every rank to start"));
    if (!hellos[static_cast<std::size_t>(m.from)].ParseFromString(m.data)) {
      return Status::Corrupt("rank " + std::to_string(m.from) + ": hello does not parse");
    }
  }
  return hellos;
}

// Rank 0: the plan, with the NCCL ids its dedup groups need.
proto::JobStart Plan(const JobOptions& o, const std::vector<proto::Hello>& hellos, bool mpi_world) {
  proto::JobStart start;
  planner::PlanOptions po = o.plan;
  bool all_gpu = true;
  std::set<bool> kinds;
  for (const proto::Hello& h : hellos) {
    start.add_hosts(h.host());
    all_gpu = all_gpu && h.gpu();
    kinds.insert(h.gpu());
  }
  if (o.plan.locations.empty() && hellos.size() > 1) {
    for (const proto::Hello& h : hellos) po.locations.push_back({h.node(), h.local_rank()});
  }
  po.gpu_peers = mpi_world && all_gpu && transport::CudaPeerAccessAll();
  Result<proto::LoadPlan> plan = [&]() -> Result<proto::LoadPlan> {
    HOIST_ASSIGN_OR_RETURN(planner::Checkpoint ckpt, planner::OpenCheckpoint(o.model_dir));
    return planner::BuildLoadPlan(ckpt, po);
  }();
  if (plan.ok() && mpi_world && plan->dedup() != proto::DEDUP_NONE && kinds.size() > 1) {
    plan = Status::InvalidArgument(
        "dedup: some ranks load into GPUs and others into host memory; all must load into the "
        "same kind (or use --dedup none)");
  }
  std::set<std::uint32_t> groups, nodes;
  if (plan.ok()) {
    for (const proto::RankPlan& rp : plan->ranks()) nodes.insert(rp.node());
  }
  // Host arenas: MPI. GPU groups within one host: CUDA IPC (copy engines, nothing to set up).
  // Groups across hosts: NCCL, with ids made here.
  start.set_peer(!all_gpu ? "mpi"
                 : plan.ok() && (plan->dedup() == proto::DEDUP_NODE || nodes.size() <= 1)
                     ? "cuda-ipc"
                     : "nccl");
  if (plan.ok() && mpi_world && plan->dedup() != proto::DEDUP_NONE && start.peer() == "nccl") {
    for (const proto::RankPlan& rp : plan->ranks()) groups.insert(rp.peer_group());
    for (std::uint32_t g = 0; g <= (groups.empty() ? 0 : *groups.rbegin()) && plan.ok(); ++g) {
      Result<std::string> id = groups.count(g) ? transport::NcclUniqueId() : std::string();
      if (!id.ok()) {
        plan = id.status();
        break;
      }
      start.add_peer_ids(*id);
    }
  }
  start.set_ok(plan.ok());
  if (plan.ok()) {
    *start.mutable_plan() = std::move(plan).value();
  } else {
    start.set_error_code(static_cast<std::uint32_t>(plan.status().code()));
    start.set_error(plan.status().message());
  }
  return start;
}

// Hello and plan: rank 0 plans once and sends every rank its start; every wait is bounded.
Result<proto::JobStart> StartJob(Comm& comm, const JobOptions& o, bool mpi_world,
                                 Clock::time_point* plan_start, std::size_t* wire_bytes) {
  if (comm.rank() != 0) {
    HOIST_RETURN_IF_ERROR(comm.Send(0, Channel::kHello, MyHello(comm, o).SerializeAsString()));
    HOIST_ASSIGN_OR_RETURN(Message m, Await(comm, 0, Channel::kPlan, o.exchange.timeout_s,
                                            "waiting for rank 0's plan"));
    *plan_start = Clock::now();
    *wire_bytes = m.data.size();
    proto::JobStart start;
    if (!start.ParseFromString(m.data)) {
      return Status::Corrupt("rank " + std::to_string(comm.rank()) + ": plan does not parse");
    }
    return start;
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<proto::Hello> hellos, CollectHellos(comm, o));
  *plan_start = Clock::now();
  proto::JobStart start = Plan(o, hellos, mpi_world);
  const std::string wire = start.SerializeAsString();
  *wire_bytes = wire.size();
  for (int r = 1; r < comm.size(); ++r) HOIST_RETURN_IF_ERROR(comm.Send(r, Channel::kPlan, wire));
  return start;
}

// This rank's peer for a dedup plan (nullptr without dedup or without MPI).
Result<std::unique_ptr<transport::Peer>> OpenPeer(const Comm& comm, const JobOptions& o,
                                                  const proto::JobStart& start, int my_rank,
                                                  bool mpi_world) {
  const proto::LoadPlan& plan = start.plan();
  if (!mpi_world || plan.dedup() == proto::DEDUP_NONE) return std::unique_ptr<transport::Peer>();
  const transport::PeerGroup group = rank::GroupOf(plan, my_rank);
  const proto::RankPlan& rp = plan.ranks(my_rank);
  Result<std::unique_ptr<transport::Peer>> peer = Status::Internal("unset");
  const int gpu = o.load.gpu >= 0 ? o.load.gpu : static_cast<int>(rp.gpu());
  if (start.peer() == "mpi") {
    peer = transport::CreateMpiPeer(group, plan.ranks_size(), comm.mpi_handle());
  } else if (start.peer() == "cuda-ipc") {
    peer = transport::CreateCudaIpcPeer(group, rank::ResolveOrdinal(o.load.device, gpu),
                                        plan.ranks_size(), comm.mpi_handle());
  } else {
    if (static_cast<int>(rp.peer_group()) >= start.peer_ids_size()) {
      return Status::Corrupt("no NCCL id for peer group " + std::to_string(rp.peer_group()));
    }
    peer = transport::CreateNcclPeer(group, rank::ResolveOrdinal(o.load.device, gpu),
                                     start.peer_ids(static_cast<int>(rp.peer_group())),
                                     o.exchange.timeout_s);
  }
  if (peer.ok() && o.wrap_peer) *peer = o.wrap_peer(std::move(*peer));
  return peer;
}

std::uint64_t CopyBytes(const proto::RankPlan& rp) {
  std::uint64_t n = 0;
  for (const proto::Copy& c : rp.copies()) n += c.width() * c.rows();
  return n;
}

// What the driver needs besides the options: the progress total and who runs, and how a rank's
// report is completed before it is sent (rank, host, init and plan phases).
struct DriverSetup {
  std::uint64_t total_bytes = 0;
  int ranks_running = 1;
  std::function<void(proto::RankReport&)> complete;
};

// The driver thread's loop: this rank's load (polled), the control loop, the progress display.
class Driver {
 public:
  Driver(Comm& comm, const JobOptions& o, const proto::JobStart& start, int my_rank,
         DriverSetup setup)
      : comm_(comm),
        o_(o),
        my_rank_(my_rank),
        setup_(std::move(setup)),
        loop_(comm, o.exchange.timeout_s, o.progress_interval_s,
              {start.hosts().begin(), start.hosts().end()}) {}

  // Runs the control loop until every rank finished; this rank's load is `job` (nullptr when it
  // failed before starting: `early`).
  Status Run(rank::RankJob* job, const Status& early) {
    start_ = Clock::now();
    LocalState mine;
    if (job == nullptr) Finish(Result<rank::LoadedRank>(early), false, &mine);
    for (int spin = 0;; ++spin) {
      if (job != nullptr && !mine.finished) {
        job->Poll();
        mine.bytes = job->bytes_done();
        mine.stage = static_cast<std::uint32_t>(job->stage());
        if (job->finished()) {
          Result<rank::LoadedRank> r = job->Finish();
          Finish(std::move(r), job->peer_timed_out(), &mine);
        }
      }
      Result<const JobView*> view = loop_.Poll(mine);
      if (!view.ok()) {
        if (job != nullptr && !mine.finished) job->Cancel(view.status());
        return view.status();
      }
      if (job != nullptr && !mine.finished && (*view)->stop_rank >= 0 && !cancelled_) {
        Stop(job, **view);
      }
      ShowProgress(**view);
      if ((*view)->done) {
        reports_ = (*view)->reports;
        return Status::Ok();
      }
      Pause(job != nullptr && !mine.finished, spin);
    }
  }

  std::optional<rank::LoadedRank>& local() { return local_; }
  const Status& failure() const { return failure_; }
  std::vector<proto::RankReport>& reports() { return reports_; }

 private:
  // `peer_timed_out`: a failure that was a timeout waiting for another rank.
  void Finish(Result<rank::LoadedRank> r, bool peer_timed_out, LocalState* mine) {
    if (r.ok()) {
      report_ = r->report;
      local_.emplace(std::move(r).value());
    } else {
      report_.set_ok(false);
      report_.set_error(r.status().ToString());
      failure_ = r.status();
      spdlog::error("load failed: {}", r.status().ToString());
    }
    report_.set_ok(r.ok());
    report_.set_stopped_by(cancelled_ && !r.ok() ? stopped_by_ : -1);
    report_.set_peer_timed_out(!r.ok() && peer_timed_out);
    setup_.complete(report_);
    if (o_.before_report) o_.before_report(my_rank_);
    mine->finished = true;
    mine->report = report_;
  }

  void Stop(rank::RankJob* job, const JobView& view) {
    cancelled_ = true;
    stopped_by_ = view.stop_rank;
    job->Cancel(Status::Aborted("stopped because rank " + std::to_string(view.stop_rank) +
                                " failed (" + transport::kPeerFailureNote +
                                "): " + view.stop_reason));
  }

  void ShowProgress(const JobView& view) {
    if (!o_.progress || comm_.rank() != 0) return;
    const Clock::time_point now = Clock::now();
    if (!view.done &&
        now - last_progress_ < std::chrono::duration<double>(o_.progress_interval_s)) {
      return;
    }
    last_progress_ = now;
    Progress p;
    p.done = view.bytes;
    p.total = setup_.total_bytes;
    p.seconds = Seconds(start_, now);
    p.activity = rank::LoadStageName(static_cast<rank::LoadStage>(view.stage));
    p.ranks = setup_.ranks_running;
    p.final = view.done;
    p.ok = view.done && std::all_of(view.reports.begin(), view.reports.end(),
                                    [](const proto::RankReport& r) { return r.ok(); });
    o_.progress(p);
  }

  // Short sleeps while an exchange may need polling, longer ones otherwise.
  static void Pause(bool loading, int spin) {
    if (spin < 16) return;
    std::this_thread::sleep_for(std::chrono::microseconds(loading ? 50 : 200));
  }

  Comm& comm_;
  const JobOptions& o_;
  int my_rank_;
  DriverSetup setup_;
  ControlLoop loop_;
  Clock::time_point start_, last_progress_{};
  bool cancelled_ = false;
  int stopped_by_ = -1;
  proto::RankReport report_;
  std::optional<rank::LoadedRank> local_;
  Status failure_;
  std::vector<proto::RankReport> reports_;
};

// The world check: every rank computes it from the same options, so all return together.
Status CheckWorld(const Comm& comm, const JobOptions& o, bool mpi_world) {
  const int planned = PlannedWorld(o.plan);
  if (!mpi_world || comm.size() == planned) return Status::Ok();
  const std::string shape =
      o.plan.ep > 0 ? "ep " + std::to_string(o.plan.ep)
                    : "tp " + std::to_string(o.plan.tp) + " x dp " + std::to_string(o.plan.dp);
  return Status::InvalidArgument(
      "the plan needs " + std::to_string(planned) + " ranks (" + shape + ") but mpirun started " +
      std::to_string(comm.size()) + " processes: run mpirun -np " + std::to_string(planned) +
      ", or change tp/dp/ep to multiply to " + std::to_string(comm.size()));
}

}  // namespace

bool StoppedByAnotherRank(const proto::RankReport& report) {
  return !report.ok() && (report.stopped_by() >= 0 || report.peer_timed_out());
}

Status Blame(const std::vector<proto::RankReport>& reports) {
  const proto::RankReport* first = nullptr;
  for (const proto::RankReport& r : reports) {
    if (r.ok()) continue;
    if (first == nullptr) first = &r;
    if (!StoppedByAnotherRank(r)) {
      first = &r;
      break;
    }
  }
  if (first == nullptr) return Status::Ok();
  return Status(Code::kAborted, "rank " + std::to_string(first->rank()) + " on " + first->host() +
                                    " failed: " + first->error());
}

int PlannedWorld(const planner::PlanOptions& plan) {
  const long long world =
      plan.ep > 0 ? plan.ep : static_cast<long long>(plan.tp) * static_cast<long long>(plan.dp);
  return static_cast<int>(std::min<long long>(world, 1 << 30));
}

Result<JobResult> RunJob(Comm& comm, JobOptions options) {
  const Clock::time_point origin = options.load.origin;
  const bool mpi_world = comm.size() > 1 || LaunchedByMpi();
  HOIST_RETURN_IF_ERROR(CheckWorld(comm, options, mpi_world));
  rank::WarmHostTopology();

  // The device: opened before MPI by the caller, or here beside planning. The ordinal guessed
  // is what the planner will assign: the topology's gpu for this rank, else the rank's index on
  // its node; LoadRank reopens if it differs.
  const int guess_rank = mpi_world ? comm.rank() : options.solo_rank;
  int gpu_guess = mpi_world ? comm.local_rank() : options.solo_rank;
  if (guess_rank >= 0 && static_cast<std::size_t>(guess_rank) < options.plan.locations.size()) {
    gpu_guess = static_cast<int>(options.plan.locations[guess_rank].gpu);
  }
  if (options.prepared == nullptr) {
    options.prepared = std::make_shared<std::future<Result<rank::PreparedDevice>>>(std::async(
        std::launch::async, rank::PrepareDevice, options.load.device, gpu_guess, origin));
  }

  Clock::time_point plan_start = Clock::now();
  std::size_t wire_bytes = 0;
  HOIST_ASSIGN_OR_RETURN(proto::JobStart start,
                         StartJob(comm, options, mpi_world, &plan_start, &wire_bytes));
  const Clock::time_point plan_end = Clock::now();
  if (!start.ok()) {
    const Code code = static_cast<Code>(start.error_code());
    if (comm.rank() == 0) return Status(code, start.error());
    return Status(code, "rank 0 failed to plan: " + start.error());
  }
  JobResult result;
  result.plan = start.plan();
  const int world = result.plan.ranks_size();
  const int my_rank = mpi_world ? comm.rank() : options.solo_rank;
  if (my_rank < 0 || my_rank >= world) {
    return Status::InvalidArgument("rank " + std::to_string(my_rank) + " is outside the plan's " +
                                   std::to_string(world) + " ranks (--rank 0 to " +
                                   std::to_string(world - 1) + ")");
  }
  if (!mpi_world && world > 1) {
    spdlog::warn(
        "loading rank {} of the plan's {} alone: start {} processes with mpirun -np {} to load "
        "every rank",
        my_rank, world, world, world);
  }
  if (options.after_plan) options.after_plan(my_rank);

  // This rank's load, with its peer (set up in the background) when the plan dedups.
  const Clock::time_point peer_started = Clock::now();
  Result<std::unique_ptr<transport::Peer>> peer =
      OpenPeer(comm, options, start, my_rank, mpi_world);
  Status early = peer.status();
  if (early.ok() && options.fail_rank == my_rank) {
    early = Status::IoError("injected failure (--inject-fail-rank)");
  }
  rank::LoadOptions load = options.load;
  load.prepared = options.prepared.get();
  std::unique_ptr<rank::RankJob> job;
  if (early.ok()) {
    job = rank::RankJob::Start(result.plan, static_cast<std::uint32_t>(my_rank), load,
                               std::move(peer).value(), options.exchange, peer_started);
  } else {
    early = Status(early).Annotate("rank " + std::to_string(my_rank));
  }

  DriverSetup setup;
  setup.ranks_running = mpi_world ? world : 1;
  for (int r = 0; r < world; ++r) {
    if (mpi_world || r == my_rank) setup.total_bytes += CopyBytes(result.plan.ranks(r));
  }
  setup.complete = [&](proto::RankReport& report) {
    report.set_rank(static_cast<std::uint32_t>(my_rank));
    report.set_host(comm.host());
    report.set_node(result.plan.ranks(my_rank).node());
    report.set_gpu(result.plan.ranks(my_rank).gpu());
    report.set_header_opens(planner::HeaderOpenCount());
    report.set_origin_epoch_s(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
        Seconds(origin, Clock::now()));
    const transport::PhaseRecorder phases(&report, origin);
    phases.Record(transport::Phase::kInit, origin,
                  origin + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.init_s)));
    phases.Record(transport::Phase::kPlan, plan_start, plan_end, wire_bytes);
  };
  Driver driver(comm, options, start, my_rank, std::move(setup));
  HOIST_RETURN_IF_ERROR(driver.Run(job.get(), early));
  result.local = std::move(driver.local());
  result.failure = driver.failure();
  if (comm.rank() == 0) {
    result.reports = std::move(driver.reports());
    result.failure = Blame(result.reports);
    result.wall_s = Seconds(origin, Clock::now());
  }
  return result;
}

}  // namespace hoist::coordinator
