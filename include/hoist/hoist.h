// hoist's embedding API: an inference engine gets its weights in-process (hoist::Load) or from a
// resident `hoist serve` rank (hoist::Attach), as a tensor table over one device arena.
//
//   find_package(hoist REQUIRED)
//   target_link_libraries(engine PRIVATE hoist::hoist)
//
//   hoist::LoadOptions o;
//   o.model = "/models/qwen3-4b";
//   o.tp = 2;
//   hoist::Result<hoist::Model> m = hoist::Load(o);          // or hoist::Attach(socket_path)
//   const hoist::Tensor* w = m->Find("model.layers.0.self_attn.qkv_proj.weight");
//
// Output names, shapes and slicing are docs/LAYOUT.md's; DLPack export is in hoist/hoist_dlpack.h,
// the C API in hoist/hoist_c.h, an MPI_Comm overload in hoist/hoist_mpi.h.
//
// Ownership: a Model owns its weights (the arena it loaded, or the mapping of a daemon's arena
// plus the connection that keeps it attached). Release() gives them up now; the destructor does
// it too. Tensors exported through DLPack keep the weights alive until the consumer deletes them,
// so a framework tensor never dangles (Release then only drops the Model's own reference).
// Failure: every call returns hoist::Status / hoist::Result (hoist/status.h), with the file,
// tensor, rank or socket in the message; nothing throws or exits.
// Threading: Load under MPI is collective over the communicator (call it on every rank, from the
// thread that owns MPI); a Model may be read from any thread; Release from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hoist/job_options.h"
#include "hoist/status.h"

namespace hoist {

namespace internal {
struct ModelState;
}  // namespace internal

enum class DeviceType { kHost, kCuda };

struct Tensor {
  std::string name;                 // docs/LAYOUT.md, e.g. "model.layers.0.mlp.gate_up_proj.weight"
  std::string dtype;                // safetensors spelling: BF16, F16, F32, F8_E4M3, ...
  std::vector<std::int64_t> shape;  // row-major
  std::vector<std::int64_t> strides;  // in elements (contiguous row-major)
  void* data = nullptr;               // device address (CUDA) or host address (host backend)
  std::uint64_t bytes = 0;
  std::uint64_t arena_offset = 0;  // data == arena base + arena_offset
  int element_size = 0;            // bytes per element
};

// The engine's arena allocator (optional): hoist asks for one block of `bytes` on `device`
// (CUDA ordinal, or -1 on the host backend) and hands it back through `deallocate` when the
// weights are released. The block must be device memory (host memory on the host backend),
// aligned to at least 256 bytes.
struct Allocator {
  std::function<void*(std::uint64_t bytes, int device)> allocate;
  std::function<void(void* ptr, std::uint64_t bytes, int device)> deallocate;
};

// Every job option (hoist/job_options.h: tp, dp, layout, read, pinning, slots, dedup, verify, ...)
// is a field of the same name, as in the topology file and on the command line; unset fields come
// from the topology file, then the defaults. `model` empty counts as unset.
struct LoadOptions : JobOptionSet {
  // A topology file (YAML, the keys `hoist load` reads: every option, plus nodes).
  std::string topology_file;
  // Without a communicator: which rank of the plan this process loads.
  int rank = 0;
  // The engine's communicator: a pointer to an MPI_Comm (see hoist/hoist_mpi.h). Every rank of
  // it calls Load; rank 0 plans once and broadcasts. nullptr: MPI_COMM_WORLD when the engine has
  // initialised MPI, else this process alone.
  const void* mpi_comm = nullptr;
  Allocator allocator;  // empty: hoist allocates the arena itself
};

struct Phase {
  std::string name;  // init, plan, arena_alloc, read, h2d, ..., total; attach: connect, map
  double seconds = 0;
  std::uint64_t bytes = 0;
};

class Model {
 public:
  Model();
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  bool valid() const { return state_ != nullptr; }
  // This process's rank of the plan, and the plan's world size.
  int rank() const;
  int world() const;
  DeviceType device_type() const;
  int device_ordinal() const;       // CUDA ordinal in this process; -1 on the host backend
  std::string device_name() const;  // "cuda:0 NVIDIA H200" or "host"
  bool attached() const;            // weights of a `hoist serve` daemon (Attach), not loaded here
  void* arena() const;
  std::uint64_t arena_bytes() const;
  const std::vector<Tensor>& tensors() const;
  // nullptr when absent.
  const Tensor* Find(std::string_view name) const;
  // Where the time went (load: the rank's phases; attach: connect/map).
  const std::vector<Phase>& phases() const;

  // Frees the arena (or unmaps the daemon's and detaches) unless DLPack tensors still hold it,
  // then invalidates this handle. Errors from freeing are returned. Idempotent.
  Status Release();

  // Internal: shared with DLPack exports.
  const std::shared_ptr<internal::ModelState>& state() const { return state_; }
  explicit Model(std::shared_ptr<internal::ModelState> state);

 private:
  std::shared_ptr<internal::ModelState> state_;
};

// Loads this process's part of the job (plan on rank 0, broadcast, load, gather).
Result<Model> Load(const LoadOptions& options);
// Shorthand: Load with a topology file only.
Result<Model> LoadTopology(const std::string& topology_file);

struct AttachOptions {
  int timeout_ms = 10000;         // connect and reply
  std::string client = "engine";  // a label for the daemon's log
};

// Attaches to a running `hoist serve` rank through its socket (<socket_dir>/rank-<R>.sock): maps
// its arena in this process (CUDA IPC, or the host arena's memfd) without copying a byte. The
// daemon counts this process as attached until Release (or exit).
Result<Model> Attach(const std::string& socket_path, const AttachOptions& options = {});

// Bytes per element of a safetensors dtype name (0 when unknown).
int DTypeSize(std::string_view dtype);

}  // namespace hoist
