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
// the C API in hoist/hoist_c.h, an MPI_Comm overload in hoist/hoist_mpi.h. The job options by
// name (for bindings such as the Python module), a dry-run resolution, hub ids and logging set-up
// are at the end of this file.
//
// Ownership: a Model owns its weights (the arena it loaded, or the mapping of a daemon's arena
// plus the connection that keeps it attached). Release() gives them up now; the destructor does
// it too. Tensors exported through DLPack keep the weights alive until the consumer deletes them,
// so a framework tensor never dangles (Release then only drops the Model's own reference).
// Failure: every call returns hoist::Status / hoist::Result (hoist/status.h), with the file,
// tensor, rank or socket in the message; nothing throws or exits.
// Threading: Load under MPI is collective over the communicator (call it on every rank, from the
// thread that owns MPI); a Model may be read from any thread; Release from one thread.
// LoadAsync streams on a hoist thread that makes no MPI call; LoadAsync and Wait (and Release of a
// pending model) run the collective parts on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
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
  int layer = 0;                   // its layer group: Model::layers()[layer]
};

// How far an asynchronous load (LoadAsync) has come on this rank. A complete model (Load, Attach,
// or after Wait) reports everything done.
struct LoadProgress {
  std::uint64_t bytes_done = 0;   // bytes handed to the device so far (landed within one staging
                                  // ring of it); bytes_total once this rank's load succeeded
  std::uint64_t bytes_total = 0;  // the bytes this rank's copies move
  int layers_ready = 0;           // leading layer groups whose bytes have landed (LayerReady)
  int layers = 0;                 // layer groups (Model::layers())
  bool ended = false;             // this rank's load ended (Wait still gives the job's verdict)
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

  // ---- Loads that stream behind the engine (LoadAsync; docs/EMBEDDING.md, "Addresses first").
  // A model from Load or Attach is complete: pending() is false, Wait returns OK at once, every
  // layer is ready and the waits below return at once (except an Attach with pending_ok during a
  // daemon's restore or initial load: pending, with whole-model, host-side waits; see Attach).
  //
  // The layer groups in load order: "embeddings", "layer 0" .. "layer N-1", "head" (final norm,
  // LM head and anything outside the layers); Tensor::layer indexes it.
  const std::vector<std::string>& layers() const;
  // True until Wait returned (whatever it returned).
  bool pending() const;
  // Waits for every byte and the job's verdict: OK, or the error of the rank that failed first
  // ("rank 1 on host-b failed: ..."; Aborted "load cancelled ..." after Cancel). Collective
  // under MPI (every rank must call it, from the thread that called LoadAsync, within
  // peer_timeout_s of the first). Idempotent: later calls return the same Status. Only after an
  // OK Wait (or the stream wait below) may the engine trust a tensor's values.
  Status Wait();
  LoadProgress progress() const;
  // Host side, this rank only (no other rank is asked): whether layer group `layer` has landed;
  // WaitLayer blocks until it has (OK) or this rank's load failed (its error). A landed layer's
  // bytes are final (a group holding a tensor transposed after landing lands at the end).
  bool LayerReady(int layer) const;
  Status WaitLayer(int layer) const;
  // Orders the engine's work on `stream` after layer group `layer` (-1: after this rank's whole
  // load) landed, without blocking the host: CUDA: `stream` is a cudaStream_t (nullptr: the legacy
  // default stream) and a device-side wait is enqueued on it (cuStreamWaitValue32 on a word of
  // mapped host memory); host backend: blocks the calling thread until then. A failed or cancelled
  // load releases the wait too (no stream waits forever): call Wait before trusting values.
  Status StreamWait(void* stream, int layer = -1) const;
  // Stops the streaming as soon as it can (any thread); Wait then returns Aborted.
  void Cancel();

  // Frees the arena (or unmaps the daemon's and detaches) unless DLPack tensors still hold it,
  // then invalidates this handle. Errors from freeing are returned. Idempotent. On a pending
  // model it is Cancel then Wait (so collective under MPI) first; the destructor does the same.
  Status Release();

  // Internal: shared with DLPack exports.
  const std::shared_ptr<internal::ModelState>& state() const { return state_; }
  explicit Model(std::shared_ptr<internal::ModelState> state);

 private:
  std::shared_ptr<internal::ModelState> state_;
};

// Loads this process's part of the job (plan on rank 0, broadcast, load, gather).
Result<Model> Load(const LoadOptions& options);
// Like Load, but returns once the plan is known and this rank's arena is allocated: every tensor's
// address, shape and dtype is final, and its bytes stream in behind the engine, layer group by
// layer group (Model::layers). The model is pending() until Wait. The engine may record addresses,
// capture graphs and run kernels whose results it discards; it may trust values only after Wait
// returned OK or its stream passed StreamWait (docs/EMBEDDING.md). Collective under MPI like Load
// (and Wait is too). An error before the arena exists (bad options, planning, a file changed since
// planning, the device) is returned here, after this rank has taken part in the job's end; later
// errors surface at Wait. A plan that forwards bytes between ranks (dedup) loads synchronously
// here (the exchange needs the MPI thread), so the model comes back complete.
Result<Model> LoadAsync(const LoadOptions& options);
// Shorthand: Load with a topology file only.
Result<Model> LoadTopology(const std::string& topology_file);

