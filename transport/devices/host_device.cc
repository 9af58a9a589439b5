// The host-memory Device: the arena is host memory and one copy thread per stream stands in for
// the DMA engine, executing a FIFO of copies, memsets and event records. Ops are validated at
// enqueue (the destination must lie inside an arena this device allocated), so a planning or
// pipeline bug surfaces as a Status instead of a stray write.
//
// Arena set-up: the memfd's memory is reserved (fallocate), its pages populated in batches
// (MADV_POPULATE_WRITE) and poisoned with 0xCD, split between threads. The poison is kept in every
// build: the pages must be faulted in anyway before the copies can write them (that is the cost,
// and it is paid once either way), so the memset adds one pass at memory bandwidth, and in return
// a byte no copy or fill wrote (a missed zero fill above all) stays visible to --verify and tests.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "transport/devices/decode_job.h"
#include "transport/devices/device.h"
#include "transport/devices/host_memory.h"
#include "transport/devices/staging_pool.h"
#include "transport/devices/transpose.h"
#include "transport/reading/mapped_read.h"

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Freshly allocated arena bytes hold this value, so a byte the plan never writes is visible.
constexpr unsigned char kPoison = 0xCD;
// Arena set-up runs on up to this many threads, each taking at least kPoisonPieceBytes.
constexpr unsigned kMaxPoisonThreads = 16;
constexpr std::uint64_t kPoisonPieceBytes = 64ull << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Maps every page of [p, p + n) writable (one MADV_POPULATE_WRITE call instead of a page fault per
// page; where it is refused, e.g. kernels before 5.14, the memset faults the pages in instead),
// then writes the poison. Returns 0 or the errno of a population that ran out of memory.
int PopulateAndPoison(std::byte* p, std::uint64_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) != 0 && (errno == ENOMEM || errno == EFAULT)) {
    return errno;
  }
  std::memset(p, kPoison, n);
  return 0;
}

// MemAvailable + SwapFree from /proc/meminfo in bytes, or 0 when unknown.
std::uint64_t AvailableMemory() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  std::uint64_t total = 0;
  int found = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1 ||
        std::sscanf(line, "SwapFree: %llu kB", &kib) == 1) {
      total += kib * 1024;
      ++found;
    }
  }
  std::fclose(f);
  return found == 2 ? total : 0;
}

// PopulateAndPoison over the whole arena, split between threads in 2 MiB-aligned pieces (the page
// faults, not the memset, are the cost: about 7 us a page in the CI virtual machine). A thread that
// cannot be started leaves its piece to the calling thread.
int PoisonArena(std::byte* p, std::uint64_t n) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const auto nt = static_cast<unsigned>(
      std::clamp<std::uint64_t>(n / kPoisonPieceBytes, 1, std::min(hw, kMaxPoisonThreads)));
  const std::uint64_t per = (n / nt + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  std::vector<int> errs(nt, 0);
  auto piece = [&](unsigned t) {
    const std::uint64_t lo = std::min(n, per * t), hi = std::min(n, per * (t + 1));
    if (hi > lo) errs[t] = PopulateAndPoison(p + lo, hi - lo);
  };
  std::vector<std::thread> pool;
  unsigned t = 1;
  try {
    for (; t < nt; ++t) pool.emplace_back(piece, t);
  } catch (const std::system_error&) {
  }
  for (unsigned rest = t; rest < nt; ++rest) piece(rest);
  piece(0);
  for (auto& th : pool) th.join();
  for (int e : errs) {
    if (e != 0) return e;
  }
  return 0;
}

struct RecordOp {
  EventId event;
  std::uint64_t seq;
};
struct MemsetOp {
  void* dst;
  std::uint8_t value;
  std::uint64_t bytes;
};
struct WaitOp {  // until `seq` ops of stream `target` completed
  const void* target;
  std::uint64_t seq;
};
struct DecodeOp {
  DecoderId decoder;
  const DecodeSet* set;
  std::size_t first, count;
  const std::byte* src;
  std::byte* arena;
};
using Op = std::variant<Copy2D, MemsetOp, RecordOp, WaitOp, DecodeOp>;

