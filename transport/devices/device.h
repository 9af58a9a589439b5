// The Device seam (Mooncake transport.h style: capabilities + status): allocate the arena and
// pinned staging, enqueue async host->device copies (1-D and 2-D) and memsets on a stream, record
// and wait events, copy back to the host, free.
//
// Backends: host memory (OpenHostDevice: one copy thread per stream stands in for the DMA engine,
// so ops really are asynchronous and the real pipeline runs in CPU-only CI) and CUDA
// (OpenCudaDevice; compiled only where the toolkit is found, CUDA types never leak out of
// transport/devices/cuda/).
//
// Ownership: a Device owns everything it allocates or creates (arenas, staging, streams,
// events); destroying it synchronizes its streams and frees all of them. DeviceBuffer and
// HostBuffer are plain handles. Failure: every call returns a Status; CUDA errors carry the call,
// the CUDA error name and the sizes involved. Async ops report errors either at enqueue or at the
// next Wait/Synchronize. Threading: all methods may be called from any thread; ops enqueued on
// one stream execute in enqueue order (callers enqueueing one logical batch from several threads
// serialize themselves).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "util/enum_names.h"

namespace hoist::transport {

// Device memory (the arena). ptr is a device address: dereference it only on the host backend.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::uint64_t bytes = 0;
};

// How staging memory is made DMA-able. kRegister: page-aligned anonymous memory, touched (huge
// pages when available), then registered (cudaHostRegister; cheap on already-touched memory);
// kMallocHost: cudaMallocHost (about 10x slower to set up on the H200 box).
enum class StagingKind { kAuto, kRegister, kMallocHost };
// The pinning kinds' one name table (the `pinning` option's choices, in this order).
inline constexpr EnumName<StagingKind> kStagingKindNames[] = {
    {StagingKind::kAuto, "auto"},
    {StagingKind::kRegister, "register"},
    {StagingKind::kMallocHost, "mallochost"},
};
constexpr std::optional<StagingKind> ParseStagingKind(std::string_view name) {
  return EnumFromName(kStagingKindNames, name);
}
constexpr std::string_view StagingKindName(StagingKind kind) {
  return NameOfEnum(kStagingKindNames, kind);
}

// Host memory usable as a DMA source.
struct HostBuffer {
  std::byte* ptr = nullptr;
  std::uint64_t bytes = 0;
  StagingKind kind = StagingKind::kRegister;
};

// A 2-D copy: rows of `width` bytes from src (row i at src + i*src_pitch) to dst (row i at
// dst + i*dst_pitch). rows == 1 is a 1-D copy (pitches ignored).
struct Copy2D {
  void* dst = nullptr;
  std::uint64_t dst_pitch = 0;
  const void* src = nullptr;
  std::uint64_t src_pitch = 0;
  std::uint64_t width = 0;
  std::uint64_t rows = 1;
};

// `batch` row-major matrices of rows x cols elements of elem_bytes each, back to back from
// `base` (device memory), to be transposed in place into cols x rows matrices.
struct Transpose {
  void* base = nullptr;
  std::uint64_t batch = 0;
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint32_t elem_bytes = 0;
};

struct DeviceCaps {
  bool gpu = false;                // a real accelerator behind a DMA engine
  bool async_copy = true;          // copies return before the bytes move
  bool copy_2d = true;             // Copy2D executes as one op
  bool register_host = true;       // RegisterHost works (registered read mode)
  bool register_read_only = true;  // read-only mappings (a mapped file) can be registered
  int ordinal = -1;                // device index (CUDA), -1 on the host backend
  std::string pci_bus_id;          // "0000:3b:00.0" for hwloc, empty when unknown
  std::uint64_t total_memory = 0;
};

// An arena exported to another process (Device::ExportArena).
struct ArenaHandle {
  bool gpu = false;          // CUDA IPC handle (true) or host memfd (false)
  std::string ipc;           // cudaIpcMemHandle_t bytes (CUDA)
  int fd = -1;               // the memfd (host); its holder closes it
  std::uint64_t bytes = 0;   // arena size
  std::uint64_t offset = 0;  // arena start within the memfd (host; page-aligned, usually 0)
};

using StreamId = int;
using EventId = int;
using DecoderId = int;
struct DecodeSet;  // transport/devices/decode_job.h

