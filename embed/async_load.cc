// hoist::LoadAsync and the asynchronous side of hoist::Model (include/hoist/hoist.h).
//
// LoadAsync runs the collective start of the job on the caller's thread (coordinator::BeginJob:
// hello, plan on rank 0, each rank's start), then waits until this rank's worker has its arena
// (rank::LoadWatch::AwaitArena) and returns the tensor table over it. The bytes stream on the
// worker thread, which makes no MPI call. Wait runs the rest on the caller's thread
// (coordinator::FinishJob: the control loop, rank 0's blame, the verdict's broadcast), so it is
// collective. A plan that forwards bytes between ranks (dedup) needs the control loop while it
// streams: LoadAsync then finishes the job before returning.
// A model attached during a daemon's restore (hoist::Attach with pending_ok) is pending too: its
// waits are one AwaitRequest on its connection (ModelState::AwaitDaemon), whole-model and
// host-side.
// Ownership, failure and threading: as hoist.h says for Model; Cancel may come from any thread.
#include <spdlog/spdlog.h>

#include "coordinator/job.h"
#include "embed/model_state.h"
#include "hoist/hoist.h"
#include "planner/plan_set.h"
#include "rank/load_watch.h"

namespace hoist {
namespace internal {
namespace {

std::uint64_t CopyBytes(const proto::RankPlan& rp) {
  std::uint64_t n = 0;
  for (const proto::Copy& c : rp.copies()) n += c.width() * c.rows();
  return n;
}

// The model's table over the arena the worker announced.
Status DescribePending(const transport::DeviceBuffer& arena, ModelState* state) {
  const int my_rank = state->job->rank();
  const proto::LoadPlan& plan = state->job->plan();
  const proto::RankPlan* mine = planner::FindRank(plan, static_cast<std::uint32_t>(my_rank));
  if (mine == nullptr) {
    return Status::Internal("rank " + std::to_string(my_rank) + " is not in its plan");
  }
  state->rank = my_rank;
  state->world = static_cast<int>(planner::PlanWorld(plan));
  const rank::LoadWatch::DeviceInfo dev = state->watch->device();
  state->type = dev.gpu ? DeviceType::kCuda : DeviceType::kHost;
  state->ordinal = dev.ordinal;
  state->device_name = dev.name;
  state->arena = arena.ptr;
  state->arena_bytes = arena.bytes;
  state->bytes_total = CopyBytes(*mine);
  HOIST_ASSIGN_OR_RETURN(state->tensors,
                         BuildTensorTable(mine->tensors(), arena.ptr, arena.bytes,
                                          "rank " + std::to_string(my_rank), &state->layers));
  return Status::Ok();
}

}  // namespace

void ModelState::CancelLoad() {
  std::lock_guard lock(job_mu);
  if (job != nullptr && job->load() != nullptr) {
    job->load()->Cancel(Status::Aborted("load cancelled by the engine (Model::Cancel)"));
  }
}

Status ModelState::FinishJob(bool cancel) {
  if (job == nullptr) return verdict;
  if (cancel) CancelLoad();
  Result<coordinator::JobResult> r = coordinator::FinishJob(*comm, *job);
  if (!r.ok()) {
    verdict = r.status();
  } else {
    verdict = JobVerdict(*comm, r->failure, timeout_s);
    if (verdict.ok()) {
      verdict = TakeLoadedRank(&*r, this);
    } else if (r->local) {
      loaded.emplace(std::move(*r->local));  // another rank failed: keep ours until Release
    }
  }
  {
    std::lock_guard lock(job_mu);
    job.reset();
  }
  pending.store(false);
  return verdict;
}

Status ModelState::AwaitDaemon() {
  std::lock_guard lock(attach_mu);
  if (!pending.load()) return verdict;
  if (connection == nullptr) return Status::FailedPrecondition("Wait on a released model");
  proto::DaemonRequest req;
  req.mutable_await_resident()->set_generation(awaited_generation);
  // The restore's remaining time (a daemon that exits closes the connection at once).
  connection->set_timeout_ms(wait_timeout_ms > 0 ? wait_timeout_ms : timeout_ms);
  Result<proto::DaemonResponse> r = connection->Call(req);
  connection->set_timeout_ms(timeout_ms);
  verdict = r.ok() ? Status::Ok() : Status(r.status()).Annotate("waiting for the daemon's restore");
  pending.store(false);
  return verdict;
}

}  // namespace internal

Result<Model> LoadAsync(const LoadOptions& options) {
  auto state = std::make_shared<internal::ModelState>();
  HOIST_ASSIGN_OR_RETURN(internal::PreparedLoad p, internal::PrepareLoad(options, state.get()));
  state->watch = std::make_shared<rank::LoadWatch>();
  const bool mpi_world = p.comm->size() > 1 || coordinator::LaunchedByMpi();
  rank::InstallStreamingTestHooks(state->watch.get(), mpi_world ? p.comm->rank() : options.rank);
  p.job.load.wiring.watch = state->watch.get();
  p.job.order_by_layer = true;
  state->timeout_s = p.job.exchange.timeout_s;
  state->comm = std::move(p.comm);
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<coordinator::JobInFlight> job,
                         coordinator::BeginJob(*state->comm, std::move(p.job)));
  {
    std::lock_guard lock(state->job_mu);
    state->job = std::move(job);
  }
  state->pending.store(true);
  if (state->job->ExchangesBytes()) {
    spdlog::info(
        "hoist: rank {}: the plan forwards bytes between ranks (dedup), which needs the MPI "
        "thread while it streams: loading synchronously",
        state->job->rank());
    HOIST_RETURN_IF_ERROR(state->FinishJob(false));
    return Model(std::move(state));
  }
  Result<transport::DeviceBuffer> arena = state->watch->AwaitArena();
  if (!arena.ok()) {
    // Failed before its arena existed: end the job with the others (collective) and say why.
    Status verdict = state->FinishJob(false);
    return verdict.ok() ? arena.status() : verdict;
  }
  HOIST_RETURN_IF_ERROR(internal::DescribePending(*arena, state.get()));
  return Model(std::move(state));
}