// Jobs [first, first + count) of op.set, decoded on the CPU (codec::DecodeBlockBytes checks each
// block, its checksum included) and their kept values copied into the arena. A stream's decode
// table is built once for its run of jobs (a stream's jobs are consecutive).
Status ExecuteDecode(const DecodeOp& op) {
  std::vector<std::uint8_t> values;
  std::uint32_t lut_stream = ~0u;
  codec::DecodeLut lut{};
  for (std::size_t i = op.first; i < op.first + op.count; ++i) {
    const DecodeJob& j = op.set->jobs[i];
    const codec::StreamInfo& info = op.set->streams[j.stream];
    const std::uint32_t vb = ValueBytes(info);
    values.resize(std::uint64_t{j.values} * vb);
    if (j.stream != lut_stream && info.method == codec::Method::kHuffman) {
      lut = codec::BuildDecodeLut(info.code_lengths);
      lut_stream = j.stream;
    }
    const auto* block = reinterpret_cast<const std::uint8_t*>(op.src + j.src);
    HOIST_RETURN_IF_ERROR(codec::DecodeBlockBytes(info, lut, j.block, std::span(block, j.bytes),
                                                  values, op.set->names[j.stream]));
    ForEachKeptRun(j, vb, [&](std::uint64_t k0, std::uint64_t k1, std::uint64_t at) {
      std::memcpy(op.arena + at, values.data() + k0 * vb, (k1 - k0) * vb);
    });
  }
  return Status::Ok();
}

// A copy whose source is a mapped file (pageable and registered modes) is size-checked and
// guarded against SIGBUS (transport/reading/mapped_read.h): a file truncated under the load is an
// error.
Status Execute2D(const Copy2D& c) {
  return GuardedCopy(c.dst, c.dst_pitch, c.src, c.src_pitch, c.width, c.rows);
}

class HostDevice final : public Device {
 public:
  explicit HostDevice(std::uint64_t keep_staging_bytes) : kept_(keep_staging_bytes) {
    caps_.gpu = false;
    caps_.async_copy = true;
    caps_.copy_2d = true;
    caps_.register_host = true;
    caps_.register_read_only = true;
  }

