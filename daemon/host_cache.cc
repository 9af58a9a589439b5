#include "daemon/host_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "transport/devices/decode_job.h"
#include "transport/packed/decoder_maker.h"
#include "transport/packed/packed.h"
#include "transport/staging/slot_plan.h"

namespace hoist::rank {

// A packed cache: slot q of the cut holds buffer bytes [base[q], base[q] + cut.seq_bytes[q]).
struct PackedCacheLayout {
  transport::SlotPlan cut;          // ops, seq_ops, seq_bytes, jobs, seq_jobs (pieces dropped)
  std::vector<std::uint64_t> base;  // per slot, plus the total at the end
  transport::DecodeSet decode;      // the work's streams with the cut's jobs (the decoder's)
  std::vector<proto::Fill> fills;
  std::uint64_t slot_bytes = 0, arena_bytes = 0, written_bytes = 0;
  std::uint64_t device_slot_bytes = 0;  // transport::DeviceSlotBytes(cut): one device slot
  int device_slots = 4;
  std::uint32_t rank = 0;
};

namespace {

using Clock = std::chrono::steady_clock;
using transport::Copy2D;
using transport::DeviceBuffer;
using transport::EventId;
using transport::SlotPiece;
using transport::StreamId;

// The plain kind's restore enqueues the copy in pieces this large (one stream: the DMA engine
// stays busy).
constexpr std::uint64_t kPiece = 256ull << 20;
// A packed capture reads at most this much per piece (the threads share the pieces).
constexpr std::uint64_t kReadChunk = 8ull << 20;
constexpr int kMaxReadThreads = 8;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The plan's files a cut reads, opened read-only once each; closed by the destructor.
class PlanFiles {
 public:
  explicit PlanFiles(const proto::LoadPlan& plan) : plan_(plan), fds_(plan.files_size(), -1) {}
  ~PlanFiles() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  PlanFiles(const PlanFiles&) = delete;
  PlanFiles& operator=(const PlanFiles&) = delete;

  Status Open(const std::vector<SlotPiece>& pieces) {
    for (const SlotPiece& p : pieces) {
      if (p.file >= fds_.size()) {
        return Status::Internal("host cache: a piece reads file " + std::to_string(p.file) +
                                " of " + std::to_string(fds_.size()));
      }
      if (fds_[p.file] >= 0) continue;
      fds_[p.file] = ::open(path(p.file).c_str(), O_RDONLY | O_CLOEXEC);
      if (fds_[p.file] < 0)
        return Status::IoError(path(p.file) + ": open: " + std::strerror(errno));
    }
    return Status::Ok();
  }
  int fd(std::uint32_t file) const { return fds_[file]; }
  const std::string& path(std::uint32_t file) const { return plan_.files(file).path(); }

 private:
  const proto::LoadPlan& plan_;
  std::vector<int> fds_;
};

Status PreadFull(int fd, const std::string& path, std::uint64_t offset, std::uint64_t n,
                 std::byte* dst) {
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, std::min<std::uint64_t>(n - done, 1ull << 30),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::IoError(path + ": read of " + std::to_string(n) + " bytes at offset " +
                             std::to_string(offset) + " failed at offset " +
                             std::to_string(offset + done) + ": " +
                             (got == 0 ? std::string("end of file") : std::strerror(errno)));
    }
    done += static_cast<std::uint64_t>(got);
  }
  return Status::Ok();
}

// One piece: rows of width from its file (src_pitch apart) packed at dst.
Status ReadPiece(const PlanFiles& files, const SlotPiece& p, std::byte* dst) {
  const int fd = files.fd(p.file);
  if (p.rows == 1 || p.src_pitch == p.width) {
    return PreadFull(fd, files.path(p.file), p.src, p.bytes(), dst);
  }
  for (std::uint64_t r = 0; r < p.rows; ++r) {
    HOIST_RETURN_IF_ERROR(
        PreadFull(fd, files.path(p.file), p.src + r * p.src_pitch, p.width, dst + r * p.width));
  }
  return Status::Ok();
}

