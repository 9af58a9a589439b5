// The CUDA Device: cudaMalloc arena, pinned staging (touched + cudaHostRegister, or
// cudaMallocHost), cudaMemcpyAsync / cudaMemcpy2DAsync on non-blocking streams, cudaEvent
// record/synchronize. Every CUDA return code becomes a Status naming the device, the call, the
// CUDA error and the sizes involved. Compiled only where the CUDA toolkit is found.
// Freed staging goes to one process-wide StagingPool (transport/devices/staging_pool.h), so a
// process that loads again (the embedding API, the daemon) reuses its registered ring instead of
// setting it up again; what the pool keeps stays pinned until the process exits. Packed loads
// decode on the GPU (CreateDecoder .. DestroyDecoder) with the kernel of codec/cuda/codec_decode.h,
// linked in when nvcc built it (HOIST_HAVE_CUDA_DECODE); other builds answer Unsupported there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "codec/lane_sum.h"
#include "codec/layout.h"
#include "transport/devices/cuda/cuda_signal.h"
#include "transport/devices/decode_job.h"
#include "transport/devices/device.h"
#include "transport/devices/host_memory.h"
#include "transport/devices/staging_pool.h"
#include "transport/devices/transpose.h"
#if HOIST_HAVE_CUDA_DECODE
#include "codec/cuda/codec_decode.h"
#endif
#if HOIST_HAVE_CUDA_TRANSPOSE
#include "transport/devices/cuda/transpose_kernel.h"
#endif

namespace hoist::transport {
namespace {

// How long Wait polls an event before it sleeps on it (microseconds).
constexpr int kWaitPollUs = 200;

// Never destroyed: its buffers stay registered with the primary context until the process exits
// (unregistering from a static destructor would run after the CUDA runtime has shut down).
StagingPool& KeptStaging() {
  static StagingPool* pool = new StagingPool();
  return *pool;
}

std::string P(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

#if HOIST_HAVE_CUDA_DECODE
// What the kernel cannot take: a stream that is neither Huffman BF16/F16/F8 with 1..1024
// sub-streams nor stored values of 1, 2 or 4 bytes, a job naming no stream or an arena offset that
// is not value-aligned, more jobs than the error flag can name, code lengths out of step with the
// streams (the tables are built from them on the device).
Status CheckDecodeSet(const std::string& device, const DecodeSet& set) {
  const auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(device + ": decode set: " + what);
  };
  if (set.names.size() != set.streams.size()) {
    return bad(std::to_string(set.names.size()) + " names for " +
               std::to_string(set.streams.size()) + " streams");
  }
  if (set.code_lengths.size() != set.streams.size()) {
    return bad(std::to_string(set.code_lengths.size()) + " code tables for " +
               std::to_string(set.streams.size()) + " streams");
  }
  for (std::size_t i = 0; i < set.streams.size(); ++i) {
    const codec::StreamInfo& info = set.streams[i];
    if (set.code_lengths[i] != info.code_lengths) {  // the parsed, validated ones
      return bad(set.names[i] + ": code lengths other than its stream's");
    }
    const codec::Split split = info.split();
    const std::uint32_t v = codec::DTypeSize(info.dtype);
    const bool stored = info.method == codec::Method::kStored && (v == 1 || v == 2 || v == 4);
    if (!stored && (info.method != codec::Method::kHuffman || split.symbol_bits == 0 ||
                    split.value_bytes > 2 || info.sub_streams == 0 || info.sub_streams > 1024)) {
      return bad(set.names[i] +
                 ": neither a Huffman-coded BF16/F16/F8 stream of 1..1024 sub-streams nor a "
                 "stored one of 1, 2 or 4 bytes a value");
    }
  }
  if (set.jobs.size() >= 0x7FFFFFFFu) return bad(std::to_string(set.jobs.size()) + " jobs");
  for (std::size_t i = 0; i < set.jobs.size(); ++i) {
    const DecodeJob& j = set.jobs[i];
    const std::uint64_t v = j.stream < set.streams.size() ? ValueBytes(set.streams[j.stream]) : 1;
    if (j.stream >= set.streams.size() || j.dst % v != 0 || (j.rows > 1 && j.dst_pitch % v != 0)) {
      return bad("job " + std::to_string(i) + ": stream " + std::to_string(j.stream) +
                 ", arena offset " + std::to_string(j.dst) + ", pitch " +
                 std::to_string(j.dst_pitch) +
                 " (an unknown stream or an offset not a multiple of the value size)");
    }
  }
  return Status::Ok();
}

// The kernel's job is DecodeJob byte for byte (codec_decode.h mirrors it to stay free of
// transport headers): a set's jobs upload as they are, with no copy on the load's clock.
#define HOIST_SAME_FIELD(f) offsetof(DecodeJob, f) == offsetof(cuda::CodecJob, f)
static_assert(sizeof(DecodeJob) == sizeof(cuda::CodecJob) && HOIST_SAME_FIELD(src) &&
                  HOIST_SAME_FIELD(dst) && HOIST_SAME_FIELD(dst_pitch) && HOIST_SAME_FIELD(first) &&
                  HOIST_SAME_FIELD(pitch) && HOIST_SAME_FIELD(width) && HOIST_SAME_FIELD(rows) &&
                  HOIST_SAME_FIELD(bytes) && HOIST_SAME_FIELD(values) && HOIST_SAME_FIELD(stream) &&
                  HOIST_SAME_FIELD(block) && HOIST_SAME_FIELD(checksum),
              "cuda::CodecJob must mirror transport::DecodeJob");
#undef HOIST_SAME_FIELD

// The kernel's per-stream parameters, its block size (the largest sub-stream count rounded up to
// 32; a stored stream counts as codec::lane::kStoredLanes) and the largest job's coded words; the
// jobs and tables are the set's own arrays.
struct DecodeArrays {
  std::vector<cuda::CodecJobStream> streams;
  std::uint32_t threads = 32;
  std::uint64_t max_words = 0;
};

DecodeArrays MakeDecodeArrays(const DecodeSet& set) {
  DecodeArrays a;
  a.streams.reserve(set.streams.size());
  for (const codec::StreamInfo& info : set.streams) {
    const bool stored = info.method == codec::Method::kStored;
    a.streams.push_back(
        {info.sub_streams, static_cast<std::uint8_t>(info.dtype),
         static_cast<std::uint8_t>(info.version > codec::layout::kU16LengthsVersion ? 1 : 0),
         static_cast<std::uint8_t>(stored ? codec::DTypeSize(info.dtype) : 0),
         static_cast<std::uint8_t>(info.version >= codec::layout::kLaneSumVersion ? 1 : 0)});
    const std::uint32_t lanes = stored ? codec::lane::kStoredLanes : info.sub_streams;
    a.threads = std::max(a.threads, (lanes + 31) / 32 * 32);
  }
  for (const DecodeJob& j : set.jobs) {
    if (set.streams[j.stream].method == codec::Method::kStored) continue;  // no coded words
    const std::uint64_t head = set.streams[j.stream].min_block_head_bytes(j.values);
    if (j.bytes >= head) a.max_words = std::max<std::uint64_t>(a.max_words, (j.bytes - head) / 4);
  }
  return a;
}
#endif

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}

