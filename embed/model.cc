// hoist::Load, hoist::Attach and the Model handle (include/hoist/hoist.h).
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "config/job_spec.h"
#include "coordinator/job.h"
#include "embed/model_state.h"
#include "embed/resolve_options.h"
#include "hoist/hoist.h"
#include "planner/dtype.h"
#include "planner/layer_order.h"
#include "planner/plan_set.h"
#include "transport/timing/phase.h"

namespace hoist {
namespace internal {

using Clock = std::chrono::steady_clock;

ModelState::~ModelState() {
  if (job != nullptr) (void)FinishJob(true);  // cancel + the job's end (collective, bounded)
  Status s = Free();
  if (!s.ok()) spdlog::warn("hoist: releasing the weights: {}", s.ToString());
}

Status ModelState::Free() {
  std::lock_guard lock(mu);
  if (freed) return Status::Ok();
  freed = true;
  Status result;
  if (loaded) {
    if (loaded->device) result = loaded->device->Free(loaded->arena);
    loaded.reset();  // destroys the device (synchronises its streams) before the engine frees
  }
  if (std::unique_ptr<rank::LoadedRank> orphan = watch ? watch->TakeOrphan() : nullptr) {
    Status s = orphan->device ? orphan->device->Free(orphan->arena) : Status::Ok();
    if (result.ok()) result = s;
    orphan.reset();  // a failed asynchronous load's device, before the engine frees its block
  }
  if (engine_block != nullptr && allocator.deallocate) {
    allocator.deallocate(engine_block, engine_bytes, engine_device);
    engine_block = nullptr;
  }
  if (device) {
    if (imported.ptr != nullptr) {
      Status s = device->CloseImported(imported);
      if (result.ok()) result = s;
    }
    device.reset();
  }
  if (connection != nullptr) {
    // A Wait blocked on the daemon (another thread, under attach_mu) returns at once; then the
    // connection goes, never under that Wait.
    ::shutdown(connection->fd(), SHUT_RDWR);
    std::lock_guard attach_lock(attach_mu);
    connection.reset();  // the daemon sees this process detach
  }
  arena = nullptr;
  for (Tensor& t : tensors) t.data = nullptr;
  return result;
}

Result<std::vector<Tensor>> BuildTensorTable(
    const google::protobuf::RepeatedPtrField<proto::TensorOut>& outs, void* base,
    std::uint64_t arena_bytes, const std::string& where, std::vector<std::string>* layers) {
  std::vector<std::string> names;
  for (const proto::TensorOut& o : outs) names.push_back(o.name());
  planner::LayerGroups groups = planner::GroupNamesByLayer(names);
  if (layers != nullptr) *layers = std::move(groups.names);
  std::vector<Tensor> table;
  table.reserve(outs.size());
  for (const proto::TensorOut& o : outs) {
    Tensor t;
    t.layer = groups.of_tensor[table.size()];
    t.name = o.name();
    t.dtype = o.dtype();
    t.element_size = DTypeSize(o.dtype());
    if (t.element_size == 0) {
      return Status::Corrupt(where + ": tensor " + o.name() + " has unknown dtype '" + o.dtype() +
                             "'");
    }
    std::uint64_t elements = 1;
    for (std::uint64_t d : o.shape()) {
      if (d != 0 && elements > ~0ull / d) {
        return Status::Corrupt(where + ": tensor " + o.name() + ": shape overflows");
      }
      elements *= d;
      t.shape.push_back(static_cast<std::int64_t>(d));
    }
    if (elements * static_cast<std::uint64_t>(t.element_size) != o.bytes()) {
      return Status::Corrupt(where + ": tensor " + o.name() + ": shape x " + o.dtype() + " is " +
                             std::to_string(elements * t.element_size) + " bytes, table says " +
                             std::to_string(o.bytes()));
    }
    if (o.arena_offset() > arena_bytes || o.bytes() > arena_bytes - o.arena_offset()) {
      return Status::Corrupt(where + ": tensor " + o.name() + " at arena offset " +
                             std::to_string(o.arena_offset()) + " (+" + std::to_string(o.bytes()) +
                             ") lies outside the arena of " + std::to_string(arena_bytes) +
                             " bytes");
    }
    t.strides.assign(t.shape.size(), 1);
    for (int i = static_cast<int>(t.shape.size()) - 2; i >= 0; --i) {
      t.strides[i] = t.strides[i + 1] * t.shape[i + 1];
    }
    t.bytes = o.bytes();
    t.arena_offset = o.arena_offset();
    t.data = static_cast<std::byte*>(base) + o.arena_offset();
    table.push_back(std::move(t));
  }
  return table;
}

config::JobSpec ToJobSpec(const LoadOptions& options) {
  config::JobSpec spec;
  static_cast<JobOptionSet&>(spec) = options;  // the same struct: every option carries over
  spec.topology = options.topology_file;
  spec.solo_rank = options.rank;
  return spec;
}

Result<config::ResolvedJob> ResolveLoadOptions(const LoadOptions& options) {
  return config::ResolveJobSpec(ToJobSpec(options));
}

Result<PreparedLoad> PrepareLoad(const LoadOptions& options, ModelState* state) {
  const Clock::time_point origin = Clock::now();
  HOIST_ASSIGN_OR_RETURN(config::ResolvedJob resolved, ResolveLoadOptions(options));
  PreparedLoad p;
  p.job = std::move(resolved.job);
  if (options.mpi_comm != nullptr || coordinator::MpiActive()) {
    HOIST_ASSIGN_OR_RETURN(p.comm, coordinator::WrapMpiComm(options.mpi_comm));
  } else {
    p.comm = coordinator::CreateSoloComm();
  }
  if (p.comm->rank() == 0) {
    for (const std::string& w : resolved.warnings) spdlog::warn("hoist: {}", w);
  }
  if (options.allocator.allocate) {
    if (!options.allocator.deallocate) {
      return Status::InvalidArgument("the engine allocator has allocate but no deallocate");
    }
    state->allocator = options.allocator;
    p.job.load.wiring.allocate_arena =
        [state](transport::Device& dev, std::uint64_t bytes) -> Result<transport::DeviceBuffer> {
      const int ordinal = dev.Caps().ordinal;
      void* ptr = state->allocator.allocate(bytes, ordinal);
      if (ptr == nullptr) {
        return Status::ResourceExhausted("the engine allocator returned null for the " +
                                         std::to_string(bytes) + "-byte arena");
      }
      state->engine_block = ptr;
      state->engine_bytes = bytes;
      state->engine_device = ordinal;
      if (reinterpret_cast<std::uintptr_t>(ptr) % 256 != 0) {
        return Status::InvalidArgument("the engine allocator returned memory not aligned to 256");
      }
      transport::DeviceBuffer b{ptr, bytes};
      HOIST_RETURN_IF_ERROR(dev.AdoptArena(b));
      return b;
    };
  }
  p.job.load.wiring.origin = origin;
  p.job.init_s = 0;
  return p;
}

Status JobVerdict(coordinator::Comm& comm, const Status& mine, double timeout_s) {
  // Every rank learns whether the job as a whole succeeded (rank 0 has everyone's reports).
  Status failure = mine;
  if (comm.size() > 1) {
    std::string verdict = comm.rank() == 0 && !failure.ok() ? failure.ToString() : "";
    HOIST_RETURN_IF_ERROR(comm.Broadcast(&verdict, timeout_s));
    if (failure.ok() && !verdict.empty()) failure = Status::Aborted("the job failed: " + verdict);
  }
  return failure;
}

void DescribeDevice(const transport::Device& dev, ModelState* state) {
  state->type = dev.Caps().gpu ? DeviceType::kCuda : DeviceType::kHost;
  state->ordinal = dev.Caps().ordinal;
  state->device_name = dev.Name();
}

Status TakeLoadedRank(coordinator::JobResult* result, ModelState* state) {
  if (!result->local) return Status::Internal("the load left no arena");
  rank::LoadedRank& lr = *result->local;
  const int my_rank = static_cast<int>(lr.report.rank());
  state->rank = my_rank;
  state->world = static_cast<int>(planner::PlanWorld(result->plan));
  DescribeDevice(*lr.device, state);
  for (const proto::Phase& p : lr.report.phases()) {
    state->phases.push_back({p.name(), p.seconds(), p.bytes()});
  }
  if (state->arena != nullptr && state->arena != lr.arena.ptr) {
    return Status::Internal("rank " + std::to_string(my_rank) +
                            ": the arena moved during the load");
  }
  state->arena = lr.arena.ptr;
  state->arena_bytes = lr.arena.bytes;
  if (state->tensors.empty()) {
    const proto::RankPlan* mine =
        planner::FindRank(result->plan, static_cast<std::uint32_t>(my_rank));
    if (mine == nullptr) {
      return Status::Internal("rank " + std::to_string(my_rank) + " is not in its plan");
    }
    HOIST_ASSIGN_OR_RETURN(state->tensors,
                           BuildTensorTable(mine->tensors(), lr.arena.ptr, lr.arena.bytes,
                                            "rank " + std::to_string(my_rank), &state->layers));
  }
  state->loaded.emplace(std::move(lr));
  return Status::Ok();
}

}  // namespace internal

using internal::Clock;
using internal::ModelState;

int DTypeSize(std::string_view dtype) {
  std::optional<planner::DType> d = planner::ParseDType(dtype);
  return d ? static_cast<int>(planner::DTypeSize(*d)) : 0;
}

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::Model(std::shared_ptr<ModelState> state) : state_(std::move(state)) {}

int Model::rank() const { return state_ ? state_->rank : -1; }
int Model::world() const { return state_ ? state_->world : 0; }
DeviceType Model::device_type() const { return state_ ? state_->type : DeviceType::kHost; }
int Model::device_ordinal() const { return state_ ? state_->ordinal : -1; }
std::string Model::device_name() const { return state_ ? state_->device_name : ""; }
bool Model::attached() const { return state_ && state_->attached; }
void* Model::arena() const { return state_ ? state_->arena : nullptr; }
std::uint64_t Model::arena_bytes() const { return state_ ? state_->arena_bytes : 0; }

const std::vector<Tensor>& Model::tensors() const {
  static const std::vector<Tensor> kNone;
  return state_ ? state_->tensors : kNone;
}

const Tensor* Model::Find(std::string_view name) const {
  for (const Tensor& t : tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const std::vector<Phase>& Model::phases() const {
  static const std::vector<Phase> kNone;
  return state_ ? state_->phases : kNone;
}

Status Model::Release() {
  if (!state_) return Status::Ok();
  if (state_->job != nullptr) {  // streaming: cancel, then end the job with the other ranks
    (void)state_->FinishJob(true);
  }
  std::shared_ptr<ModelState> s = std::move(state_);
  if (s.use_count() == 1) return s->Free();
  return Status::Ok();  // DLPack exports still hold the weights; the last one frees them
}

Result<Model> Load(const LoadOptions& options) {
  auto state = std::make_shared<ModelState>();
  HOIST_ASSIGN_OR_RETURN(internal::PreparedLoad p, internal::PrepareLoad(options, state.get()));
  const double timeout_s = p.job.exchange.timeout_s;
  HOIST_ASSIGN_OR_RETURN(coordinator::JobResult result,
                         coordinator::RunJob(*p.comm, std::move(p.job)));
  HOIST_RETURN_IF_ERROR(internal::JobVerdict(*p.comm, result.failure, timeout_s));
  HOIST_RETURN_IF_ERROR(internal::TakeLoadedRank(&result, state.get()));
  return Model(std::move(state));
}

Result<Model> LoadTopology(const std::string& topology_file) {
  LoadOptions o;
  o.topology_file = topology_file;
  return Load(o);
}

Result<Model> Attach(const std::string& socket_path, const AttachOptions& options) {
  const Clock::time_point t0 = Clock::now();
  auto state = std::make_shared<ModelState>();
  state->attached = true;
  HOIST_ASSIGN_OR_RETURN(state->connection,
                         rank::DaemonConnection::Connect(socket_path, options.timeout_ms));
  proto::DaemonRequest req;
  req.mutable_attach()->set_client(options.client + " pid " + std::to_string(::getpid()));
  req.mutable_attach()->set_pending_ok(options.pending_ok);
  std::vector<int> fds;
  // A default attach's reply may wait for a restore (or the initial load) to end.
  if (!options.pending_ok) {
    state->connection->set_timeout_ms(std::max(options.timeout_ms, options.wait_timeout_ms));
  }
  Result<proto::DaemonResponse> replied = state->connection->Call(req, &fds);
  state->connection->set_timeout_ms(options.timeout_ms);
  HOIST_ASSIGN_OR_RETURN(proto::DaemonResponse resp, std::move(replied));
  const Clock::time_point t1 = Clock::now();
  struct FdCloser {
    std::vector<int>* fds;
    ~FdCloser() { rank::CloseAll(fds); }
  } closer{&fds};
  if (!resp.has_attach()) {
    return Status::Corrupt(socket_path + ": the daemon's reply to attach has no tensor table");
  }
  const proto::AttachReply& a = resp.attach();
  transport::ArenaHandle handle;
  handle.gpu = a.gpu();
  handle.bytes = a.arena_bytes();
  if (a.gpu()) {
    HOIST_ASSIGN_OR_RETURN(state->ordinal, transport::CudaOrdinalByPciBusId(a.pci_bus_id()));
    HOIST_ASSIGN_OR_RETURN(state->device, transport::OpenCudaDevice(state->ordinal));
    handle.ipc = a.cuda_ipc_handle();
    state->type = DeviceType::kCuda;
  } else {
    if (fds.size() != 1) {
      return Status::Corrupt(socket_path + ": a host arena needs exactly one descriptor, got " +
                             std::to_string(fds.size()));
    }
    state->device = transport::OpenHostDevice();
    handle.fd = fds[0];
    state->type = DeviceType::kHost;
  }
  Result<transport::DeviceBuffer> imported = state->device->ImportArena(handle);
  if (!imported.ok()) return Status(imported.status()).Annotate(socket_path);
  state->imported = *imported;
  state->arena = imported->ptr;
  state->arena_bytes = imported->bytes;
  state->rank = static_cast<int>(a.rank());
  state->world = static_cast<int>(a.world());
  state->device_name = state->device->Name();
  HOIST_ASSIGN_OR_RETURN(state->tensors,
                         internal::BuildTensorTable(a.tensors(), imported->ptr, imported->bytes,
                                                    socket_path, &state->layers));
  const Clock::time_point t2 = Clock::now();
  auto phase = [](transport::Phase p, Clock::time_point from, Clock::time_point to,
                  std::uint64_t bytes) {
    return Phase{std::string(transport::PhaseName(p)),
                 std::chrono::duration<double>(to - from).count(), bytes};
  };
  state->phases.push_back(phase(transport::Phase::kConnect, t0, t1, 0));
  state->phases.push_back(phase(transport::Phase::kMap, t1, t2, a.arena_bytes()));
  state->phases.push_back(phase(transport::Phase::kTotal, t0, t2, 0));
  if (a.pending()) {  // the daemon restores this arena: Wait asks it when the bytes are in
    state->awaited_generation = a.generation();
    state->timeout_ms = options.timeout_ms;
    state->wait_timeout_ms = options.wait_timeout_ms;
    state->pending.store(true);
  }
  return Model(std::move(state));
}

}  // namespace hoist