// A 32-bit counter that a load raises from the host and that an engine's work can wait on (an
// asynchronous load's readiness, include/hoist/hoist.h): the counter only grows, and Release()
// raises it to kReleased, which satisfies every wait (a failed or cancelled load releases its
// waiters; the engine learns of the failure from the host-side wait).
//
// CUDA (transport/devices/cuda/): a word of mapped pinned host memory; EnqueueWait puts a
// `value >= v` wait (cuStreamWaitValue32) on the engine's cudaStream_t without blocking the
// host, so the engine's next kernels run once the counter reaches v. Host backend: there are no
// device streams; EnqueueWait blocks the calling thread until the counter reaches v (the host
// backend's "kernels" are the caller's own code, which then runs after the bytes landed).
// Ownership: independent of the Device that made it (it may outlive it). Threading: any thread.
class DeviceSignal {
 public:
  static constexpr std::uint32_t kReleased = 0x7fffffffu;
  virtual ~DeviceSignal() = default;
  // Raises the counter to `value` (never lowers it).
  virtual void Raise(std::uint32_t value) = 0;
  void Release() { Raise(kReleased); }
  virtual std::uint32_t Value() const = 0;
  // Orders the work on `stream` (CUDA: a cudaStream_t, nullptr the legacy default stream;
  // ignored on the host) after the counter reached `value`.
  virtual Status EnqueueWait(void* stream, std::uint32_t value) = 0;
};

// The host backend's signal (also the default of Device::CreateSignal).
std::unique_ptr<DeviceSignal> MakeHostSignal();

class Device {
 public:
  virtual ~Device() = default;

  // "cuda:0 NVIDIA H200" or "host".
  virtual std::string Name() const = 0;
  virtual const DeviceCaps& Caps() const = 0;

  // Arena: device memory, uninitialised.
  virtual Result<DeviceBuffer> Allocate(std::uint64_t bytes) = 0;
  virtual Status Free(DeviceBuffer& buffer) = 0;

  // Staging: DMA-able host memory (the calling thread's NUMA policy decides placement). The CUDA
  // backend keeps freed staging in a process-wide pool (transport/devices/staging_pool.h) and hands
  // it back to the next request of the same size and kind: a second load in one process skips the
  // set-up (the memory then sits where the first load's threads placed it).
  virtual Result<HostBuffer> AllocateStaging(std::uint64_t bytes, StagingKind kind) = 0;
  virtual Status FreeStaging(HostBuffer& buffer) = 0;
  // How many bytes of freed staging the device keeps for later requests (0: it keeps none, and
  // FreeStaging frees).
  virtual std::uint64_t KeptStagingBytes() const { return 0; }

  // Page-locks existing host memory (e.g. a mapped file; read_only for PROT_READ mappings).
  virtual Status RegisterHost(const void* ptr, std::uint64_t bytes, bool read_only) = 0;
  virtual Status UnregisterHost(const void* ptr) = 0;

  virtual Result<StreamId> CreateStream() = 0;
  // timing: the event can be used with Elapsed (slightly more expensive to record).
  virtual Result<EventId> CreateEvent(bool timing) = 0;
  virtual Status DestroyStream(StreamId stream) = 0;
  virtual Status DestroyEvent(EventId event) = 0;

  // Async ops on a stream: they run in enqueue order. src of CopyAsync must stay valid and
  // unchanged until an event recorded after it completes.
  virtual Status CopyAsync(const Copy2D& op, StreamId stream) = 0;
  // Several copies at once, as CopyAsync each; their destinations must not overlap (they may run
  // in any order among themselves, in stream order as a whole). A backend that submits many
  // copies in one call overrides it (CUDA: cudaMemcpyBatchAsync for the 1-D ones); the default
  // calls CopyAsync for each, stopping at the first error.
  virtual Status CopyBatchAsync(std::span<const Copy2D> ops, StreamId stream);
  virtual Status MemsetAsync(void* dst, std::uint8_t value, std::uint64_t bytes,
                             StreamId stream) = 0;
  virtual Status Record(EventId event, StreamId stream) = 0;
  // Blocks until the event's latest recording completed (OK at once when never recorded).
  // A device may poll briefly before it sleeps (a copy often ends within microseconds).
  virtual Status Wait(EventId event) = 0;
  // Non-blocking Wait: true when the latest recording completed (or the event was never
  // recorded), false while it is pending.
  virtual Result<bool> Query(EventId event) = 0;
  // Seconds between two completed timing events.
  virtual Result<double> Elapsed(EventId from, EventId to) = 0;
  virtual Status Synchronize(StreamId stream) = 0;

  // Transposes op's matrices in place (through device scratch of one matrix), synchronously;
  // every copy into them must have completed. The default returns Unsupported.
  virtual Status TransposeInPlace(const Transpose& op);

  // Synchronous copies: host (any memory, e.g. pageable mmap) -> device, and device -> host.
  virtual Status CopySync(const Copy2D& op) = 0;
  virtual Status CopyToHost(void* dst, const void* device_src, std::uint64_t bytes) = 0;

