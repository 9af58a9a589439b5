#include "coordinator/job.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include "coordinator/control.h"
#include "coordinator/hosts.h"
#include "coordinator/link_probe.h"
#include "coordinator/report.h"
#include "planner/checkpoint.h"
#include "planner/io_stats.h"
#include "planner/layer_order.h"
#include "planner/plan_builder.h"
#include "planner/plan_set.h"
#include "proto/control.pb.h"
#include "rank/placement.h"
#include "rank/rank_job.h"
#include "transport/peers/peer.h"
#include "transport/timing/phase.h"

namespace hoist::coordinator {
namespace {

// The code a job fails with: its blamed rank's own (InvalidArgument: exit 2 on every rank), or
// Aborted when the report carries none (0 is Ok) or one out of range.
Code CauseCode(std::uint32_t code) {
  if (code == 0 || code > static_cast<std::uint32_t>(Code::kInternal)) return Code::kAborted;
  return static_cast<Code>(code);
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Whether `--dedup auto` measures the hosts before the plan (coordinator/link_probe.h): an MPI
// job over several hosts. Every rank knows it alike.
bool ProbesHosts(const Comm& comm, const JobOptions& o, bool mpi_world) {
  return mpi_world && o.plan.dedup == proto::DEDUP_AUTO && comm.nodes() > 1 && comm.size() > 1;
}

// What a rank tells rank 0 before the plan; a host's first rank measures its storage when the
// hosts are probed.
proto::Hello MyHello(const Comm& comm, const JobOptions& o, bool probe) {
  proto::Hello h;
  h.set_node(static_cast<std::uint32_t>(comm.node()));
  h.set_local_rank(static_cast<std::uint32_t>(comm.local_rank()));
  h.set_host(comm.host());
  h.set_gpu(rank::ResolveOrdinal(o.load.settings.device, 0) >= 0);
  h.set_plan_format(planner::kPlanFormat);
#if HOIST_TEST_HOOKS
  if (o.hooks.hello_plan_format != 0) h.set_plan_format(o.hooks.hello_plan_format);
#endif
  if (probe && comm.local_rank() == 0) {
    const StorageRate storage = MeasureStorage(o.model_dir);
    h.set_storage_gib_s(storage.gib_s);
    h.set_storage_cached(storage.cached);
  }
  return h;
}

// Rank 0: every rank's hello, in rank order.
Result<std::vector<proto::Hello>> CollectHellos(Comm& comm, const JobOptions& o, bool probe) {
  std::vector<proto::Hello> hellos(static_cast<std::size_t>(comm.size()));
  hellos[0] = MyHello(comm, o, probe);
  for (int got = 1; got < comm.size(); ++got) {
    HOIST_ASSIGN_OR_RETURN(Message m, Await(comm, -1, Channel::kHello, o.exchange.timeout_s,
                                            "rank 0 waiting for every rank to start"));
    if (!hellos[static_cast<std::size_t>(m.from)].ParseFromString(m.data)) {
      return Status::Corrupt("rank " + std::to_string(m.from) + ": hello does not parse");
    }
  }
  return hellos;
}

// Rank 0: every rank reads the plan as rank 0 writes it (planner::kPlanFormat), or the job is
// refused, naming the first rank that differs.
Status CheckPlanFormats(const std::vector<proto::Hello>& hellos) {
  for (std::size_t r = 0; r < hellos.size(); ++r) {
    const std::uint32_t f = hellos[r].plan_format();
    if (f == planner::kPlanFormat) continue;
    return Status::InvalidArgument("rank " + std::to_string(r) + " on " + hellos[r].host() +
                                   " runs a hoist " +
                                   (f == 0 ? std::string("too old to say its plan format")
                                           : "whose plan format is " + std::to_string(f)) +
                                   ", rank 0's is " + std::to_string(planner::kPlanFormat) +
                                   ": every rank of a job must run the same hoist build");
  }
  return Status::Ok();
}

// Rank 0: the compact plan (planner/plan_set.h), with the NCCL ids its dedup groups need.
proto::JobStart Plan(const JobOptions& o, const std::vector<proto::Hello>& hellos, bool mpi_world,
                     const planner::HostRates& rates) {
  proto::JobStart start;
  planner::PlanOptions po = o.plan;
  po.host_rates = rates;
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
    HOIST_RETURN_IF_ERROR(CheckPlanFormats(hellos));
    if (mpi_world) {
      HOIST_RETURN_IF_ERROR(CheckTopologyHosts(o.node_names, o.plan.locations,
                                               {start.hosts().begin(), start.hosts().end()}));
    }
    HOIST_ASSIGN_OR_RETURN(planner::Checkpoint ckpt, planner::OpenCheckpoint(o.model_dir));
    return planner::BuildCompactPlan(ckpt, po);
  }();
  Result<planner::RankDirectory> dir =
      plan.ok() ? planner::RankDirectory::Of(*plan) : Result<planner::RankDirectory>(plan.status());
  if (!dir.ok()) plan = dir.status();
  if (plan.ok() && mpi_world && plan->dedup() != proto::DEDUP_NONE && kinds.size() > 1) {
    plan = Status::InvalidArgument(
        "dedup: some ranks load into GPUs and others into host memory; all must load into the "
        "same kind (or use --dedup none)");
  }
  std::set<std::uint32_t> groups, nodes;
  if (plan.ok()) {
    for (std::uint32_t r = 0; r < dir->world(); ++r) {
      nodes.insert(dir->Node(r));
      if (dir->dedup()) groups.insert(dir->Group(r));
      if (mpi_world) {  // alone, a process shows its own rank's progress
        start.set_payload_bytes(start.payload_bytes() +
                                plan->ranks(static_cast<int>(dir->ClassOf(r))).payload_bytes());
      }
    }
  }
  // Host arenas: MPI. GPU groups within one host: CUDA IPC (copy engines, nothing to set up).
  // Groups across hosts: NCCL, with ids made here.
  start.set_peer(!all_gpu ? "mpi"
                 : plan.ok() && (plan->dedup() == proto::DEDUP_NODE || nodes.size() <= 1)
                     ? "cuda-ipc"
                     : "nccl");
  if (plan.ok() && mpi_world && plan->dedup() != proto::DEDUP_NONE && start.peer() == "nccl") {
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

// The job's start as this rank saw it: rank 0's JobStart and when planning began and ended here.
struct Started {
  proto::JobStart start;
  Clock::time_point plan_start, plan_end;
  std::size_t wire_bytes = 0;  // the JobStart's size on the wire
  // Rank 0: the whole compact plan, kept until the job ends: freeing a DeepSeek-V3-shaped packed
  // plan takes a quarter of a second, which the plan phase paid; freed on a thread beside the
  // load instead, it slowed the load's set-up by 43 ms (an H100, ep 8 rank 3: malloc's locks).
  std::unique_ptr<proto::LoadPlan> compact;
};

// Ranks other than 0: hello to rank 0, then its start (bounded wait).
Status ReceiveStart(Comm& comm, const JobOptions& o, bool mpi_world, Started* s) {
  const bool probe = ProbesHosts(comm, o, mpi_world);
  HOIST_RETURN_IF_ERROR(comm.Send(0, Channel::kHello, MyHello(comm, o, probe).SerializeAsString()));
  if (probe && comm.local_rank() == 0) {  // another host's first rank (rank 0's host is node 0)
    HOIST_RETURN_IF_ERROR(AnswerLinkProbe(comm, o.exchange.timeout_s));
  }
  HOIST_ASSIGN_OR_RETURN(
      Message m, Await(comm, 0, Channel::kPlan, o.exchange.timeout_s, "waiting for rank 0's plan"));
  s->plan_start = Clock::now();
  s->wire_bytes = m.data.size();
  if (!s->start.ParseFromString(m.data)) {
    return Status::Corrupt("rank " + std::to_string(comm.rank()) + ": plan does not parse");
  }
  return Status::Ok();
}

// A serialized JobStart (without a plan) with `plan`, a serialized LoadPlan, as its plan.
std::string WithPlan(const std::string& start, const std::string& plan) {
  std::string out = start;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        proto::JobStart::kPlanFieldNumber,
        google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint64(plan.size());
    coded.WriteString(plan);
  }
  return out;
}

// Rank 0: every rank's hello, the plan (once), and every rank's start: its own view of the
// plan (planner::RankView's bytes, put together by planner::ViewWriter), made and sent one rank
// at a time, so no rank receives (and rank 0 never holds) the whole world's plans.
Status PlanAndSend(Comm& comm, const JobOptions& o, bool mpi_world, Started* s) {
  const bool probe = ProbesHosts(comm, o, mpi_world);
  HOIST_ASSIGN_OR_RETURN(std::vector<proto::Hello> hellos, CollectHellos(comm, o, probe));
  s->plan_start = Clock::now();
  // A failed probe (a host's first rank silent) fails the start on every rank, like a plan error.
  const Result<planner::HostRates> rates =
      probe ? MeasureHostRates(comm, hellos, o.exchange.timeout_s) : planner::HostRates{};
  if (rates.ok()) {
    s->start = Plan(o, hellos, mpi_world, *rates);
  } else {
    s->start.set_ok(false);
    s->start.set_error_code(static_cast<std::uint32_t>(rates.status().code()));
    s->start.set_error(rates.status().message());
  }
  if (!s->start.ok()) {
    const std::string wire = s->start.SerializeAsString();
    s->wire_bytes = wire.size();
    for (int r = 1; r < comm.size(); ++r) HOIST_RETURN_IF_ERROR(comm.Send(r, Channel::kPlan, wire));
    return Status::Ok();
  }
  proto::LoadPlan compact = std::move(*s->start.mutable_plan());
  s->start.clear_plan();
  HOIST_ASSIGN_OR_RETURN(const planner::RankDirectory dir, planner::RankDirectory::Of(compact));
  const proto::LoadPlan header = planner::PlanHeader(compact, /*packed=*/false);
  proto::JobStart others = s->start;  // rank 0's host only, no progress total
  others.clear_payload_bytes();
  if (others.hosts_size() > 1) others.mutable_hosts()->DeleteSubrange(1, others.hosts_size() - 1);
  const std::string base = others.SerializeAsString();
  const planner::ViewWriter views(compact, dir);
  for (int r = 1; r < comm.size(); ++r) {
    HOIST_RETURN_IF_ERROR(
        comm.Send(r, Channel::kPlan, WithPlan(base, views.View(static_cast<std::uint32_t>(r)))));
  }
  // This process's own rank: 0 under MPI, --rank alone (PlanRank refuses one out of range).
  const int mine = mpi_world ? 0 : o.solo_rank;
  if (mine >= 0 && static_cast<std::uint32_t>(mine) < dir.world()) {
    *s->start.mutable_plan() =
        planner::RankView(compact, header, dir, static_cast<std::uint32_t>(mine));
  } else {
    *s->start.mutable_plan() = header;
    s->start.mutable_plan()->set_view(true);
  }
  s->wire_bytes = s->start.ByteSizeLong();  // what another rank would receive as this one
  s->start.mutable_plan()->set_dedup_reason(compact.dedup_reason());  // for the report
  s->compact = std::make_unique<proto::LoadPlan>(std::move(compact));
  return Status::Ok();
}

// Hello and plan: rank 0 plans once and sends every rank its start; every wait is bounded. A
// planning error comes back on every rank, with rank 0's code.
Result<Started> StartJob(Comm& comm, const JobOptions& o, bool mpi_world) {
  Started s;
  s.plan_start = Clock::now();
  HOIST_RETURN_IF_ERROR(comm.rank() == 0 ? PlanAndSend(comm, o, mpi_world, &s)
                                         : ReceiveStart(comm, o, mpi_world, &s));
  if (!s.start.ok()) {
    s.plan_end = Clock::now();
    const Code code = static_cast<Code>(s.start.error_code());
    if (comm.rank() == 0) return Status(code, s.start.error());
    return Status(code, "rank 0 failed to plan: " + s.start.error());
  }
  // A job dedup view carries the rank's class template member: the rank expands its own
  // exchange from it here (planner/job_dedup.h), as part of its plan phase.
  const int mine = mpi_world ? comm.rank() : o.solo_rank;
  if (mine >= 0) {
    HOIST_RETURN_IF_ERROR(
        planner::ExpandJobView(s.start.mutable_plan(), static_cast<std::uint32_t>(mine)));
  }
  s.plan_end = Clock::now();
  return s;
}

// Which rank of the plan this process executes: its MPI rank, or the solo rank without MPI.
Result<int> PlanRank(const Comm& comm, const JobOptions& o, const proto::LoadPlan& plan,
                     bool mpi_world) {
  const int world = static_cast<int>(planner::PlanWorld(plan));
  const int my_rank = mpi_world ? comm.rank() : o.solo_rank;
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
  return my_rank;
}

// The device: opened before MPI by the caller, or here beside planning, on the GPU the planner
// will assign (LoadRank reopens if it differs).
void PrepareDeviceBesidePlanning(const Comm& comm, bool mpi_world, JobOptions* o) {
  if (o->prepared != nullptr) return;
  const int rank = mpi_world ? comm.rank() : o->solo_rank;
  const int gpu = ExpectedGpu(o->plan, rank, mpi_world ? comm.local_rank() : o->solo_rank);
  o->prepared = std::make_shared<std::future<Result<rank::PreparedDevice>>>(
      std::async(std::launch::async, rank::PrepareDevice, o->load.settings.device, gpu,
                 o->load.wiring.origin, rank::RingOf(o->load.settings)));
}

// What the driver needs besides the options: the progress total and who runs, and what
// completes this rank's report before it is sent (rank, host, init and plan phases).
struct DriverSetup {
  std::uint64_t total_bytes = 0;
  int ranks_running = 1;
  const Started* started = nullptr;
  int my_rank = 0;
};

DriverSetup MakeDriverSetup(const Started& started, int my_rank, bool mpi_world) {
  DriverSetup setup;
  const proto::LoadPlan& plan = started.start.plan();
  setup.ranks_running = mpi_world ? static_cast<int>(planner::PlanWorld(plan)) : 1;
  const proto::RankPlan* mine = planner::FindRank(plan, static_cast<std::uint32_t>(my_rank));
  setup.total_bytes = mpi_world ? started.start.payload_bytes() : mine ? mine->payload_bytes() : 0;
  setup.started = &started;
  setup.my_rank = my_rank;
  return setup;
}

// The driver thread's loop: this rank's load (polled), the control loop, the progress display.
class Driver {
 public:
  Driver(Comm& comm, const JobOptions& o, DriverSetup setup)
      : comm_(comm),
        o_(o),
        my_rank_(setup.my_rank),
        setup_(setup),
        loop_(comm, o.exchange.timeout_s, o.progress_interval_s,
              {setup.started->start.hosts().begin(), setup.started->start.hosts().end()}) {}

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
        AlignClocks(&reports_);
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
      report_.set_error_code(static_cast<std::uint32_t>(r.status().code()));
      failure_ = r.status();
      spdlog::error("load failed: {}", r.status().ToString());
    }
    report_.set_ok(r.ok());
    report_.set_stopped_by(cancelled_ && !r.ok() ? stopped_by_ : -1);
    report_.set_peer_timed_out(!r.ok() && peer_timed_out);
    Complete(&report_);
#if HOIST_TEST_HOOKS
    if (o_.hooks.before_report) o_.hooks.before_report(my_rank_);
#endif
    mine->finished = true;
    mine->report = report_;
  }

