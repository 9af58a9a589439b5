// Internal: what a hoist::Model holds (include/hoist/hoist.h). Shared by the Model handle and its
// DLPack exports; the weights are freed by Free() or when the last reference goes.
// Threading: Free() is serialised by `mu`; the tensor table is immutable after construction.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "daemon/serve_wire.h"
#include "hoist/hoist.h"
#include "proto/plan.pb.h"
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
  std::vector<Phase> phases;

  std::mutex mu;
  bool freed = false;
};

// The tensor table of a rank plan over an arena at `base` of `arena_bytes`; Corrupt when a tensor
// lies outside the arena or has an unknown dtype or a shape that disagrees with its bytes.
Result<std::vector<Tensor>> BuildTensorTable(
    const google::protobuf::RepeatedPtrField<proto::TensorOut>& outs, void* base,
    std::uint64_t arena_bytes, const std::string& where);

}  // namespace hoist::internal