  ~HostDevice() override {
    std::vector<StreamId> ids;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, s] : streams_) ids.push_back(id);
    }
    for (StreamId id : ids) (void)DestroyStream(id);
    for (auto& [p, a] : arenas_) Unmap(p, a);
    for (auto& [p, n] : staging_) FreeTouched(static_cast<std::byte*>(p), n);
    for (const HostBuffer& b : kept_.Trim()) FreeTouched(b.ptr, b.bytes);
  }

  std::string Name() const override { return "host"; }
  const DeviceCaps& Caps() const override { return caps_; }

  Result<DeviceBuffer> Allocate(std::uint64_t bytes) override {
    const std::uint64_t n = std::max<std::uint64_t>(bytes, 1);
    // More than the machine can hold would end in the OOM killer while populating: refuse it.
    if (const std::uint64_t avail = AvailableMemory(); avail > 0 && n > avail) {
      return Status::ResourceExhausted("host device: arena of " + std::to_string(bytes) +
                                       " bytes exceeds the memory available (" +
                                       std::to_string(avail) + " bytes: MemAvailable + SwapFree)");
    }
    // A memfd, so that the arena can be exported to another process (ExportArena); anonymous
    // private memory where memfds are unavailable.
    Arena a{n, Arena::kOwned, ::memfd_create("hoist-arena", MFD_CLOEXEC)};
    if (a.fd >= 0 && ::ftruncate(a.fd, static_cast<off_t>(n)) != 0) {
      ::close(a.fd);
      a.fd = -1;
    }
    // Reserve the memfd's memory now: a shortage is this error, not a SIGBUS on a later write.
    if (a.fd >= 0 && ::fallocate(a.fd, 0, 0, static_cast<off_t>(n)) != 0 && errno != EOPNOTSUPP) {
      const int err = errno;
      ::close(a.fd);
      return Status::ResourceExhausted("host device: arena of " + std::to_string(bytes) +
                                       " bytes: reserving its memory: " + std::strerror(err));
    }
    void* p = a.fd >= 0
                  ? ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0)
                  : ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      if (a.fd >= 0) ::close(a.fd);
      return Status::ResourceExhausted("host device: arena of " + std::to_string(bytes) +
                                       " bytes: " + std::strerror(err));
    }
    if (const int err = PoisonArena(static_cast<std::byte*>(p), n); err != 0) {
      ::munmap(p, n);
      if (a.fd >= 0) ::close(a.fd);
      return Status::ResourceExhausted("host device: arena of " + std::to_string(bytes) +
                                       " bytes: populating its pages: " + std::strerror(err));
    }
    std::lock_guard lock(mu_);
    arenas_[static_cast<std::byte*>(p)] = a;
    return DeviceBuffer{p, bytes};
  }

  Status Free(DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    Arena a;
    {
      std::lock_guard lock(mu_);
      auto it = arenas_.find(static_cast<std::byte*>(buffer.ptr));
      if (it == arenas_.end() || it->second.origin == Arena::kImported)
        return Status::InvalidArgument("host device: Free of an unknown arena");
      a = it->second;
      arenas_.erase(it);
    }
    Unmap(buffer.ptr, a);
    buffer = DeviceBuffer{};
    return Status::Ok();
  }

  Result<ArenaHandle> ExportArena(const DeviceBuffer& arena) override {
    std::lock_guard lock(mu_);
    auto it = arenas_.find(static_cast<std::byte*>(arena.ptr));
    if (it == arenas_.end() || it->second.origin != Arena::kOwned) {
      return Status::InvalidArgument("host device: ExportArena of an unknown arena");
    }
    if (it->second.fd < 0) {
      return Status::Unsupported("host device: this arena is not backed by a memfd");
    }
    ArenaHandle h;
    h.gpu = false;
    h.bytes = arena.bytes;
    h.fd = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
    if (h.fd < 0) {
      return Status::ResourceExhausted(std::string("host device: dup of the arena memfd: ") +
                                       std::strerror(errno));
    }
    return h;
  }

  Result<DeviceBuffer> ImportArena(const ArenaHandle& handle) override {
    if (handle.gpu) return Status::InvalidArgument("host device: cannot import a CUDA IPC handle");
    if (handle.fd < 0) return Status::InvalidArgument("host device: import without a memfd");
    struct stat st;
    if (::fstat(handle.fd, &st) != 0) {
      return Status::IoError(std::string("host device: fstat of the imported memfd: ") +
                             std::strerror(errno));
    }
    const std::uint64_t n = std::max<std::uint64_t>(handle.bytes, 1);
    if (handle.offset % 4096 != 0 || handle.offset > static_cast<std::uint64_t>(st.st_size) ||
        n > static_cast<std::uint64_t>(st.st_size) - handle.offset) {
      return Status::InvalidArgument(
          "host device: imported arena of " + std::to_string(handle.bytes) + " bytes at offset " +
          std::to_string(handle.offset) + " exceeds its memfd of " + std::to_string(st.st_size));
    }
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, handle.fd,
                     static_cast<off_t>(handle.offset));
    if (p == MAP_FAILED) {
      return Status::ResourceExhausted("host device: mapping an imported arena of " +
                                       std::to_string(n) + " bytes: " + std::strerror(errno));
    }
    std::lock_guard lock(mu_);
    arenas_[static_cast<std::byte*>(p)] = Arena{n, Arena::kImported, -1};
    return DeviceBuffer{p, handle.bytes};
  }

  Status CloseImported(DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    Arena a;
    {
      std::lock_guard lock(mu_);
      auto it = arenas_.find(static_cast<std::byte*>(buffer.ptr));
      if (it == arenas_.end() || it->second.origin != Arena::kImported) {
        return Status::InvalidArgument("host device: CloseImported of an arena not imported");
      }
      a = it->second;
      arenas_.erase(it);
    }
    Unmap(buffer.ptr, a);
    buffer = DeviceBuffer{};
    return Status::Ok();
  }

  Status AdoptArena(const DeviceBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::InvalidArgument("host device: adopting null");
    std::lock_guard lock(mu_);
    if (!arenas_
             .emplace(static_cast<std::byte*>(buffer.ptr),
                      Arena{std::max<std::uint64_t>(buffer.bytes, 1), Arena::kAdopted, -1})
             .second) {
      return Status::InvalidArgument("host device: arena adopted twice");
    }
    return Status::Ok();
  }

  Result<HostBuffer> AllocateStaging(std::uint64_t bytes, StagingKind kind) override {
    if (kind == StagingKind::kAuto) kind = StagingKind::kRegister;
    HostBuffer b{nullptr, bytes, kind};
    if (std::optional<HostBuffer> kept = kept_.Take(0, kind, bytes)) {
      b = *kept;
    } else {
      HOIST_ASSIGN_OR_RETURN(b.ptr, AllocTouched(bytes));
    }
    std::lock_guard lock(mu_);
    staging_[b.ptr] = bytes;
    return b;
  }

  Status FreeStaging(HostBuffer& buffer) override {
    if (buffer.ptr == nullptr) return Status::Ok();
    HostBuffer b = buffer;
    {
      std::lock_guard lock(mu_);
      auto it = staging_.find(buffer.ptr);
      if (it == staging_.end()) {
        return Status::InvalidArgument("host device: FreeStaging of unknown memory");
      }
      b.bytes = it->second;
      staging_.erase(it);
    }
    // Kept for a later request, unless it does not fit (a pool of 0 keeps nothing).
    for (const HostBuffer& evicted : kept_.Give(0, b)) FreeTouched(evicted.ptr, evicted.bytes);
    buffer = HostBuffer{};
    return Status::Ok();
  }

  std::uint64_t KeptStagingBytes() const override { return kept_.capacity_bytes(); }

  Status RegisterHost(const void* ptr, std::uint64_t bytes, bool) override {
    if (ptr == nullptr || bytes == 0) {
      return Status::InvalidArgument("host device: RegisterHost of an empty range");
    }
    std::lock_guard lock(mu_);
    if (!registered_.insert(ptr).second) {
      return Status::InvalidArgument("host device: memory registered twice");
    }
    return Status::Ok();
  }

  Status UnregisterHost(const void* ptr) override {
    std::lock_guard lock(mu_);
    if (registered_.erase(ptr) == 0) {
      return Status::InvalidArgument("host device: UnregisterHost of unregistered memory");
    }
    return Status::Ok();
  }

  Result<StreamId> CreateStream() override {
    std::lock_guard lock(mu_);
    StreamId id = next_stream_++;
    auto s = std::make_unique<Stream>();
    Stream* raw = s.get();
    streams_[id] = std::move(s);
    raw->thread = std::thread([this, raw] { Loop(raw); });
    return id;
  }

  Status DestroyStream(StreamId id) override {
    std::unique_ptr<Stream> s;
    {
      std::unique_lock lock(mu_);
      auto it = streams_.find(id);
      if (it == streams_.end()) return Status::InvalidArgument("host device: unknown stream");
      it->second->stop = true;
      it->second->cv.notify_all();
      s = std::move(it->second);
      streams_.erase(it);
    }
    s->thread.join();  // drains the queue first
    return Status::Ok();
  }

  Result<EventId> CreateEvent(bool) override {
    std::lock_guard lock(mu_);
    EventId id = next_event_++;
    events_[id] = Event{};
    return id;
  }

  Status DestroyEvent(EventId id) override {
    std::lock_guard lock(mu_);
    if (events_.erase(id) == 0) return Status::InvalidArgument("host device: unknown event");
    return Status::Ok();
  }

  Status CopyAsync(const Copy2D& op, StreamId stream) override {
    if (op.width == 0 || op.rows == 0) return Status::Ok();
    if (op.src == nullptr) return Status::InvalidArgument("host device: copy from null");
    std::lock_guard lock(mu_);
    HOIST_RETURN_IF_ERROR(CheckDst(op.dst, Extent(op.dst_pitch, op.width, op.rows)));
    return Enqueue(stream, op);
  }

  Status MemsetAsync(void* dst, std::uint8_t value, std::uint64_t bytes, StreamId stream) override {
    if (bytes == 0) return Status::Ok();
    std::lock_guard lock(mu_);
    HOIST_RETURN_IF_ERROR(CheckDst(dst, bytes));
    return Enqueue(stream, MemsetOp{dst, value, bytes});
  }

  Status Record(EventId event, StreamId stream) override {
    std::lock_guard lock(mu_);
    auto e = events_.find(event);
    auto s = streams_.find(stream);
    if (e == events_.end()) return Status::InvalidArgument("host device: Record of unknown event");
    if (s == streams_.end()) return Status::InvalidArgument("host device: unknown stream");
    Stream& st = *s->second;
    e->second.stream = st.self;
    e->second.seq = st.enqueued + 1;
    e->second.recorded = true;
    e->second.done = false;
    st.ops.push_back(RecordOp{event, e->second.seq});
    ++st.enqueued;
    st.cv.notify_all();
    return Status::Ok();
  }

  Status Wait(EventId event) override {
    std::unique_lock lock(mu_);
    auto e = events_.find(event);
    if (e == events_.end()) return Status::InvalidArgument("host device: Wait on unknown event");
    if (!e->second.recorded) return Status::Ok();
    Stream* st = e->second.stream;
    std::uint64_t seq = e->second.seq;
    st->cv.wait(lock, [&] { return st->done >= seq; });
    return st->error;
  }

  Result<bool> Query(EventId event) override {
    std::lock_guard lock(mu_);
    auto e = events_.find(event);
    if (e == events_.end()) return Status::InvalidArgument("host device: Query of unknown event");
    return !e->second.recorded || e->second.stream->done >= e->second.seq;
  }

  Result<double> Elapsed(EventId from, EventId to) override {
    std::lock_guard lock(mu_);
    auto a = events_.find(from), b = events_.find(to);
    if (a == events_.end() || b == events_.end()) {
      return Status::InvalidArgument("host device: Elapsed of unknown event");
    }
    if (!a->second.done || !b->second.done) {
      return Status::InvalidArgument("host device: Elapsed of an event not yet completed");
    }
    return std::chrono::duration<double>(b->second.when - a->second.when).count();
  }

  Status Synchronize(StreamId stream) override {
    std::unique_lock lock(mu_);
    auto s = streams_.find(stream);
    if (s == streams_.end()) return Status::InvalidArgument("host device: unknown stream");
    Stream* st = s->second.get();
    std::uint64_t target = st->enqueued;
    st->cv.wait(lock, [&] { return st->done >= target; });
    return st->error;
  }

  Status StreamWait(StreamId stream, EventId event) override {
    std::lock_guard lock(mu_);
    auto e = events_.find(event);
    if (e == events_.end()) return Status::InvalidArgument("host device: wait on unknown event");
    if (!e->second.recorded) return Status::Ok();
    return Enqueue(stream, WaitOp{e->second.stream, e->second.seq});
  }

  Result<DecoderId> CreateDecoder(const DecodeSet& set) override {
    std::lock_guard lock(mu_);
    const DecoderId id = next_decoder_++;
    decoders_[id] = Decoder{&set, Status::Ok()};
    return id;
  }

  Status DecodeAsync(DecoderId decoder, std::size_t first, std::size_t count, const void* src,
                     void* arena_base, StreamId stream) override {
    std::lock_guard lock(mu_);
    auto d = decoders_.find(decoder);
    if (d == decoders_.end()) return Status::InvalidArgument("host device: unknown decoder");
    const DecodeSet& set = *d->second.set;
    if (first > set.jobs.size() || count > set.jobs.size() - first || src == nullptr) {
      return Status::InvalidArgument("host device: decode jobs " + std::to_string(first) + "+" +
                                     std::to_string(count) + " of " +
                                     std::to_string(set.jobs.size()) + " (or a null source)");
    }
    auto* arena = static_cast<std::byte*>(arena_base);
    for (std::size_t i = first; i < first + count; ++i) {
      const DecodeJob& j = set.jobs[i];
      const std::uint64_t vb = ValueBytes(set.streams[j.stream]);
      HOIST_RETURN_IF_ERROR(CheckDst(arena + j.dst, Extent(j.dst_pitch, j.width * vb, j.rows)));
    }
    return Enqueue(
        stream, DecodeOp{decoder, &set, first, count, static_cast<const std::byte*>(src), arena});
  }

  Status DecoderStatus(DecoderId decoder) override {
    std::lock_guard lock(mu_);
    auto d = decoders_.find(decoder);
    if (d == decoders_.end()) return Status::InvalidArgument("host device: unknown decoder");
    return d->second.status;
  }

  Status DestroyDecoder(DecoderId decoder) override {
    std::lock_guard lock(mu_);
    if (decoders_.erase(decoder) == 0)
      return Status::InvalidArgument("host device: unknown decoder");
    return Status::Ok();
  }

  Status CopySync(const Copy2D& op) override {
    if (op.width == 0 || op.rows == 0) return Status::Ok();
    if (op.src == nullptr) return Status::InvalidArgument("host device: copy from null");
    {
      std::lock_guard lock(mu_);
      HOIST_RETURN_IF_ERROR(CheckDst(op.dst, Extent(op.dst_pitch, op.width, op.rows)));
    }
    return Execute2D(op);
  }

  Status TransposeInPlace(const Transpose& op) override {
    HOIST_ASSIGN_OR_RETURN(const std::uint64_t matrix, CheckTranspose(op));
    if (matrix == 0 || op.batch == 0) return Status::Ok();
    {
      std::lock_guard lock(mu_);
      HOIST_RETURN_IF_ERROR(CheckDst(op.base, matrix * op.batch));
    }
    std::vector<std::byte> scratch(matrix);
    auto* base = static_cast<std::byte*>(op.base);
    for (std::uint64_t b = 0; b < op.batch; ++b) {
      std::memcpy(scratch.data(), base + b * matrix, matrix);
      TransposeMatrix(scratch.data(), base + b * matrix, op.rows, op.cols, op.elem_bytes);
    }
    return Status::Ok();
  }

  Status CopyToHost(void* dst, const void* device_src, std::uint64_t bytes) override {
    if (bytes == 0) return Status::Ok();
    {
      std::lock_guard lock(mu_);
      HOIST_RETURN_IF_ERROR(CheckDst(const_cast<void*>(device_src), bytes));
    }
    std::memcpy(dst, device_src, bytes);
    return Status::Ok();
  }

 private:
  // An arena: memory this device mapped (owned, with its memfd when it has one), mapped from
  // another process's memfd (imported), or the caller's (adopted: never unmapped here).
  struct Arena {
    std::uint64_t bytes = 0;
    enum Origin { kOwned, kImported, kAdopted } origin = kOwned;
    int fd = -1;
  };

  static void Unmap(void* p, const Arena& a) {
    if (a.origin == Arena::kAdopted) return;
    ::munmap(p, a.bytes);
    if (a.fd >= 0) ::close(a.fd);
  }

  struct Stream {
    Stream* self = this;
    std::deque<Op> ops;
    std::uint64_t enqueued = 0;  // ops ever enqueued
    std::uint64_t done = 0;      // ops ever completed
    bool stop = false;
    Status error;  // the first failed op's; Wait and Synchronize on this stream return it
    std::condition_variable cv;
    std::thread thread;
  };
  struct Event {
    Stream* stream = nullptr;
    std::uint64_t seq = 0;
    bool recorded = false;
    bool done = false;
    Clock::time_point when{};
  };

  static std::uint64_t Extent(std::uint64_t pitch, std::uint64_t width, std::uint64_t rows) {
    if (rows <= 1) return width;
    std::uint64_t e = 0;
    if (__builtin_mul_overflow(rows - 1, pitch, &e) || __builtin_add_overflow(e, width, &e)) {
      return ~0ull;
    }
    return e;
  }

  // mu_ held.
  Status CheckDst(void* dst, std::uint64_t bytes) const {
    auto* p = static_cast<std::byte*>(dst);
    auto it = arenas_.upper_bound(p);
    if (it != arenas_.begin()) {
      --it;
      std::uint64_t off = static_cast<std::uint64_t>(p - it->first);
      const std::uint64_t n = it->second.bytes;
      if (p >= it->first && off <= n && bytes <= n - off) return Status::Ok();
    }
    return Status::InvalidArgument("host device: " + std::to_string(bytes) +
                                   "-byte access outside every arena");
  }

  // mu_ held.
  Status Enqueue(StreamId stream, Op op) {
    auto s = streams_.find(stream);
    if (s == streams_.end()) return Status::InvalidArgument("host device: unknown stream");
    s->second->ops.push_back(std::move(op));
    ++s->second->enqueued;
    s->second->cv.notify_all();
    return Status::Ok();
  }

  void Loop(Stream* st) {
    std::unique_lock lock(mu_);
    for (;;) {
      st->cv.wait(lock, [&] { return st->stop || !st->ops.empty(); });
      if (st->ops.empty()) return;  // stop requested and drained
      Op op = std::move(st->ops.front());
      st->ops.pop_front();
      if (auto* r = std::get_if<RecordOp>(&op)) {
        auto e = events_.find(r->event);
        if (e != events_.end() && e->second.seq == r->seq) {
          e->second.done = true;
          e->second.when = Clock::now();
        }
      } else if (auto* w = std::get_if<WaitOp>(&op)) {
        const auto* target = static_cast<const Stream*>(w->target);
        st->cv.notify_all();
        waits_.wait(lock, [&] { return target->done >= w->seq; });
      } else if (auto* d = std::get_if<DecodeOp>(&op)) {
        lock.unlock();
        Status s = ExecuteDecode(*d);
        lock.lock();
        auto it = decoders_.find(d->decoder);
        if (!s.ok() && it != decoders_.end() && it->second.status.ok()) it->second.status = s;
        if (!s.ok() && st->error.ok()) st->error = std::move(s);
      } else {
        lock.unlock();
        Status s;
        if (auto* c = std::get_if<Copy2D>(&op)) {
          s = Execute2D(*c);
        } else if (auto* m = std::get_if<MemsetOp>(&op)) {
          std::memset(m->dst, m->value, m->bytes);
        }
        lock.lock();
        if (!s.ok() && st->error.ok()) st->error = std::move(s);
      }
      ++st->done;
      st->cv.notify_all();
      waits_.notify_all();
    }
  }

  DeviceCaps caps_;
  mutable std::mutex mu_;
  std::map<std::byte*, Arena> arenas_;
  std::map<std::byte*, std::uint64_t> staging_;
  StagingPool kept_;  // freed staging kept for later requests (capacity 0: none)
  std::set<const void*> registered_;
  std::unordered_map<StreamId, std::unique_ptr<Stream>> streams_;
  std::unordered_map<EventId, Event> events_;
  struct Decoder {
    const DecodeSet* set;
    Status status;  // the first failed job's
  };
  std::unordered_map<DecoderId, Decoder> decoders_;
  DecoderId next_decoder_ = 1;
  // Notified whenever any stream completes an op: streams waiting for another one (StreamWait)
  // wait here. A stream must not be destroyed while another waits for it.
  std::condition_variable waits_;
  StreamId next_stream_ = 1;
  EventId next_event_ = 1;
};

}  // namespace

std::unique_ptr<Device> OpenHostDevice(std::uint64_t keep_staging_bytes) {
  return std::make_unique<HostDevice>(keep_staging_bytes);
}

}  // namespace hoist::transport