  // Sharing an arena with another process (the daemon, daemon/serve.h) and engine-owned arenas.
  // Defaults return Unsupported, so a backend without them still builds.
  //
  // ExportArena: a handle another process can map (CUDA: cudaIpcGetMemHandle; host: a dup of the
  // memfd behind the arena, which the caller owns and closes). ImportArena maps such a handle in
  // this process as an arena of this device (ops may target it); CloseImported unmaps it (also
  // done by the destructor). AdoptArena lets ops target memory the caller allocated (an engine's
  // allocator); the device never frees it: Free and the destructor only forget it.
  virtual Result<ArenaHandle> ExportArena(const DeviceBuffer& arena);
  virtual Result<DeviceBuffer> ImportArena(const ArenaHandle& handle);
  virtual Status CloseImported(DeviceBuffer& buffer);
  virtual Status AdoptArena(const DeviceBuffer& buffer);

  // Makes `stream` wait (on the device, without blocking the caller) until the latest recording
  // of `event` completed; a never-recorded event is no wait.
  virtual Status StreamWait(StreamId stream, EventId event);

  // A readiness counter engines can wait on (DeviceSignal above). The default is the host's.
  virtual Result<std::unique_ptr<DeviceSignal>> CreateSignal();

  // Decoding codec blocks into arenas (packed checkpoints, transport/devices/decode_job.h).
  // Defaults return Unsupported, so a backend without a decoder still builds.
  //
  // CreateDecoder prepares `set` once per load (the CUDA backend uploads code tables and jobs);
  // `set` must outlive the decoder. DecodeAsync enqueues jobs [first, first + count) on `stream`:
  // job j reads its block at src + j.src (memory this device's ops can read: device memory on a
  // GPU) and writes into the arena whose first byte is arena_base. DecoderStatus, once the
  // streams that ran its jobs completed: Ok, or Corrupt naming the stream's tensor and the
  // block of the first job found bad (a bit pattern without a code, a sub-stream that does not
  // end where its length says; the host backend also checks each block's checksum).
  // DestroyDecoder frees what CreateDecoder made (its streams must have completed).
  virtual Result<DecoderId> CreateDecoder(const DecodeSet& set);
  virtual Status DecodeAsync(DecoderId decoder, std::size_t first, std::size_t count,
                             const void* src, void* arena_base, StreamId stream);
  virtual Status DecoderStatus(DecoderId decoder);
  virtual Status DestroyDecoder(DecoderId decoder);
  // The steps of `decoder`'s making as the backend timed them (for the load's trace; the default,
  // and an unknown decoder: none). Call before DestroyDecoder.
  struct DecoderStep {
    const char* what;  // a string literal
    std::chrono::steady_clock::time_point start, end;
  };
  virtual std::vector<DecoderStep> DecoderSteps(DecoderId decoder);
};

// The CUDA ordinal of the device at PCI bus id `pci_bus_id` (as DeviceCaps::pci_bus_id), so an
// importing process finds the exporter's GPU whatever its CUDA_VISIBLE_DEVICES; NotFound when not
// visible, Unsupported without CUDA.
Result<int> CudaOrdinalByPciBusId(const std::string& pci_bus_id);

// The host-memory backend. Never fails to open. Its arenas (memfd-backed, so ExportArena works)
// start filled with 0xCD so that a byte no copy or fill wrote is visible; their memory is reserved
// and populated by Allocate (on several threads), so a shortage is ResourceExhausted there, never
// a fault later. Accesses outside every arena are refused at enqueue. Copies from a mapped file
// (pageable/registered modes) are guarded (transport/reading/mapped_read.h): a file truncated under
// the load is an IoError from CopySync, or from the next Wait/Synchronize of the copy's stream.
// `keep_staging_bytes` > 0 makes it keep freed staging as the CUDA backend does (a pool of that
// capacity, per device; tests of code that relies on kept staging), 0 frees it at once.
std::unique_ptr<Device> OpenHostDevice(std::uint64_t keep_staging_bytes = 0);

// Number of CUDA devices visible (0 without a driver, a GPU, or a CUDA build).
int CudaDeviceCount();
// The PCI bus id ("0000:3b:00.0", lower case) of CUDA device `ordinal`, without creating a
// context on it; Unsupported without CUDA.
Result<std::string> CudaPciBusId(int ordinal);
// True when every pair of visible CUDA devices can access each other's memory directly
// (NVLink or PCIe peer-to-peer); false with fewer than two devices or without CUDA.
bool CudaPeerAccessAll();
// A CUDA device; Unsupported in builds without CUDA, InvalidArgument for a bad ordinal.
Result<std::unique_ptr<Device>> OpenCudaDevice(int ordinal);

}  // namespace hoist::transport