  // The fields rank 0 needs besides the load's own: who, where, and the init and plan phases.
  void Complete(proto::RankReport* report) const {
    const Started& st = *setup_.started;
    const proto::RankPlan* rp =
        planner::FindRank(st.start.plan(), static_cast<std::uint32_t>(my_rank_));
    const Clock::time_point origin = o_.load.wiring.origin;
    report->set_rank(static_cast<std::uint32_t>(my_rank_));
    report->set_host(comm_.host());
    if (rp != nullptr) {
      report->set_node(rp->node());
      report->set_gpu(rp->gpu());
    }
    report->set_header_opens(planner::HeaderOpenCount());
    report->set_origin_epoch_s(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
        Seconds(origin, Clock::now()));
    const transport::PhaseRecorder phases(report, origin);
    phases.Record(transport::Phase::kInit, origin,
                  origin + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(o_.init_s)));
    phases.Record(transport::Phase::kPlan, st.plan_start, st.plan_end, st.wire_bytes);
  }

  void Stop(rank::RankJob* job, const JobView& view) {
    cancelled_ = true;
    stopped_by_ = view.stop_rank;
    // The cause's code, so every rank exits as the rank that failed does (one job, one code).
    job->Cancel(Status(CauseCode(view.stop_code),
                       "stopped because rank " + std::to_string(view.stop_rank) + " failed (" +
                           transport::kPeerFailureNote + "): " + view.stop_reason));
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
  const std::int64_t planned = planner::WorldSize(o.plan);
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
  // The job fails with the cause's code, said once: "IoError: rank 2 on h failed: <cause>".
  const Code code = CauseCode(first->error_code());
  std::string cause = first->error();
  const std::string prefix = std::string(CodeName(code)) + ": ";
  if (first->error_code() != 0 && cause.rfind(prefix, 0) == 0) cause.erase(0, prefix.size());
  return Status(
      code, "rank " + std::to_string(first->rank()) + " on " + first->host() + " failed: " + cause);
}

int ExpectedGpu(const planner::PlanOptions& plan, int rank, int fallback) {
  if (rank >= 0 && static_cast<std::size_t>(rank) < plan.locations.size()) {
    return static_cast<int>(plan.locations[static_cast<std::size_t>(rank)].gpu);
  }
  return fallback;
}

// What lives between BeginJob and FinishJob: the options (the driver reads them), the start (the
// load reads its plan), this rank and its load.
struct JobInFlight::State {
  JobOptions options;
  Started started;
  int my_rank = 0;
  bool mpi_world = false;
  Status load_error;
  std::unique_ptr<rank::RankJob> load;
};

JobInFlight::JobInFlight(std::unique_ptr<State> state) : state_(std::move(state)) {}
JobInFlight::~JobInFlight() = default;
const proto::LoadPlan& JobInFlight::plan() const { return state_->started.start.plan(); }
int JobInFlight::rank() const { return state_->my_rank; }
rank::RankJob* JobInFlight::load() { return state_->load.get(); }
const Status& JobInFlight::load_error() const { return state_->load_error; }
bool JobInFlight::ExchangesBytes() const {
  return state_->mpi_world && plan().dedup() != proto::DEDUP_NONE;
}

namespace {

// Async loads: this rank's own copies in layer order (its view holds its plan among `ranks`).
void OrderMyCopies(int my_rank, proto::LoadPlan* plan) {
  if (plan->dedup() != proto::DEDUP_NONE) return;
  const proto::RankPlan* mine = planner::FindRank(*plan, static_cast<std::uint32_t>(my_rank));
  for (proto::RankPlan& rp : *plan->mutable_ranks()) {
    if (&rp == mine) {
      planner::OrderCopiesByLayer(&rp);
      return;
    }
  }
}

}  // namespace

Result<std::unique_ptr<JobInFlight>> BeginJob(Comm& comm, JobOptions options) {
  auto st = std::make_unique<JobInFlight::State>();
  st->mpi_world = comm.size() > 1 || LaunchedByMpi();
  HOIST_RETURN_IF_ERROR(CheckWorld(comm, options, st->mpi_world));
  rank::WarmHostTopology();
  PrepareDeviceBesidePlanning(comm, st->mpi_world, &options);
  st->options = std::move(options);
  const JobOptions& o = st->options;

  // 1. Hello, plan once on rank 0, and every rank's start.
  HOIST_ASSIGN_OR_RETURN(st->started, StartJob(comm, o, st->mpi_world));
  HOIST_ASSIGN_OR_RETURN(st->my_rank, PlanRank(comm, o, st->started.start.plan(), st->mpi_world));
  if (o.order_by_layer) OrderMyCopies(st->my_rank, st->started.start.mutable_plan());
#if HOIST_TEST_HOOKS
  if (o.hooks.after_plan) o.hooks.after_plan(st->my_rank);
#endif

  // 2. This rank's load, through the rank entry point (which opens its peer for a dedup plan).
  rank::LoadOptions load = o.load;
  load.wiring.prepared = o.prepared.get();
  Result<std::unique_ptr<rank::RankJob>> job = rank::RankJob::Open(
      st->started.start, static_cast<std::uint32_t>(st->my_rank), std::move(load), o.exchange,
      st->mpi_world ? comm.mpi_handle() : nullptr, o.hooks);
  if (job.ok()) {
    st->load = std::move(job).value();
  } else {
    st->load_error = job.status();
  }
  return std::make_unique<JobInFlight>(std::move(st));
}

Result<JobResult> FinishJob(Comm& comm, JobInFlight& job) {
  JobInFlight::State& st = job.state();
  const JobOptions& o = st.options;
  // 3. The control loop until every rank finished; rank 0 gets every report with the last
  // message. A load that could not start is reported as this rank's failure.
  Driver driver(comm, o, MakeDriverSetup(st.started, st.my_rank, st.mpi_world));
  HOIST_RETURN_IF_ERROR(driver.Run(st.load.get(), st.load_error));

  // 4. Rank 0: blame the first rank that failed on its own.
  JobResult result;
  result.plan = st.started.start.plan();
  result.local = std::move(driver.local());
  result.failure = driver.failure();
  if (comm.rank() == 0) {
    result.reports = std::move(driver.reports());
    result.failure = Blame(result.reports);
    result.wall_s = Seconds(o.load.wiring.origin, Clock::now());
  }
  return result;
}

Result<JobResult> RunJob(Comm& comm, JobOptions options) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<JobInFlight> job, BeginJob(comm, std::move(options)));
  return FinishJob(comm, *job);
}

}  // namespace hoist::coordinator