const std::vector<std::string>& Model::layers() const {
  static const std::vector<std::string> kNone;
  return state_ ? state_->layers : kNone;
}

bool Model::pending() const { return state_ && state_->pending.load(); }

Status Model::Wait() {
  if (!state_) return Status::FailedPrecondition("Wait on a released or empty model");
  if (state_->attached) return state_->AwaitDaemon();
  return state_->FinishJob(false);
}

LoadProgress Model::progress() const {
  LoadProgress p;
  if (!state_) return p;
  p.layers = static_cast<int>(state_->layers.size());
  if (state_->attached) {  // whole-model: nothing counts as landed until Wait said so
    p.bytes_total = state_->arena_bytes;
    p.ended = !state_->pending.load();
    const bool landed = p.ended && state_->verdict.ok();
    p.bytes_done = landed ? p.bytes_total : 0;
    p.layers_ready = landed ? p.layers : 0;
    return p;
  }
  const rank::LoadWatch* w = state_->watch.get();
  p.bytes_total = state_->bytes_total != 0 ? state_->bytes_total : state_->arena_bytes;
  p.ended = w == nullptr || w->ended();
  const bool landed = w == nullptr || (p.ended && w->status().ok());
  p.layers_ready = landed ? p.layers : std::min(w->landed(), p.layers);
  if (landed) {
    p.bytes_done = p.bytes_total;
  } else {
    std::lock_guard lock(state_->job_mu);
    rank::RankJob* load = state_->job ? state_->job->load() : nullptr;
    p.bytes_done = load != nullptr ? std::min(load->bytes_done(), p.bytes_total) : 0;
  }
  return p;
}

bool Model::LayerReady(int layer) const {
  if (!state_) return false;
  if (state_->attached) return !state_->pending.load() && state_->verdict.ok();
  return state_->watch == nullptr || state_->watch->landed() > layer;
}

Status Model::WaitLayer(int layer) const {
  if (!state_) return Status::FailedPrecondition("WaitLayer on a released or empty model");
  if (layer < 0 || layer >= static_cast<int>(state_->layers.size())) {
    return Status::InvalidArgument("layer group " + std::to_string(layer) + " is not among the " +
                                   std::to_string(state_->layers.size()) + " of this model");
  }
  if (state_->attached) return state_->AwaitDaemon();  // whole-model
  if (state_->watch == nullptr) return Status::Ok();
  return state_->watch->WaitLanded(layer + 1);
}

Status Model::StreamWait(void* stream, int layer) const {
  if (!state_) return Status::FailedPrecondition("StreamWait on a released or empty model");
  if (layer < -1 || layer >= static_cast<int>(state_->layers.size())) {
    return Status::InvalidArgument("layer group " + std::to_string(layer) + " is not among the " +
                                   std::to_string(state_->layers.size()) + " of this model");
  }
  if (state_->attached) return state_->AwaitDaemon();  // host-side: no event crosses the socket
  if (state_->watch == nullptr) return Status::Ok();   // complete: nothing to wait for
  transport::DeviceSignal* signal = state_->watch->signal();
  if (signal == nullptr) return Status::Internal("the load has no readiness signal");
  const std::uint32_t value =
      layer < 0 ? transport::DeviceSignal::kReleased : static_cast<std::uint32_t>(layer + 1);
  return signal->EnqueueWait(stream, value);
}

void Model::Cancel() {
  if (state_) state_->CancelLoad();
}

}  // namespace hoist
