// Internal: what a hoist::Model holds (include/hoist/hoist.h). Shared by the Model handle and its
// DLPack exports; the weights are freed by Free() or when the last reference goes.
// An asynchronous load (LoadAsync, embed/async_load.cc) also holds its job in flight, its
// communicator and the watch its worker reports to, until Wait; an attach during a daemon's
// restore (AttachOptions::pending_ok) the generation it awaits on its connection.
// Threading: Free() is serialised by `mu`; the tensor table is immutable after construction;
// the job in flight is touched only by the thread that calls LoadAsync, Wait and Release.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "coordinator/comm.h"
#include "coordinator/job.h"
#include "daemon/serve_wire.h"
#include "hoist/hoist.h"
#include "proto/plan.pb.h"
#include "rank/load_watch.h"
#include "rank/worker.h"
#include "transport/devices/device.h"

namespace hoist::internal {

struct ModelState {
  ~ModelState();
  // Frees the arena or unmaps the daemon's; idempotent.
  Status Free();

  // Loaded in this process.
  std::optional<rank::LoadedRank> loaded;
  Allocator allocator;  // the engine's, when it supplied the arena
  void* engine_block = nullptr;
  std::uint64_t engine_bytes = 0;
  int engine_device = -1;

  // Attached to a daemon.
  std::unique_ptr<transport::Device> device;
  transport::DeviceBuffer imported;
  std::unique_ptr<rank::DaemonConnection> connection;

  int rank = 0;
  int world = 1;
  DeviceType type = DeviceType::kHost;
  int ordinal = -1;
  std::string device_name;
  bool attached = false;
  void* arena = nullptr;
  std::uint64_t arena_bytes = 0;
  std::vector<Tensor> tensors;
  std::vector<std::string> layers;  // layer group names (planner/layer_order.h)
  std::vector<Phase> phases;

  // Asynchronous loads: the job until Wait (then null), the communicator it runs on, the
  // worker's watch (kept: it holds the device-side signal and a failed load's arena), the bytes
  // this rank's copies move, and Wait's verdict once given.
  std::unique_ptr<coordinator::Comm> comm;
  std::unique_ptr<coordinator::JobInFlight> job;
  std::shared_ptr<rank::LoadWatch> watch;
  double timeout_s = 0;
  std::uint64_t bytes_total = 0;
  Status verdict;
  std::atomic<bool> pending{false};
  std::mutex job_mu;  // guards `job` against Cancel from other threads
  // Attached while the daemon restored (AttachOptions::pending_ok): the arena generation whose
  // bytes Wait asks the daemon about (on `connection`); `pending` until it answered, then the
  // answer in `verdict`. attach_mu serialises the asking (Wait, WaitLayer, StreamWait).
  std::uint64_t awaited_generation = 0;
  int timeout_ms = 0;       // the connection's usual bound, restored after the await
  int wait_timeout_ms = 0;  // the await's (AttachOptions::wait_timeout_ms)
  std::mutex attach_mu;
  Status AwaitDaemon();
  // The job's end (collective), after cancelling its load when `cancel`: Wait's result, kept in
  // `verdict` (returned again by later calls).
  Status FinishJob(bool cancel);
  // Stops this rank's streaming (any thread).
  void CancelLoad();

  std::mutex mu;
  bool freed = false;
};

// The tensor table of a rank plan over an arena at `base` of `arena_bytes`, each tensor's layer
// group set (and the groups' names in *layers when given); Corrupt when a tensor lies outside the
// arena or has an unknown dtype or a shape that disagrees with its bytes.
Result<std::vector<Tensor>> BuildTensorTable(
    const google::protobuf::RepeatedPtrField<proto::TensorOut>& outs, void* base,
    std::uint64_t arena_bytes, const std::string& where,
    std::vector<std::string>* layers = nullptr);

// A load's job options resolved from LoadOptions, with the engine allocator wired to `state`,
// and the communicator it runs on (the engine's, MPI_COMM_WORLD, or this process alone).
struct PreparedLoad {
  coordinator::JobOptions job;
  std::unique_ptr<coordinator::Comm> comm;
};
Result<PreparedLoad> PrepareLoad(const LoadOptions& options, ModelState* state);
// The job's verdict on every rank (rank 0 broadcasts the failure it blames); collective.
Status JobVerdict(coordinator::Comm& comm, const Status& mine, double timeout_s);
// Fills `state` from this rank's finished load (device, phases, arena, tensor table if not yet).
Status TakeLoadedRank(coordinator::JobResult* result, ModelState* state);
void DescribeDevice(const transport::Device& dev, ModelState* state);

}  // namespace hoist::internal