  Status Init() {
    HOIST_RETURN_IF_ERROR(Check(cudaSetDevice(ordinal_), "cudaSetDevice"));
    HOIST_RETURN_IF_ERROR(Check(cudaFree(nullptr), "cudaFree(0) (context creation)"));
    cudaDeviceProp prop{};
    HOIST_RETURN_IF_ERROR(
        Check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties"));
    char bus[32] = {0};
    HOIST_RETURN_IF_ERROR(
        Check(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal_), "cudaDeviceGetPCIBusId"));
    int ro = 0;
    if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, ordinal_) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      ro = 0;
    }
    int max_pitch = 0;
    if (cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, ordinal_) != cudaSuccess) {
      (void)cudaGetLastError();
      max_pitch = INT_MAX;
    }
    max_pitch_ = static_cast<std::uint64_t>(max_pitch);
    name_ = "cuda:" + std::to_string(ordinal_) + " " + prop.name;
    caps_.gpu = true;
    caps_.async_copy = true;
    caps_.copy_2d = true;
    caps_.register_host = true;
    caps_.register_read_only = ro != 0;
    caps_.ordinal = ordinal_;
    caps_.pci_bus_id = bus;
    caps_.total_memory = prop.totalGlobalMem;
    return Status::Ok();
  }

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    for (auto& [id, s] : streams_) cudaStreamSynchronize(s);
    for (auto& [id, e] : events_) cudaEventDestroy(e);
    for (auto& [id, s] : streams_) cudaStreamDestroy(s);
    for (auto& [id, d] : decoders_) {
      for (void* p : d.memory) cudaFree(p);
    }
    for (void* p : arenas_) {
      if (!adopted_.count(p)) cudaFree(p);
    }
    for (void* p : imported_) cudaIpcCloseMemHandle(p);
    for (const void* p : registered_) cudaHostUnregister(const_cast<void*>(p));
    for (auto& [p, b] : staging_) (void)ReleaseStaging(b);
  }

  std::string Name() const override { return name_; }
  const DeviceCaps& Caps() const override { return caps_; }

  Result<DeviceBuffer> Allocate(std::uint64_t bytes) override {
    HOIST_RETURN_IF_ERROR(Current());
    void* p = nullptr;
    HOIST_RETURN_IF_ERROR(Check(cudaMalloc(&p, std::max<std::uint64_t>(bytes, 1)),
                                "cudaMalloc(" + std::to_string(bytes) + " bytes)"));
    std::lock_guard lock(mu_);
    arenas_.insert(p);
    return DeviceBuffer{p, bytes};
  }

  Status Free(DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    {
      std::lock_guard lock(mu_);
      if (arenas_.erase(buffer.ptr) == 0) {
        return Status::InvalidArgument(name_ + ": Free of an unknown arena");
      }
      if (adopted_.erase(buffer.ptr) > 0) {  // the caller's memory: forget it, never free it
        buffer = DeviceBuffer{};
        return Status::Ok();
      }
    }
    HOIST_RETURN_IF_ERROR(Current());
    HOIST_RETURN_IF_ERROR(Check(cudaFree(buffer.ptr), "cudaFree"));
    buffer = DeviceBuffer{};
    return Status::Ok();
  }

  Result<ArenaHandle> ExportArena(const DeviceBuffer& arena) override {
    {
      std::lock_guard lock(mu_);
      if (!arenas_.count(arena.ptr) || adopted_.count(arena.ptr)) {
        return Status::InvalidArgument(name_ +
                                       ": ExportArena of an arena this device did not "
                                       "allocate");
      }
    }
    HOIST_RETURN_IF_ERROR(Current());
    cudaIpcMemHandle_t h;
    HOIST_RETURN_IF_ERROR(
        Check(cudaIpcGetMemHandle(&h, arena.ptr), "cudaIpcGetMemHandle(" + P(arena.ptr) + ")"));
    ArenaHandle out;
    out.gpu = true;
    out.ipc.assign(reinterpret_cast<const char*>(&h), sizeof h);
    out.bytes = arena.bytes;
    return out;
  }

  Result<DeviceBuffer> ImportArena(const ArenaHandle& handle) override {
    if (!handle.gpu || handle.ipc.size() != sizeof(cudaIpcMemHandle_t)) {
      return Status::InvalidArgument(
          name_ + ": ImportArena needs a " + std::to_string(sizeof(cudaIpcMemHandle_t)) +
          "-byte CUDA IPC handle, got " + std::to_string(handle.ipc.size()) + " bytes");
    }
    HOIST_RETURN_IF_ERROR(Current());
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.ipc.data(), sizeof h);
    void* p = nullptr;
    HOIST_RETURN_IF_ERROR(
        Check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle(arena of " + std::to_string(handle.bytes) + " bytes)"));
    std::lock_guard lock(mu_);
    imported_.insert(p);
    return DeviceBuffer{p, handle.bytes};
  }

  Status CloseImported(DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    {
      std::lock_guard lock(mu_);
      if (imported_.erase(buffer.ptr) == 0) {
        return Status::InvalidArgument(name_ + ": CloseImported of an arena not imported");
      }
    }
    HOIST_RETURN_IF_ERROR(Current());
    HOIST_RETURN_IF_ERROR(Check(cudaIpcCloseMemHandle(buffer.ptr), "cudaIpcCloseMemHandle"));
    buffer = DeviceBuffer{};
    return Status::Ok();
  }

  Status AdoptArena(const DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::InvalidArgument(name_ + ": adopting null");
    std::lock_guard lock(mu_);
    if (!arenas_.insert(buffer.ptr).second) {
      return Status::InvalidArgument(name_ + ": arena adopted twice");
    }
    adopted_.insert(buffer.ptr);
    return Status::Ok();
  }

  Result<HostBuffer> AllocateStaging(std::uint64_t bytes, StagingKind kind) override {
    HOIST_RETURN_IF_ERROR(Current());
    if (kind == StagingKind::kAuto) kind = StagingKind::kRegister;
    HostBuffer b{nullptr, bytes, kind};
    if (std::optional<HostBuffer> kept = KeptStaging().Take(ordinal_, kind, bytes)) {
      b = *kept;
    } else if (kind == StagingKind::kMallocHost) {
      void* p = nullptr;
      HOIST_RETURN_IF_ERROR(
          Check(cudaMallocHost(&p, bytes), "cudaMallocHost(" + std::to_string(bytes) + " bytes)"));
      b.ptr = static_cast<std::byte*>(p);
    } else {
      HOIST_ASSIGN_OR_RETURN(b.ptr, AllocTouched(bytes));
      Status s = Check(cudaHostRegister(b.ptr, bytes, cudaHostRegisterDefault),
                       "cudaHostRegister(staging, " + std::to_string(bytes) + " bytes)");
      if (!s.ok()) {
        FreeTouched(b.ptr, bytes);
        return s;
      }
    }
    std::lock_guard lock(mu_);
    staging_[b.ptr] = b;
    return b;
  }

  std::uint64_t KeptStagingBytes() const override { return KeptStaging().capacity_bytes(); }

  Status FreeStaging(HostBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    HostBuffer b;
    {
      std::lock_guard lock(mu_);
      auto it = staging_.find(buffer.ptr);
      if (it == staging_.end())
        return Status::InvalidArgument(name_ + ": FreeStaging of unknown memory");
      b = it->second;
      staging_.erase(it);
    }
    HOIST_RETURN_IF_ERROR(Current());
    Status status;
    for (const HostBuffer& evicted : KeptStaging().Give(ordinal_, b)) {
      Status s = ReleaseStaging(evicted);
      if (status.ok()) status = s;
    }
    buffer = HostBuffer{};
    return status;
  }

  Status RegisterHost(const void* ptr, std::uint64_t bytes, bool read_only) override {
    HOIST_RETURN_IF_ERROR(Current());
    unsigned flags = cudaHostRegisterDefault;
    if (read_only) {
      if (!caps_.register_read_only) {
        return Status::Unsupported(name_ + ": read-only host registration not supported");
      }
      flags |= cudaHostRegisterReadOnly;
    }
    HOIST_RETURN_IF_ERROR(Check(cudaHostRegister(const_cast<void*>(ptr), bytes, flags),
                                "cudaHostRegister(" + P(ptr) + ", " + std::to_string(bytes) +
                                    " bytes" + (read_only ? ", read-only)" : ")")));
    std::lock_guard lock(mu_);
    registered_.insert(ptr);
    return Status::Ok();
  }

  Status UnregisterHost(const void* ptr) override {
    {
      std::lock_guard lock(mu_);
      if (registered_.erase(ptr) == 0) {
        return Status::InvalidArgument(name_ + ": UnregisterHost of unregistered memory");
      }
    }
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaHostUnregister(const_cast<void*>(ptr)), "cudaHostUnregister(" + P(ptr) + ")");
  }

  Result<StreamId> CreateStream() override {
    HOIST_RETURN_IF_ERROR(Current());
    cudaStream_t s = nullptr;
    HOIST_RETURN_IF_ERROR(
        Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    std::lock_guard lock(mu_);
    StreamId id = next_id_++;
    streams_[id] = s;
    return id;
  }

  Result<EventId> CreateEvent(bool timing) override {
    HOIST_RETURN_IF_ERROR(Current());
    cudaEvent_t e = nullptr;
    HOIST_RETURN_IF_ERROR(
        Check(cudaEventCreateWithFlags(
                  &e, cudaEventBlockingSync | (timing ? cudaEventDefault : cudaEventDisableTiming)),
              "cudaEventCreateWithFlags"));
    std::lock_guard lock(mu_);
    EventId id = next_id_++;
    events_[id] = e;
    return id;
  }

  Status DestroyStream(StreamId id) override {
    cudaStream_t s;
    {
      std::lock_guard lock(mu_);
      auto it = streams_.find(id);
      if (it == streams_.end()) return Status::InvalidArgument(name_ + ": unknown stream");
      s = it->second;
      streams_.erase(it);
    }
    HOIST_RETURN_IF_ERROR(Current());
    HOIST_RETURN_IF_ERROR(Check(cudaStreamSynchronize(s), "cudaStreamSynchronize"));
    return Check(cudaStreamDestroy(s), "cudaStreamDestroy");
  }

  Status DestroyEvent(EventId id) override {
    cudaEvent_t e;
    {
      std::lock_guard lock(mu_);
      auto it = events_.find(id);
      if (it == events_.end()) return Status::InvalidArgument(name_ + ": unknown event");
      e = it->second;
      events_.erase(it);
    }
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaEventDestroy(e), "cudaEventDestroy");
  }

  Status CopyAsync(const Copy2D& op, StreamId stream) override {
    if (op.width == 0 || op.rows == 0) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_RETURN_IF_ERROR(Current());
    if (op.rows == 1) {
      return Check(cudaMemcpyAsync(op.dst, op.src, op.width, cudaMemcpyHostToDevice, s),
                   "cudaMemcpyAsync" + Describe(op));
    }
    if (op.dst_pitch > max_pitch_ || op.src_pitch > max_pitch_) {
      for (std::uint64_t i = 0; i < op.rows; ++i) {
        HOIST_RETURN_IF_ERROR(
            Check(cudaMemcpyAsync(static_cast<std::byte*>(op.dst) + i * op.dst_pitch,
                                  static_cast<const std::byte*>(op.src) + i * op.src_pitch,
                                  op.width, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync (row " + std::to_string(i) + ")" + Describe(op)));
      }
      return Status::Ok();
    }
    return Check(cudaMemcpy2DAsync(op.dst, op.dst_pitch, op.src, op.src_pitch, op.width, op.rows,
                                   cudaMemcpyHostToDevice, s),
                 "cudaMemcpy2DAsync" + Describe(op));
  }

  // Runs of copies whose rows are back to back (1-D ones included) go in one
  // cudaMemcpyBatchAsync each; other 2-D copies end the run and go as CopyAsync. A staged slot of
  // many copies (a tensor-parallel rank's expert slices and their scales) then costs one
  // submission, not one per copy. A driver without batches: CopyAsync for each, from then on.
  Status CopyBatchAsync(std::span<const Copy2D> ops, StreamId stream) override {
#if CUDART_VERSION >= 12080
    if (ops.size() < 2 || !batches_.load(std::memory_order_relaxed)) {
      return Device::CopyBatchAsync(ops, stream);
    }
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_RETURN_IF_ERROR(Current());
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<std::size_t> sizes;
    const auto flush = [&]() -> Status {
      if (sizes.size() == 1) {
        HOIST_RETURN_IF_ERROR(
            Check(cudaMemcpyAsync(dsts[0], srcs[0], sizes[0], cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync(" + P(dsts[0]) + " <- " + P(srcs[0]) + ", " +
                      std::to_string(sizes[0]) + " bytes)"));
      } else if (!sizes.empty()) {
        HOIST_RETURN_IF_ERROR(IssueBatch(dsts, srcs, sizes, s));
      }
      dsts.clear(), srcs.clear(), sizes.clear();
      return Status::Ok();
    };
    for (const Copy2D& op : ops) {
      if (op.width == 0 || op.rows == 0) continue;
      const bool flat = op.rows == 1 || (op.dst_pitch == op.width && op.src_pitch == op.width);
      if (!flat) {
        HOIST_RETURN_IF_ERROR(flush());
        HOIST_RETURN_IF_ERROR(CopyAsync(op, stream));
        continue;
      }
      dsts.push_back(op.dst);
      srcs.push_back(op.src);
      sizes.push_back(op.width * op.rows);
    }
    return flush();
#else
    return Device::CopyBatchAsync(ops, stream);
#endif
  }

  Status MemsetAsync(void* dst, std::uint8_t value, std::uint64_t bytes, StreamId stream) override {
    if (bytes == 0) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaMemsetAsync(dst, value, bytes, s), "cudaMemsetAsync(" + P(dst) + ", " +
                                                            std::to_string(value) + ", " +
                                                            std::to_string(bytes) + " bytes)");
  }

  Status Record(EventId event, StreamId stream) override {
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t e, GetEvent(event));
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaEventRecord(e, s), "cudaEventRecord");
  }

  // Polls for up to kWaitPollUs (a slot's copy often ends within it: no wake-up latency), then
  // sleeps in cudaEventSynchronize (events are blocking-sync): a waiter beyond the cores it
  // shares with fill threads must not spin on them.
  Status Wait(EventId event) override {
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t e, GetEvent(event));
    HOIST_RETURN_IF_ERROR(Current());
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kWaitPollUs);
    do {
      const cudaError_t rc = cudaEventQuery(e);
      if (rc == cudaSuccess) return Status::Ok();
      if (rc != cudaErrorNotReady) return Check(rc, "cudaEventQuery");
      (void)cudaGetLastError();  // not ready is not an error
    } while (std::chrono::steady_clock::now() < until);
    return Check(cudaEventSynchronize(e), "cudaEventSynchronize");
  }

  Result<bool> Query(EventId event) override {
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t e, GetEvent(event));
    HOIST_RETURN_IF_ERROR(Current());
    const cudaError_t rc = cudaEventQuery(e);
    if (rc == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it so later checks do not see it
      return false;
    }
    HOIST_RETURN_IF_ERROR(Check(rc, "cudaEventQuery"));
    return true;
  }

  Result<double> Elapsed(EventId from, EventId to) override {
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t a, GetEvent(from));
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t b, GetEvent(to));
    HOIST_RETURN_IF_ERROR(Current());
    float ms = 0;
    HOIST_RETURN_IF_ERROR(Check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime"));
    return static_cast<double>(ms) / 1000.0;
  }

  Status Synchronize(StreamId stream) override {
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

  Result<std::unique_ptr<DeviceSignal>> CreateSignal() override {
    return CreateCudaSignal(ordinal_);
  }

  Status StreamWait(StreamId stream, EventId event) override {
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_ASSIGN_OR_RETURN(cudaEvent_t e, GetEvent(event));
    HOIST_RETURN_IF_ERROR(Current());
    return Check(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
  }

  Result<DecoderId> CreateDecoder(const DecodeSet& set) override {
#if HOIST_HAVE_CUDA_DECODE
    Decoder d;
    d.set = &set;
    HOIST_RETURN_IF_ERROR(d.Step("decode set checked", [&] { return CheckDecodeSet(name_, set); }));
    HOIST_RETURN_IF_ERROR(Current());
    Status s = UploadDecoder(set, d);
    if (!s.ok()) {
      (void)FreeDecoder(d);
      return s;
    }
    std::lock_guard lock(mu_);
    const DecoderId id = next_id_++;
    decoders_[id] = std::move(d);
    return id;
#else
    return Status::Unsupported(name_ + ": this build has no CUDA decode kernels (nvcc was not " +
                               "found when hoist was built): packed checkpoints cannot load here");
#endif
  }

  Status DecodeAsync(DecoderId decoder, std::size_t first, std::size_t count, const void* src,
                     void* arena_base, StreamId stream) override {
#if HOIST_HAVE_CUDA_DECODE
    HOIST_ASSIGN_OR_RETURN(cuda::CodecJobSet args, DecoderArgs(decoder, first, count));
    if (count == 0) return Status::Ok();
    if (src == nullptr || arena_base == nullptr) {
      return Status::InvalidArgument(name_ + ": decoding from or into null");
    }
    HOIST_ASSIGN_OR_RETURN(cudaStream_t s, GetStream(stream));
    HOIST_RETURN_IF_ERROR(Current());
    Status st = cuda::LaunchCodecJobs(args, first, count, src, arena_base, s);
    if (!st.ok())
      st.Annotate(name_ + ": jobs " + std::to_string(first) + "+" + std::to_string(count));
    return st;
#else
    return Status::Unsupported(name_ + ": this build has no CUDA decode kernels");
#endif
  }

  Status DecoderStatus(DecoderId decoder) override {
    const DecodeSet* set = nullptr;
    int* error = nullptr;
    {
      std::lock_guard lock(mu_);
      auto it = decoders_.find(decoder);
      if (it == decoders_.end()) return Status::InvalidArgument(name_ + ": unknown decoder");
      set = it->second.set;
      error = it->second.error;
    }
    HOIST_RETURN_IF_ERROR(Current());
    int flag = 0;
    HOIST_RETURN_IF_ERROR(Check(cudaMemcpy(&flag, error, sizeof flag, cudaMemcpyDeviceToHost),
                                "cudaMemcpy(decoder error flag, device->host)"));
    if (flag == 0) return Status::Ok();
    // Reset, finished before this returns (so before the decoder's next launch).
    HOIST_RETURN_IF_ERROR(
        Check(cudaMemset(error, 0, sizeof flag), "cudaMemset(decoder error flag)"));
    HOIST_RETURN_IF_ERROR(
        Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(default stream)"));
    const std::size_t index = static_cast<std::size_t>(flag) - 1;
    if (flag < 0 || index >= set->jobs.size()) {
      return Status::Internal(name_ + ": decoder error flag " + std::to_string(flag) + " for " +
                              std::to_string(set->jobs.size()) + " jobs");
    }
    const DecodeJob& j = set->jobs[index];
    return Status::Corrupt(set->names[j.stream] + ": codec stream: block " +
                           std::to_string(j.block) +
                           " is damaged: on the GPU it does not decode or fails its checksum (a "
                           "bit pattern without a code, a code past its sub-stream's end, bits "
                           "left over, a block too short, or decoded values that differ from the "
                           "packed ones; job " +
                           std::to_string(index) + ")");
  }

  std::vector<DecoderStep> DecoderSteps(DecoderId decoder) override {
    std::lock_guard lock(mu_);
    auto it = decoders_.find(decoder);
    return it == decoders_.end() ? std::vector<DecoderStep>{} : it->second.steps;
  }

  Status DestroyDecoder(DecoderId decoder) override {
    Decoder d;
    {
      std::lock_guard lock(mu_);
      auto it = decoders_.find(decoder);
      if (it == decoders_.end()) return Status::InvalidArgument(name_ + ": unknown decoder");
      d = std::move(it->second);
      decoders_.erase(it);
    }
    HOIST_RETURN_IF_ERROR(Current());
    return FreeDecoder(d);
  }

  // cudaMemcpy from pageable memory may return before its DMA has landed (it returns once the
  // bytes are staged), which work on a non-blocking stream would not wait for: the copy is
  // complete only after the legacy stream it ran on is synchronized.
  Status CopySync(const Copy2D& op) override {
    HOIST_RETURN_IF_ERROR(CopySyncIssue(op));
    return Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize after a copy");
  }

  Status CopySyncIssue(const Copy2D& op) {
    if (op.width == 0 || op.rows == 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(Current());
    if (op.rows == 1) {
      return Check(cudaMemcpy(op.dst, op.src, op.width, cudaMemcpyHostToDevice),
                   "cudaMemcpy" + Describe(op));
    }
    if (op.dst_pitch > max_pitch_ || op.src_pitch > max_pitch_) {
      for (std::uint64_t i = 0; i < op.rows; ++i) {
        HOIST_RETURN_IF_ERROR(
            Check(cudaMemcpy(static_cast<std::byte*>(op.dst) + i * op.dst_pitch,
                             static_cast<const std::byte*>(op.src) + i * op.src_pitch, op.width,
                             cudaMemcpyHostToDevice),
                  "cudaMemcpy (row " + std::to_string(i) + ")" + Describe(op)));
      }
      return Status::Ok();
    }
    return Check(cudaMemcpy2D(op.dst, op.dst_pitch, op.src, op.src_pitch, op.width, op.rows,
                              cudaMemcpyHostToDevice),
                 "cudaMemcpy2D" + Describe(op));
  }

#if HOIST_HAVE_CUDA_TRANSPOSE
  // Each matrix copied to scratch on the device, then transposed back into place by the kernel,
  // on a stream of its own; synchronous.
  Status TransposeInPlace(const Transpose& op) override {
    HOIST_ASSIGN_OR_RETURN(const std::uint64_t matrix, CheckTranspose(op));
    if (matrix == 0 || op.batch == 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(Current());
    void* scratch = nullptr;
    HOIST_RETURN_IF_ERROR(Check(cudaMalloc(&scratch, matrix),
                                "cudaMalloc(" + std::to_string(matrix) + " bytes of scratch)"));
    cudaStream_t s = nullptr;
    Status st = Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    auto* base = static_cast<std::byte*>(op.base);
    for (std::uint64_t b = 0; st.ok() && b < op.batch; ++b) {
      std::byte* m = base + b * matrix;
      st = Check(cudaMemcpyAsync(scratch, m, matrix, cudaMemcpyDeviceToDevice, s),
                 "cudaMemcpyAsync(device->device, " + std::to_string(matrix) + " bytes)");
      if (st.ok()) {
        st = Check(LaunchTranspose(scratch, m, 1, op.rows, op.cols, op.elem_bytes, s),
                   "the transpose kernel (" + std::to_string(op.rows) + " x " +
                       std::to_string(op.cols) + " elements of " + std::to_string(op.elem_bytes) +
                       " bytes at " + P(m) + ")");
      }
    }
    if (s != nullptr) {
      const Status sync = Check(cudaStreamSynchronize(s), "cudaStreamSynchronize(transpose)");
      if (st.ok()) st = sync;
      (void)cudaStreamDestroy(s);
    }
    (void)cudaFree(scratch);
    return st;
  }
#endif

  Status CopyToHost(void* dst, const void* device_src, std::uint64_t bytes) override {
    if (bytes == 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(Current());
    return Check(
        cudaMemcpy(dst, device_src, bytes, cudaMemcpyDeviceToHost),
        "cudaMemcpy(device->host, " + std::to_string(bytes) + " bytes from " + P(device_src) + ")");
  }

 private:
  static std::string Describe(const Copy2D& op) {
    return "(dst=" + P(op.dst) + " dst_pitch=" + std::to_string(op.dst_pitch) +
           " src=" + P(op.src) + " src_pitch=" + std::to_string(op.src_pitch) +
           " width=" + std::to_string(op.width) + " rows=" + std::to_string(op.rows) + ")";
  }

  Status Check(cudaError_t err, const std::string& what) const {
    if (err == cudaSuccess) return Status::Ok();
    (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
    std::string msg = "cuda:" + std::to_string(ordinal_) + ": " + what + ": " +
                      cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    if (err == cudaErrorMemoryAllocation) return Status::ResourceExhausted(std::move(msg));
    if (err == cudaErrorInvalidValue || err == cudaErrorInvalidDevice) {
      return Status::InvalidArgument(std::move(msg));
    }
    return Status::IoError(std::move(msg));
  }

  // The current device is per host thread: set it on every entry (cheap when already current).
  Status Current() const { return Check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

#if CUDART_VERSION >= 12080
  // One cudaMemcpyBatchAsync of host->device copies, their sources read in stream order. A driver
  // that has no batches turns them off (batches_) and the copies go one by one.
  Status IssueBatch(std::vector<void*>& dsts, std::vector<const void*>& srcs,
                    std::vector<std::size_t>& sizes, cudaStream_t s) {
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t attr_index = 0;
    const cudaError_t rc = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(),
                                                sizes.size(), &attr, &attr_index, 1, s);
    if (rc == cudaErrorNotSupported || rc == cudaErrorCallRequiresNewerDriver) {
      (void)cudaGetLastError();
      batches_.store(false, std::memory_order_relaxed);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        HOIST_RETURN_IF_ERROR(
            Check(cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync(" + P(dsts[i]) + " <- " + P(srcs[i]) + ", " +
                      std::to_string(sizes[i]) + " bytes)"));
      }
      return Status::Ok();
    }
    std::uint64_t total = 0;
    for (std::size_t n : sizes) total += n;
    return Check(rc, "cudaMemcpyBatchAsync(" + std::to_string(sizes.size()) + " copies, " +
                         std::to_string(total) + " bytes, the first " + P(dsts[0]) + " <- " +
                         P(srcs[0]) + ")");
  }
#endif

  Result<cudaStream_t> GetStream(StreamId id) const {
    std::lock_guard lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) return Status::InvalidArgument(name_ + ": unknown stream");
    return it->second;
  }
  Result<cudaEvent_t> GetEvent(EventId id) const {
    std::lock_guard lock(mu_);
    auto it = events_.find(id);
    if (it == events_.end()) return Status::InvalidArgument(name_ + ": unknown event");
    return it->second;
  }

  Status ReleaseStaging(const HostBuffer& b) const {
    if (b.kind == StagingKind::kMallocHost) return Check(cudaFreeHost(b.ptr), "cudaFreeHost");
    Status s = Check(cudaHostUnregister(b.ptr), "cudaHostUnregister(staging)");
    FreeTouched(b.ptr, b.bytes);
    return s;
  }

  // A decoder: the set (for error messages), the device memory made for it and the kernel's
  // view of that memory.
  struct Decoder {
    const DecodeSet* set = nullptr;
    std::vector<void*> memory;
    int* error = nullptr;
#if HOIST_HAVE_CUDA_DECODE
    cuda::CodecJobSet args;
#endif
    std::vector<DecoderStep> steps;  // the making's, timed (DecoderSteps)

    // Runs `fn` (returning a Status) as the making's step `what`, timed.
    template <class Fn>
    Status Step(const char* what, Fn&& fn) {
      const auto start = std::chrono::steady_clock::now();
      Status s = fn();
      steps.push_back({what, start, std::chrono::steady_clock::now()});
      return s;
    }
  };

  Status FreeDecoder(Decoder& d) const {
    Status status;
    for (void* p : d.memory) {
      Status s = Check(cudaFree(p), "cudaFree(decoder memory)");
      if (status.ok()) status = std::move(s);
    }
    d.memory.clear();
    return status;
  }

#if HOIST_HAVE_CUDA_DECODE
  // Checks the kernel's shared memory against the device, then uploads jobs, stream parameters
  // and tables, and a zeroed error flag, into one allocation (each array 256-byte aligned);
  // returns once they are in device memory.
  Status UploadDecoder(const DecodeSet& set, Decoder& d) const {
    DecodeArrays a;
    (void)d.Step("decode arrays", [&] {
      a = MakeDecodeArrays(set);
      return Status::Ok();
    });
    Status fits = d.Step("kernel prepared", [&] {
      return cuda::PrepareCodecJobs(cuda::CodecJobSharedBytes(a.max_words));
    });
    if (!fits.ok()) return std::move(fits.Annotate(name_));
    struct Part {
      const void* host;
      std::uint64_t bytes, offset;
      const char* what;
    };
    const auto bytes = [](const auto& v) { return std::uint64_t{v.size() * sizeof(v[0])}; };
    // The tables are built on the device from the code lengths (256 bytes a stream, against 8 KiB
    // a table): no host copy.
    Part parts[] = {{set.jobs.data(), bytes(set.jobs), 0, "decode jobs"},
                    {a.streams.data(), bytes(a.streams), 0, "decode streams"},
                    {set.code_lengths.data(), bytes(set.code_lengths), 0, "code lengths"},
                    {nullptr, set.streams.size() * codec::kLutEntries * 2, 0, "code tables"},
                    { nullptr,
                      sizeof(int),
                      0,
                      "decoder error flag" }};
    std::uint64_t total = 0;
    for (Part& p : parts) {
      p.offset = total;
      total += (p.bytes + 255) / 256 * 256;
    }
    void* block = nullptr;
    HOIST_RETURN_IF_ERROR(d.Step("cudaMalloc", [&] {
      return Check(cudaMalloc(&block, total),
                   "cudaMalloc(decoder, " + std::to_string(total) + " bytes)");
    }));
    d.memory.push_back(block);
    const auto at = [block](const Part& p) { return static_cast<std::byte*>(block) + p.offset; };
    for (const Part& p : parts) {
      if (p.host == nullptr || p.bytes == 0) continue;
      HOIST_RETURN_IF_ERROR(d.Step(p.what, [&] {
        return Check(
            cudaMemcpy(at(p), p.host, p.bytes, cudaMemcpyHostToDevice),
            std::string("cudaMemcpy(") + p.what + ", " + std::to_string(p.bytes) + " bytes)");
      }));
    }
    auto* luts = reinterpret_cast<std::uint16_t*>(at(parts[3]));
    HOIST_RETURN_IF_ERROR(d.Step("code tables built", [&] {
      return cuda::BuildCodecLuts(reinterpret_cast<const std::uint8_t*>(at(parts[2])), luts,
                                  set.streams.size(), nullptr)
          .Annotate(name_);
    }));
    // The copies (from pageable memory), the table kernel and the memset may still run on the
    // default stream, which the load's non-blocking streams do not wait for: finish them here.
    HOIST_RETURN_IF_ERROR(d.Step("default stream synchronized", [&] {
      HOIST_RETURN_IF_ERROR(
          Check(cudaMemset(at(parts[4]), 0, sizeof(int)), "cudaMemset(error flag)"));
      return Check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize(default stream)");
    }));
    cuda::CodecJobSet& args = d.args;
    args.threads = a.threads;
    args.max_words = static_cast<std::uint32_t>(a.max_words);
    args.jobs = reinterpret_cast<const cuda::CodecJob*>(at(parts[0]));
    args.streams = reinterpret_cast<const cuda::CodecJobStream*>(at(parts[1]));
    args.luts = luts;
    args.error = d.error = reinterpret_cast<int*>(at(parts[4]));
    return Status::Ok();
  }

  // The kernel's view of `decoder` after checking jobs [first, first + count) exist.
  Result<cuda::CodecJobSet> DecoderArgs(DecoderId decoder, std::size_t first,
                                        std::size_t count) const {
    std::lock_guard lock(mu_);
    auto it = decoders_.find(decoder);
    if (it == decoders_.end()) return Status::InvalidArgument(name_ + ": unknown decoder");
    const std::size_t jobs = it->second.set->jobs.size();
    if (first > jobs || count > jobs - first) {
      return Status::InvalidArgument(name_ + ": decode jobs " + std::to_string(first) + "+" +
                                     std::to_string(count) + " of " + std::to_string(jobs));
    }
    return it->second.args;
  }
#endif

  int ordinal_;
  std::string name_;
  DeviceCaps caps_;
  std::uint64_t max_pitch_ = INT_MAX;
  std::atomic<bool> batches_{true};  // cudaMemcpyBatchAsync works (IssueBatch turns it off)
  mutable std::mutex mu_;
  std::set<void*> arenas_;
  std::set<void*> adopted_;   // in arenas_ too; the caller's memory, never freed here
  std::set<void*> imported_;  // mapped from another process (cudaIpcOpenMemHandle)
  std::set<const void*> registered_;
  std::map<std::byte*, HostBuffer> staging_;
  std::unordered_map<StreamId, cudaStream_t> streams_;
  std::unordered_map<EventId, cudaEvent_t> events_;
  std::unordered_map<DecoderId, Decoder> decoders_;
  int next_id_ = 1;
};

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Result<std::string> CudaPciBusId(int ordinal) {
  char bus[32] = {0};
  const cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::NotFound("cuda:" + std::to_string(ordinal) +
                            ": no PCI bus id: " + cudaGetErrorName(err));
  }
  std::string id = bus;
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

bool CudaPeerAccessAll() {
  const int n = CudaDeviceCount();
  if (n < 2) return false;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      int ok = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || ok == 0)) {
        (void)cudaGetLastError();
        return false;
      }
    }
  }
  return true;
}

Result<int> CudaOrdinalByPciBusId(const std::string& pci_bus_id) {
  int ordinal = -1;
  const cudaError_t err = cudaDeviceGetByPCIBusId(&ordinal, pci_bus_id.c_str());
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::NotFound("cuda device at PCI bus id " + pci_bus_id +
                            " is not visible: " + cudaGetErrorName(err));
  }
  return ordinal;
}

Result<std::unique_ptr<Device>> OpenCudaDevice(int ordinal) {
  int n = CudaDeviceCount();
  if (ordinal < 0 || ordinal >= n) {
    return Status::InvalidArgument("cuda:" + std::to_string(ordinal) + ": no such device (" +
                                   std::to_string(n) + " visible)");
  }
  auto dev = std::make_unique<CudaDevice>(ordinal);
  HOIST_RETURN_IF_ERROR(dev->Init());
  return std::unique_ptr<Device>(std::move(dev));
}

}  // namespace hoist::transport