// Every piece of the layout's cut into buf (slot q at base[q]), on up to `threads` threads that
// take pieces in turn; the first error stops them all.
Status ReadPieces(const PlanFiles& files, const PackedCacheLayout& l, std::byte* buf, int threads) {
  const std::vector<SlotPiece>& pieces = l.cut.pieces;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first;
  auto work = [&] {
    for (std::size_t i = next++; i < pieces.size() && !failed.load(); i = next++) {
      const SlotPiece& p = pieces[i];
      Status s = ReadPiece(files, p, buf + l.base[p.seq] + p.dst_off);
      if (s.ok()) continue;
      std::lock_guard lock(mu);
      if (first.ok()) first = std::move(s);
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  const std::size_t helpers = std::min<std::size_t>(std::max(threads, 1), pieces.size());
  for (std::size_t t = 1; t < helpers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer helpers: this thread reads the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

// The layout of `work`'s staged cut: slots back to back, the decode set the restore runs.
Result<std::unique_ptr<PackedCacheLayout>> Layout(const transport::PackedWork& work,
                                                  const proto::RankPlan& rank_plan,
                                                  const HostCacheOptions& o) {
  auto l = std::make_unique<PackedCacheLayout>();
  l->slot_bytes = std::max<std::uint64_t>({o.slot_bytes, work.decode.max_block_bytes, 1});
  l->device_slots = std::max(1, o.device_slots);
  l->cut = transport::CutStaged(work, l->slot_bytes, std::min(l->slot_bytes, kReadChunk));
  if (l->cut.jobs.size() != work.decode.jobs.size()) {
    return Status::Internal("host cache: the cut holds " + std::to_string(l->cut.jobs.size()) +
                            " of the plan's " + std::to_string(work.decode.jobs.size()) +
                            " decode jobs");
  }
  l->base.assign(1, 0);
  for (std::uint64_t b : l->cut.seq_bytes) l->base.push_back(l->base.back() + b);
  l->device_slot_bytes = transport::DeviceSlotBytes(l->cut);
  l->decode = work.decode.CopyTablesWith(l->cut.jobs);
  l->fills.assign(work.plan.fills().begin(), work.plan.fills().end());
  l->arena_bytes = rank_plan.arena_bytes();
  for (const proto::Copy& c : rank_plan.copies()) l->written_bytes += c.width() * c.rows();
  for (const proto::Fill& f : rank_plan.fills()) l->written_bytes += f.bytes();
  l->rank = rank_plan.rank();
  return l;
}

// One restore of a packed cache into `arena`: Setup creates the copy and decode streams, the
// events and the device slots, and starts making the decoder on a helper thread; Run enqueues
// the fills, each slot's stored bytes (cache -> arena) and its blocks (cache -> device slot, then
// decoded on the decode stream once there), and waits for both streams; Cleanup (always called)
// waits for both streams and the making before it destroys what Setup made, and returns the
// first error. The first device slots' blocks are copied while the decoder is made (uploading
// its jobs and tables takes milliseconds); their decodes wait for it (FlushWaiting).
class PackedRestore {
 public:
  PackedRestore(transport::Device& dev, const PackedCacheLayout& l, const std::byte* cache,
                const DeviceBuffer& arena)
      : dev_(dev), l_(l), cache_(cache), arena_(arena) {}

  Status Setup() {
    HOIST_ASSIGN_OR_RETURN(copy_, dev_.CreateStream());
    HOIST_ASSIGN_OR_RETURN(from_, NewEvent(true));
    HOIST_ASSIGN_OR_RETURN(to_, NewEvent(true));
    if (l_.decode.jobs.empty()) return Status::Ok();
    std::uint64_t decoding = 0;  // slots with jobs
    for (std::uint64_t q = 0; q < l_.cut.seqs(); ++q) {
      decoding += l_.cut.seq_jobs[q + 1] > l_.cut.seq_jobs[q] ? 1 : 0;
    }
    const int k = static_cast<int>(std::min<std::uint64_t>(l_.device_slots, decoding));
    HOIST_ASSIGN_OR_RETURN(decode_, dev_.CreateStream());
    HOIST_ASSIGN_OR_RETURN(slots_, dev_.Allocate(k * l_.device_slot_bytes));
    for (int i = 0; i < k; ++i) {
      HOIST_ASSIGN_OR_RETURN(EventId copied, NewEvent(false));
      HOIST_ASSIGN_OR_RETURN(EventId start, NewEvent(true));
      HOIST_ASSIGN_OR_RETURN(EventId end, NewEvent(true));
      ring_.push_back(Ring{copied, start, end, false});
    }
    decoder_.Start(dev_, l_.decode);
    return Status::Ok();
  }

  Status Run() {
    HOIST_RETURN_IF_ERROR(dev_.Record(from_, copy_));
    for (const proto::Fill& f : l_.fills) {
      if (f.bytes() == 0) continue;
      HOIST_RETURN_IF_ERROR(dev_.MemsetAsync(
          Arena(f.dst_offset()), static_cast<std::uint8_t>(f.value()), f.bytes(), copy_));
    }
    for (std::uint64_t q = 0; q < l_.cut.seqs(); ++q) HOIST_RETURN_IF_ERROR(SubmitSlot(q));
    HOIST_RETURN_IF_ERROR(FlushWaiting());
    HOIST_RETURN_IF_ERROR(dev_.Record(to_, copy_));
    HOIST_RETURN_IF_ERROR(dev_.Synchronize(copy_));
    if (decode_ >= 0) {
      HOIST_RETURN_IF_ERROR(dev_.Synchronize(decode_));
      HOIST_ASSIGN_OR_RETURN(transport::DecoderId decoder, decoder_.Get());
      HOIST_RETURN_IF_ERROR(dev_.DecoderStatus(decoder));
    }
    for (Ring& r : ring_) {
      if (r.busy) HOIST_RETURN_IF_ERROR(Collect(r));
    }
    HOIST_ASSIGN_OR_RETURN(dma_seconds_, dev_.Elapsed(from_, to_));
    return Status::Ok();
  }

  Status Cleanup() {
    Status s;
    auto keep = [&s](Status x) {
      if (s.ok() && !x.ok()) s = std::move(x);
    };
    if (copy_ >= 0) keep(dev_.Synchronize(copy_));
    if (decode_ >= 0) keep(dev_.Synchronize(decode_));
    keep(decoder_.Destroy());
    if (slots_.ptr != nullptr) keep(dev_.Free(slots_));
    for (EventId e : events_) keep(dev_.DestroyEvent(e));
    for (StreamId st : {copy_, decode_}) {
      if (st >= 0) keep(dev_.DestroyStream(st));
    }
    copy_ = decode_ = -1;
    events_.clear();
    return s;
  }

  double dma_seconds() const { return std::max(0.0, dma_seconds_); }
  double decode_seconds() const { return decode_seconds_; }

 private:
  struct Ring {  // one device slot
    EventId copied, start, end;
    bool busy;  // a decode was enqueued and not collected yet
  };
  struct Waiting {  // a decode not yet enqueued: device slot k, jobs [first, last)
    std::size_t k, first, last;
  };

  Result<EventId> NewEvent(bool timing) {
    HOIST_ASSIGN_OR_RETURN(EventId e, dev_.CreateEvent(timing));
    events_.push_back(e);
    return e;
  }
  std::byte* Arena(std::uint64_t off) const { return static_cast<std::byte*>(arena_.ptr) + off; }

  // Slot q: its stored bytes straight into the arena (one batch, Device::CopyBatchAsync), then
  // its blocks to a device slot.
  Status SubmitSlot(std::uint64_t q) {
    const std::byte* slot = cache_ + l_.base[q];
    batch_.clear();
    for (std::size_t i = l_.cut.seq_ops[q]; i < l_.cut.seq_ops[q + 1]; ++i) {
      batch_.push_back(transport::SlotOpCopy(l_.cut.ops[i], slot, arena_.ptr));
    }
    HOIST_RETURN_IF_ERROR(dev_.CopyBatchAsync(batch_, copy_));
    const std::size_t first = l_.cut.seq_jobs[q], last = l_.cut.seq_jobs[q + 1];
    return first < last ? SubmitDecode(slot, first, last) : Status::Ok();
  }

  // Enqueues the decodes that wait for the decoder (waiting for it first): each once its device
  // slot's blocks are there.
  Status FlushWaiting() {
    if (waiting_.empty()) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(transport::DecoderId decoder, decoder_.Get());
    for (const Waiting& w : waiting_) {
      Ring& r = ring_[w.k];
      std::byte* dslot = static_cast<std::byte*>(slots_.ptr) + w.k * l_.device_slot_bytes;
      HOIST_RETURN_IF_ERROR(dev_.StreamWait(decode_, r.copied));
      HOIST_RETURN_IF_ERROR(dev_.Record(r.start, decode_));
      HOIST_RETURN_IF_ERROR(
          dev_.DecodeAsync(decoder, w.first, w.last - w.first, dslot, arena_.ptr, decode_));
      HOIST_RETURN_IF_ERROR(dev_.Record(r.end, decode_));
      r.busy = true;
    }
    waiting_.clear();
    return Status::Ok();
  }

  // Jobs [first, last) of a slot whose bytes start at `slot`: its blocks (one run) into the next
  // device slot once that slot's previous decode is done, then decoded there on the decode stream
  // (once the decoder is made: until then the decodes wait, and the copies go on while device
  // slots last).
  Status SubmitDecode(const std::byte* slot, std::size_t first, std::size_t last) {
    const std::size_t n = next_++;
    const std::size_t k = n % ring_.size();
    Ring& r = ring_[k];
    if (n >= ring_.size()) HOIST_RETURN_IF_ERROR(FlushWaiting());  // slot k's decode enqueued
    if (r.busy) HOIST_RETURN_IF_ERROR(Collect(r));
    const std::uint64_t lo = l_.cut.jobs[first].src;
    const std::uint64_t hi = l_.cut.jobs[last - 1].src + l_.cut.jobs[last - 1].bytes;
    std::byte* dslot = static_cast<std::byte*>(slots_.ptr) + k * l_.device_slot_bytes;
    Copy2D c;
    c.dst = dslot + lo;
    c.src = slot + lo;
    c.width = hi - lo;
    HOIST_RETURN_IF_ERROR(dev_.CopyAsync(c, copy_));
    HOIST_RETURN_IF_ERROR(dev_.Record(r.copied, copy_));
    waiting_.push_back(Waiting{k, first, last});
    return decoder_.Ready() ? FlushWaiting() : Status::Ok();
  }

  // Waits for a device slot's decode and adds its time.
  Status Collect(Ring& r) {
    HOIST_RETURN_IF_ERROR(dev_.Wait(r.end));
    HOIST_ASSIGN_OR_RETURN(double s, dev_.Elapsed(r.start, r.end));
    decode_seconds_ += std::max(0.0, s);
    r.busy = false;
    return Status::Ok();
  }

  transport::Device& dev_;
  const PackedCacheLayout& l_;
  const std::byte* cache_;
  DeviceBuffer arena_;
  StreamId copy_ = -1, decode_ = -1;
  transport::DecoderMaker decoder_;  // started by Setup when there is anything to decode
  DeviceBuffer slots_;
  EventId from_ = -1, to_ = -1;
  std::vector<EventId> events_;
  std::vector<Ring> ring_;
  std::size_t next_ = 0;          // decoding slots submitted
  std::vector<Waiting> waiting_;  // in submit order
  std::vector<Copy2D> batch_;     // the slot being submitted's stored bytes (SubmitSlot)
  double dma_seconds_ = 0, decode_seconds_ = 0;
};

}  // namespace

HostCache::HostCache(transport::Device& device, transport::HostBuffer buffer)
    : device_(device), buffer_(buffer) {}

HostCache::~HostCache() {
  transport::HostBuffer b = buffer_;
  b.bytes = std::max<std::uint64_t>(b.bytes, 1);
  (void)device_.FreeStaging(b);
}

std::uint64_t HostCache::slots() const { return packed_ ? packed_->cut.seqs() : 0; }

Result<std::unique_ptr<HostCache>> HostCache::Capture(transport::Device& device,
                                                      const transport::DeviceBuffer& arena) {
  // Touched + registered memory: restores from it ran at the same 48.0 GiB/s as from
  // cudaMallocHost memory on the H200 box (docs/BENCHMARKS.md), and it is ten times cheaper to set
  // up.
  HOIST_ASSIGN_OR_RETURN(transport::HostBuffer buffer,
                         device.AllocateStaging(std::max<std::uint64_t>(arena.bytes, 1),
                                                transport::StagingKind::kRegister));
  std::unique_ptr<HostCache> cache(new HostCache(device, buffer));
  cache->buffer_.bytes = arena.bytes;
  Status s = device.CopyToHost(buffer.ptr, arena.ptr, arena.bytes);
  if (!s.ok())
    return s.Annotate("host cache: copying the " + std::to_string(arena.bytes) +
                      "-byte arena to pinned memory");
  return cache;
}

Result<std::unique_ptr<HostCache>> HostCache::Capture(transport::Device& device,
                                                      const transport::DeviceBuffer& arena,
                                                      const proto::LoadPlan& plan,
                                                      const proto::RankPlan& rank_plan,
                                                      const HostCacheOptions& options) {
  if (plan.packed_size() == 0) return Capture(device, arena);
  return CapturePacked(device, plan, rank_plan, options);
}

Result<std::unique_ptr<HostCache>> HostCache::CapturePacked(transport::Device& device,
                                                            const proto::LoadPlan& plan,
                                                            const proto::RankPlan& rank_plan,
                                                            const HostCacheOptions& options) {
  HOIST_ASSIGN_OR_RETURN(const transport::PackedStreams streams,
                         transport::PackedStreams::FromPlan(plan));
  HOIST_ASSIGN_OR_RETURN(const transport::PackedWork work, streams.Translate(rank_plan));
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<PackedCacheLayout> layout,
                         Layout(work, rank_plan, options));
  const std::uint64_t total = layout->base.back();
  HOIST_ASSIGN_OR_RETURN(
      transport::HostBuffer buffer,
      device.AllocateStaging(std::max<std::uint64_t>(total, 1), transport::StagingKind::kRegister));
  std::unique_ptr<HostCache> cache(new HostCache(device, buffer));
  cache->buffer_.bytes = total;
  const int threads =
      options.read_threads > 0
          ? options.read_threads
          : std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kMaxReadThreads);
  PlanFiles files(plan);
  Status s = files.Open(layout->cut.pieces);
  if (s.ok()) s = ReadPieces(files, *layout, buffer.ptr, threads);
  if (!s.ok()) {
    return s.Annotate("host cache: reading rank " + std::to_string(rank_plan.rank()) + "'s " +
                      std::to_string(total) + " packed bytes");
  }
  layout->cut.pieces = {};  // read: only the restore's parts stay
  layout->cut.tasks = {};
  cache->packed_ = std::move(layout);
  return cache;
}

std::uint64_t HostCache::arena_bytes() const {
  return packed_ ? packed_->arena_bytes : buffer_.bytes;
}

Result<transport::DeviceBuffer> HostCache::AllocateArena() {
  Result<DeviceBuffer> arena = device_.Allocate(arena_bytes());
  if (!arena.ok()) {
    return Status(arena.status())
        .Annotate("host cache: allocating the " + std::to_string(arena_bytes()) +
                  "-byte arena to restore");
  }
  return *arena;
}

Result<transport::DeviceBuffer> HostCache::Restore(RestoreTiming* timing) {
  const Clock::time_point a = Clock::now();
  HOIST_ASSIGN_OR_RETURN(transport::DeviceBuffer arena, AllocateArena());
  const double alloc_seconds = Since(a);
  if (Status s = Fill(arena, timing); !s.ok()) {
    (void)device_.Free(arena);
    return s;
  }
  if (timing != nullptr) timing->alloc_seconds = alloc_seconds;
  return arena;
}

Status HostCache::Fill(const transport::DeviceBuffer& arena, RestoreTiming* timing) {
  if (arena.bytes < arena_bytes()) {
    return Status::InvalidArgument("host cache: an arena of " + std::to_string(arena.bytes) +
                                   " bytes cannot hold the " + std::to_string(arena_bytes()) +
                                   " the cache restores");
  }
  if (packed_) return FillPacked(arena, timing);
  const Clock::time_point b = Clock::now();
  double dma_seconds = 0;
  Status s = CopyIn(arena, &dma_seconds);
  if (!s.ok())
    return s.Annotate("host cache: restoring " + std::to_string(buffer_.bytes) + " bytes");
  if (timing != nullptr) {
    *timing = RestoreTiming{};
    timing->bytes = timing->moved_bytes = buffer_.bytes;
    timing->seconds = Since(b);
    timing->dma_seconds = dma_seconds;
  }
  return Status::Ok();
}

Status HostCache::FillPacked(const transport::DeviceBuffer& arena, RestoreTiming* timing) {
  const PackedCacheLayout& l = *packed_;
  const std::string what = "host cache: restoring rank " + std::to_string(l.rank) + "'s " +
                           std::to_string(l.written_bytes) + " bytes from " +
                           std::to_string(buffer_.bytes) + " packed bytes";
  const Clock::time_point b = Clock::now();  // the restore's own set-up counts from here
  PackedRestore r(device_, l, buffer_.ptr, arena);
  Status s = r.Setup();
  if (s.ok()) s = r.Run();
  Status cleanup = r.Cleanup();
  if (s.ok()) s = cleanup;
  const double seconds = Since(b);
  if (!s.ok()) return s.Annotate(what);
  if (timing != nullptr) {
    *timing = RestoreTiming{};
    timing->bytes = l.written_bytes;
    timing->moved_bytes = buffer_.bytes;
    timing->seconds = seconds;
    timing->dma_seconds = r.dma_seconds();
    timing->decode_seconds = r.decode_seconds();
  }
  return Status::Ok();
}

// The cache into `arena` on a new stream, between two timing events (*dma_seconds: their
// distance). The first error wins; the stream and events are destroyed in every case.
// Measured on the H200 box (docs/BENCHMARKS.md, 2026-11-30): the first copy into device memory
// allocated after a free runs at 46-48 GiB/s where later copies into it, and copies into a first
// allocation, run at 51.6; writing the new arena with a device memset first (2 ms) does not
// change that, so the restore does not pay for it.
Status HostCache::CopyIn(const transport::DeviceBuffer& arena, double* dma_seconds) {
  HOIST_ASSIGN_OR_RETURN(transport::StreamId stream, device_.CreateStream());
  Result<transport::EventId> from = device_.CreateEvent(true);
  Result<transport::EventId> to = device_.CreateEvent(true);
  Status status = !from.ok() ? from.status() : to.status();
  if (status.ok()) status = device_.Record(*from, stream);
  for (std::uint64_t off = 0; off < buffer_.bytes && status.ok(); off += kPiece) {
    transport::Copy2D op;
    op.dst = static_cast<std::byte*>(arena.ptr) + off;
    op.src = buffer_.ptr + off;
    op.width = std::min(kPiece, buffer_.bytes - off);
    status = device_.CopyAsync(op, stream);
  }
  if (status.ok()) status = device_.Record(*to, stream);
  Status sync = device_.Synchronize(stream);
  if (status.ok()) status = sync;
  if (status.ok()) {
    Result<double> elapsed = device_.Elapsed(*from, *to);
    if (elapsed.ok()) *dma_seconds = *elapsed;
    status = elapsed.status();
  }
  for (const Result<transport::EventId>* e : {&from, &to}) {
    if (e->ok()) (void)device_.DestroyEvent(**e);
  }
  Status destroy = device_.DestroyStream(stream);
  return status.ok() ? destroy : status;
}

}  // namespace hoist::rank