struct AttachOptions {
  int timeout_ms = 10000;         // connect, and the reply of a resident daemon or pending_ok
  std::string client = "engine";  // a label for the daemon's log
  // A daemon restoring its arena from its host cache (`hoist ctl restore`), or still in its
  // initial load (`hoist serve --serve-while-loading`): false (the default) waits for the end and
  // returns a complete model; true returns at once with the arena mapped and the model pending()
  // (addresses, shapes and dtypes final, bytes landing): Wait() asks the daemon and returns OK
  // once they are resident, or the restore's (load's) error naming the rank. A resident daemon's
  // attach is complete either way.
  bool pending_ok = false;
  // How long the daemon's restore (or initial load) may still take: a default attach's reply,
  // and a pending model's Wait (a timeout fails either).
  int wait_timeout_ms = 600000;
};

// Attaches to a running `hoist serve` rank through its socket (<socket_dir>/rank-<R>.sock): maps
// its arena in this process (CUDA IPC, or the host arena's memfd) without copying a byte. The
// daemon counts this process as attached until Release (or exit). With pending_ok, a model
// attached during a restore (or the initial load) is pending: the readiness calls of Model are
// whole-model for it (no layer group lands before the others), all of them host-side (StreamWait
// blocks the calling thread, whatever the device: no device-side event crosses the socket), Wait is
// not collective and waits at most wait_timeout_ms (the daemon answers when its restore ends; its
// exit fails it), Cancel does nothing (the restore is the daemon's), progress() reports no bytes
// until Wait returned OK, and Release detaches at once.
Result<Model> Attach(const std::string& socket_path, const AttachOptions& options = {});

// Bytes per element of a safetensors dtype name (0 when unknown).
int DTypeSize(std::string_view dtype);

// ---- The job options by name, for a binding or an engine's own configuration layer (keywords,
// a config file) that takes options as names and values rather than as LoadOptions fields. The
// rows are hoist's one option table: the same names as the fields of hoist/job_options.h, the
// topology file's keys and the command line's flags.
enum class JobOptionType { kString, kInt, kDouble, kBool };

struct JobOptionInfo {
  std::string_view name;  // the field, key and keyword: "slot_mib"
  JobOptionType type;
  bool plan = false;             // shapes the plan (`hoist plan` takes it too)
  std::string_view help;         // one line
  std::string_view choices;      // "a | b | c"; empty for numbers and free strings
  std::string_view default_is;   // as text; empty when none or when the help line says how
  double lo = 0, hi = 0;         // numbers: the accepted range, inclusive
  bool zero_is_default = false;  // numbers: 0 is accepted too, meaning the default
};

// Every job option, in the table's order. The rows live as long as the library.
const std::vector<JobOptionInfo>& JobOptions();
// The row named `name` (exact spelling), or nullptr.
const JobOptionInfo* FindJobOption(std::string_view name);
// The option name nearest to a misspelt `name` ("slot_mb" -> "slot_mib"), or "" when none is
// close; for a message of the caller's own.
std::string NearestJobOption(std::string_view name);

// A value for SetJobOption: a string, a whole number, a number or a bool.
using JobOptionValue = std::variant<std::string, std::int64_t, double, bool>;

// Sets the option named `name` in `options` (a LoadOptions is a JobOptionSet) to `value`, which
// must be of the option's type (a whole number also does for a number). InvalidArgument for an
// unknown name (with the nearest one: "did you mean 'slot_mib'?"), a value of another type or a
// whole number beyond an int. Ranges and choices are checked where fields are: by Load, or by
// DescribeLoad below. Threading: writes only `options`.
Status SetJobOption(JobOptionSet* options, std::string_view name, const JobOptionValue& value);

// Resolves `options` as Load would (topology file, then defaults; every value checked) without
// planning or loading anything: Load's InvalidArgument for options it would refuse, else the
// resolved job as "name=value" lines, for logs and tests. The names and encodings are hoist's
// internal ones and may change between versions; do not parse them.
Result<std::string> DescribeLoad(const LoadOptions& options);

// The folder a model path or Hugging Face repo id (owner/name[@revision]) names, as Load resolves
// `model`: an existing folder as it is; a repo id found offline in the local hub cache
// ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub, ...; never downloaded). InvalidArgument
// for a repo id in no cache, naming every place looked. Threading: reads the environment.
Result<std::string> ResolveModel(const std::string& model);

// hoist's log lines (warnings, an asynchronous load's summary) to stdout through spdlog, coloured
// only where a person reads the terminal (never under a launcher such as mpirun, nor with
// NO_COLOR set). Does nothing when the program registered an spdlog logger named "hoist" itself,
// or called this before. Without either, hoist logs through spdlog's default logger. Threading:
// call once, before the first Load.
void LogToStdout();

}  // namespace hoist
