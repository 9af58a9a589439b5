#include "transport/reading/source.h"

#include <fcntl.h>
#include <linux/aio_abi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "transport/reading/mapped_read.h"
#include "transport/reading/page_cache.h"
#include "util/file_kind.h"

namespace hoist::transport {
namespace {

using reading_internal::BlockResident;
using reading_internal::Fd;
using reading_internal::FdResident;
using reading_internal::MincoreRange;
using reading_internal::OpenAndStat;
using reading_internal::PageBytes;

std::string Errno(int err) { return std::strerror(err); }

// Mapped reads spanning at least this many bytes release their pages once copied (MmapSource):
// smaller ones (norms, biases) would cost a system call each for a page or two of RSS.
constexpr std::uint64_t kReleaseMinBytes = 64u << 10;

std::string ReadContext(const std::string& path, std::uint64_t offset, std::uint64_t n) {
  return path + ": read of " + std::to_string(n) + " bytes at offset " + std::to_string(offset);
}

// Checks [offset, offset + n) against the file size without overflowing.
Status CheckRange(const std::string& path, std::uint64_t size, std::uint64_t offset,
                  std::uint64_t n) {
  if (offset > size || n > size - offset) {
    return Status::Corrupt(ReadContext(path, offset, n) + ": past the end of the file (" +
                           std::to_string(size) + " bytes)");
  }
  return Status::Ok();
}

// Every row of a strided read (non-empty) lies inside the file, without overflow.
Status CheckRows(const std::string& path, std::uint64_t size, const RowsRead& r) {
  std::uint64_t last = 0;
  if (__builtin_mul_overflow(r.rows - 1, r.src_pitch, &last) ||
      __builtin_add_overflow(last, r.offset, &last)) {
    return Status::Corrupt(path + ": strided read overflows at offset " + std::to_string(r.offset));
  }
  return CheckRange(path, size, last, r.width);
}

// pread until n bytes arrive; EINTR and partial reads are retried, 0 before n is an error.
Status PreadFull(int fd, const std::string& path, std::uint64_t offset, std::byte* dst,
                 std::uint64_t n) {
  std::uint64_t done = 0;
  while (done < n) {
    std::uint64_t want = std::min<std::uint64_t>(n - done, 1ull << 30);
    ssize_t got = ::pread(fd, dst + done, want, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(ReadContext(path, offset, n) + ": at offset " +
                             std::to_string(offset + done) + ": " + Errno(errno));
    }
    if (got == 0) {
      return Status::IoError(ReadContext(path, offset, n) + ": unexpected end of file at offset " +
                             std::to_string(offset + done));
    }
    done += static_cast<std::uint64_t>(got);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
class BufferedSource final : public Source {
 public:
  BufferedSource(std::string path, Fd fd, std::uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}
  const std::string& path() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  std::string_view kind() const override { return "buffered"; }
  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    HOIST_RETURN_IF_ERROR(CheckRange(path_, size_, offset, n));
    return PreadFull(fd_.get(), path_, offset, static_cast<std::byte*>(dst), n);
  }
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    return FdResident(fd_.get(), size_, b);
  }

 private:
  std::string path_;
  Fd fd_;
  std::uint64_t size_;
};

// ---------------------------------------------------------------------------------------------
class MmapSource final : public Source {
 public:
  MmapSource(std::string path, Fd fd, std::byte* map, std::uint64_t size, bool release)
      : path_(std::move(path)), fd_(std::move(fd)), map_(map), size_(size), release_(release) {
    registration_ = MappingRegistration(Range());
  }
  ~MmapSource() override {
    registration_ = MappingRegistration();
    if (map_ != nullptr) ::munmap(map_, size_);
  }
  const std::string& path() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  std::string_view kind() const override { return "mmap"; }
  const std::byte* mapping() const override { return map_; }
  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    HOIST_RETURN_IF_ERROR(CheckRange(path_, size_, offset, n));
    RowsRead r{offset, n, n, 1, static_cast<std::byte*>(dst), n};
    return ReadMany(&r, n > 0 ? 1 : 0);
  }
  Status ReadRows(const RowsRead& r) override { return ReadMany(&r, 1); }
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    if (std::optional<std::uint64_t> n = FdResident(fd_.get(), size_, b)) return n;
    return BlockResident(size_, b, [this](std::uint64_t off, std::uint64_t n) {
      return MincoreRange(map_, off, n);
    });
  }
  Status ReadMany(const RowsRead* reads, std::size_t n) override {
    for (std::size_t k = 0; k < n; ++k) {
      if (reads[k].rows > 0 && reads[k].width > 0) {
        HOIST_RETURN_IF_ERROR(CheckRows(path_, size_, reads[k]));
      }
    }
    HOIST_RETURN_IF_ERROR(CopyFromMappingBatch(Range(), reads, n));
    if (release_) {
      for (std::size_t k = 0; k < n; ++k) Release(reads[k]);
    }
    return Status::Ok();
  }

 private:
  MappedRange Range() const { return MappedRange{map_, size_, &path_, fd_.get()}; }

  // Drops this process's page-table entries for the pages a read spanned (rounded out to whole
  // pages) once its bytes are copied: the page cache keeps the data, the process's RSS stops
  // counting it. Pages another thread still reads are simply faulted in again.
  void Release(const RowsRead& r) const {
    if (r.rows == 0 || r.width == 0) return;
    const std::uint64_t end = r.offset + (r.rows - 1) * r.src_pitch + r.width;
    if (end - r.offset < kReleaseMinBytes) return;
    const std::uint64_t page = PageBytes();
    const std::uint64_t lo = r.offset / page * page;
    const std::uint64_t hi = (end + page - 1) / page * page;
    ::madvise(map_ + lo, hi - lo, MADV_DONTNEED);  // best effort: only RSS depends on it
  }

  std::string path_;
  Fd fd_;  // kept open: the size checks of mapped reads fstat it
  std::byte* map_;
  std::uint64_t size_;
  MappingRegistration registration_;
  bool release_ = false;  // drop page-table entries once copied (host-memory loads: RSS)
};

// ---------------------------------------------------------------------------------------------
// The mmap source made on first use (OpenMmapSourceLazily).
class LazyMmapSource final : public Source {
 public:
  LazyMmapSource(std::string path, std::uint64_t size, bool release)
      : path_(std::move(path)), size_(size), release_(release) {}
  const std::string& path() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  std::string_view kind() const override { return "mmap"; }
  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    HOIST_ASSIGN_OR_RETURN(Source * s, Open());
    return s->ReadAt(offset, dst, n);
  }
  Status ReadRows(const RowsRead& r) override {
    HOIST_ASSIGN_OR_RETURN(Source * s, Open());
    return s->ReadRows(r);
  }
  Status ReadMany(const RowsRead* reads, std::size_t n) override {
    HOIST_ASSIGN_OR_RETURN(Source * s, Open());
    return s->ReadMany(reads, n);
  }
  const std::byte* mapping() const override {
    Result<Source*> s = Open();
    return s.ok() ? (*s)->mapping() : nullptr;
  }
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    Result<Source*> s = Open();
    return s.ok() ? (*s)->ResidentNow(b) : std::nullopt;
  }

 private:
  Result<Source*> Open() const {
    std::call_once(once_, [this] {
      Result<std::unique_ptr<Source>> r = OpenMmapSource(path_, release_);
      if (r.ok()) {
        inner_ = std::move(*r);
      } else {
        error_ = r.status();
      }
    });
    if (inner_ == nullptr) return error_;
    return inner_.get();
  }

  std::string path_;
  std::uint64_t size_;
  bool release_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<Source> inner_;  // set once, by the first use
  mutable Status error_;                   // the failure to map, when there was one
};

// ---------------------------------------------------------------------------------------------
// O_DIRECT through Linux native AIO (raw syscalls: no libaio needed).

long SysIoSetup(unsigned nr, aio_context_t* ctx) { return ::syscall(SYS_io_setup, nr, ctx); }
long SysIoDestroy(aio_context_t ctx) { return ::syscall(SYS_io_destroy, ctx); }
long SysIoSubmit(aio_context_t ctx, long n, struct iocb** iocbs) {
  return ::syscall(SYS_io_submit, ctx, n, iocbs);
}
long SysIoGetevents(aio_context_t ctx, long min_nr, long nr, struct io_event* events) {
  return ::syscall(SYS_io_getevents, ctx, min_nr, nr, events, nullptr);
}

constexpr int kMaxDepth = 64;

// AIO contexts with nothing in flight, kept for the next thread. io_destroy waits for an RCU
// grace period (33-85 ms measured on a 2-core VM, kernel 6.1), and a fill thread's context went
// at its exit, which its load's join waited for: a load that read any byte with O_DIRECT paid
// that at its end. Kept contexts are taken by later threads (of this load or the next) and torn
// down by the kernel when the process exits. Never destroyed (threads may exit after statics).
class AioPool {
 public:
  static AioPool& Get() {
    static AioPool* pool = new AioPool();
    return *pool;
  }
  // A kept context of this process: a forked child inherits the list but not the contexts
  // (they belong to the parent's address space), so those are dropped, never used.
  bool Take(aio_context_t* ctx) {
    const pid_t pid = ::getpid();
    std::lock_guard lock(mu_);
    while (!kept_.empty()) {
      const Kept k = kept_.back();
      kept_.pop_back();
      if (k.pid != pid) continue;
      *ctx = k.ctx;
      return true;
    }
    return false;
  }
  void Give(aio_context_t ctx) {
    std::lock_guard lock(mu_);
    kept_.push_back(Kept{ctx, ::getpid()});
  }
  std::size_t size() const {
    std::lock_guard lock(mu_);
    return kept_.size();
  }

 private:
  struct Kept {
    aio_context_t ctx;
    pid_t pid;  // the process whose context it is
  };
  mutable std::mutex mu_;
  std::vector<Kept> kept_;  // each with no request in flight
};

// Per-thread AIO context and bounce buffers, reused across calls and sources.
struct DirectThreadState {
  aio_context_t ctx = 0;
  bool aio_ok = false;
  bool aio_tried = false;
  bool aio_clean = true;  // false once a request may be left in flight (io_getevents failed)
  pid_t aio_owner = 0;  // the process whose context ctx is (a forked thread inherits its parent's)
  std::uint64_t buf_bytes = 0;
  std::uint64_t buf_align = 0;
  std::vector<std::byte*> bufs;

  ~DirectThreadState() {
    // Another process's context (this thread forked) is neither ours to keep nor to destroy.
    if (aio_ok && aio_owner == ::getpid()) {
      if (aio_clean) {
        AioPool::Get().Give(ctx);
      } else {
        SysIoDestroy(ctx);  // waits for what is in flight before the buffers go
      }
    }
    for (std::byte* b : bufs) std::free(b);
  }
  bool EnsureAio() {
    const pid_t pid = ::getpid();
    if (aio_ok && aio_owner != pid) aio_tried = aio_ok = false;  // forked: make or take our own
    if (!aio_tried) {
      aio_tried = true;
      aio_ok = AioPool::Get().Take(&ctx) || SysIoSetup(kMaxDepth, &ctx) == 0;
      aio_owner = pid;
      aio_clean = true;
    }
    return aio_ok;
  }
  bool EnsureBuffers(int n, std::uint64_t bytes, std::uint64_t align) {
    if (bytes > buf_bytes || align > buf_align) {
      for (std::byte* b : bufs) std::free(b);
      bufs.clear();
      buf_bytes = bytes;
      buf_align = align;
    }
    while (static_cast<int>(bufs.size()) < n) {
      void* p = std::aligned_alloc(buf_align, buf_bytes);
      if (p == nullptr) return false;
      bufs.push_back(static_cast<std::byte*>(p));
    }
    return true;
  }
};

DirectThreadState& ThreadState() {
  thread_local DirectThreadState state;
  return state;
}

struct Extent {
  std::uint64_t offset;
  std::uint64_t len;
  std::byte* dst;
};

class DirectSource final : public Source {
 public:
  DirectSource(std::string path, Fd fd, std::uint64_t size, const DirectOptions& o)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size), o_(o) {}
  const std::string& path() const override { return path_; }
  std::uint64_t size() const override { return size_; }
  std::string_view kind() const override { return "direct"; }
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    return FdResident(fd_.get(), size_, b);
  }

  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    HOIST_RETURN_IF_ERROR(CheckRange(path_, size_, offset, n));
    if (n == 0) return Status::Ok();
    Extent e{offset, n, static_cast<std::byte*>(dst)};
    return ReadExtents(&e, 1);
  }

  Status ReadRows(const RowsRead& r) override {
    if (r.rows == 0 || r.width == 0) return Status::Ok();
    HOIST_RETURN_IF_ERROR(CheckRows(path_, size_, r));
    if (r.rows == 1 || (r.src_pitch == r.width && r.dst_pitch == r.width)) {
      Extent e{r.offset, r.width * r.rows, r.dst};
      return ReadExtents(&e, 1);
    }
    return ReadMany(&r, 1);
  }

  Status ReadMany(const RowsRead* reads, std::size_t n) override {
    std::vector<Extent> ex;
    for (std::size_t k = 0; k < n; ++k) {
      const RowsRead& r = reads[k];
      if (r.rows == 0 || r.width == 0) continue;
      HOIST_RETURN_IF_ERROR(CheckRows(path_, size_, r));
      if (r.rows == 1 || (r.src_pitch == r.width && r.dst_pitch == r.width)) {
        ex.push_back(Extent{r.offset, r.width * r.rows, r.dst});
        continue;
      }
      for (std::uint64_t i = 0; i < r.rows; ++i) {
        ex.push_back(Extent{r.offset + i * r.src_pitch, r.width, r.dst + i * r.dst_pitch});
      }
    }
    if (ex.empty()) return Status::Ok();
    bool sorted = true;
    for (std::size_t k = 1; k < ex.size() && sorted; ++k) {
      sorted = ex[k].offset >= ex[k - 1].offset + ex[k - 1].len;
    }
    if (!sorted) {
      std::sort(ex.begin(), ex.end(),
                [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
      for (std::size_t k = 1; k < ex.size(); ++k) {
        if (ex[k].offset < ex[k - 1].offset + ex[k - 1].len) {
          // Overlapping source bytes (e.g. a replicated range read twice): one extent at a time.
          for (const Extent& e : ex) HOIST_RETURN_IF_ERROR(ReadExtents(&e, 1));
          return Status::Ok();
        }
      }
    }
    return ReadExtents(ex.data(), ex.size());
  }

 private:
  struct Request {
    std::uint64_t a = 0, b = 0;     // aligned file range
    std::uint64_t need = 0;         // bytes from a that must arrive (the rest may be past EOF)
    std::size_t first = 0;          // first extent that may intersect [a, b)
    std::byte* in_place = nullptr;  // non-null: read straight into the caller's memory
  };

  // Extents are sorted by offset and do not overlap.
  Status ReadExtents(const Extent* ex, std::size_t n) {
    const std::uint64_t al = o_.alignment;
    const std::uint64_t req = std::max(al, o_.request_bytes / al * al);
    std::vector<Request> reqs;
    // Merge extents into spans (gaps up to max_gap are read and dropped), chop spans into
    // aligned requests.
    std::size_t i = 0;
    while (i < n) {
      std::size_t j = i;
      std::uint64_t end = ex[i].offset + ex[i].len;
      while (j + 1 < n && ex[j + 1].offset >= end && ex[j + 1].offset - end <= o_.max_gap) {
        ++j;
        end = ex[j].offset + ex[j].len;
      }
      std::uint64_t a = ex[i].offset / al * al;
      std::uint64_t stop = (end + al - 1) / al * al;
      std::size_t first = i;
      while (a < stop) {
        Request r;
        r.a = a;
        r.b = std::min(stop, a + req);
        r.need = std::min(r.b, end) - a;
        while (first <= j && ex[first].offset + ex[first].len <= r.a) ++first;
        r.first = first;
        // In place: the request lies inside one extent whose destination shares the alignment.
        if (first <= j) {
          const Extent& e = ex[first];
          if (e.offset <= r.a && r.b <= e.offset + e.len &&
              reinterpret_cast<std::uintptr_t>(e.dst + (r.a - e.offset)) % al == 0) {
            r.in_place = e.dst + (r.a - e.offset);
          }
        }
        reqs.push_back(r);
        a = r.b;
      }
      i = j + 1;
    }
    return Run(reqs, ex, n, req);
  }

  void Scatter(const Request& r, const std::byte* buf, const Extent* ex, std::size_t n) const {
    for (std::size_t k = r.first; k < n && ex[k].offset < r.b; ++k) {
      std::uint64_t lo = std::max(r.a, ex[k].offset);
      std::uint64_t hi = std::min(r.b, ex[k].offset + ex[k].len);
      if (lo < hi) std::memcpy(ex[k].dst + (lo - ex[k].offset), buf + (lo - r.a), hi - lo);
    }
  }

  Status ShortRead(const Request& r, std::int64_t res) const {
    if (res < 0) {
      return Status::IoError(ReadContext(path_, r.a, r.b - r.a) +
                             " (O_DIRECT): " + Errno(static_cast<int>(-res)));
    }
    return Status::IoError(ReadContext(path_, r.a, r.b - r.a) + " (O_DIRECT): got " +
                           std::to_string(res) + " bytes, needed " + std::to_string(r.need) +
                           " (short read)");
  }

  // Without native AIO: one synchronous request at a time, through the first bounce buffer.
  Status RunSync(const std::vector<Request>& reqs, const Extent* ex, std::size_t n,
                 DirectThreadState& st) const {
    for (const Request& r : reqs) {
      std::byte* buf = r.in_place ? r.in_place : st.bufs[0];
      ssize_t got;
      do {
        got = ::pread(fd_.get(), buf, r.b - r.a, static_cast<off_t>(r.a));
      } while (got < 0 && errno == EINTR);
      if (got < 0) return ShortRead(r, -errno);
      if (static_cast<std::uint64_t>(got) < r.need) return ShortRead(r, got);
      if (!r.in_place) Scatter(r, buf, ex, n);
    }
    return Status::Ok();
  }

  Status Run(const std::vector<Request>& reqs, const Extent* ex, std::size_t n,
             std::uint64_t req_bytes) {
    DirectThreadState& st = ThreadState();
    const int depth = std::clamp(o_.depth, 1, kMaxDepth);
    if (!st.EnsureBuffers(depth, req_bytes, o_.alignment)) {
      return Status::ResourceExhausted(path_ + ": O_DIRECT bounce buffers of " +
                                       std::to_string(req_bytes) + " bytes");
    }
    if (!st.EnsureAio()) return RunSync(reqs, ex, n, st);
    std::array<struct iocb, kMaxDepth> cbs{};
    std::array<int, kMaxDepth> slot_req{};
    std::vector<int> free_slots;
    for (int s = depth - 1; s >= 0; --s) free_slots.push_back(s);
    std::size_t next = 0;
    int inflight = 0;
    int busy_retries = 0;
    Status status;
    std::array<struct io_event, kMaxDepth> events{};
    while ((status.ok() && next < reqs.size()) || inflight > 0) {
      while (status.ok() && next < reqs.size() && !free_slots.empty()) {
        int s = free_slots.back();
        const Request& r = reqs[next];
        struct iocb& cb = cbs[s];
        std::memset(&cb, 0, sizeof(cb));
        cb.aio_lio_opcode = IOCB_CMD_PREAD;
        cb.aio_fildes = static_cast<std::uint32_t>(fd_.get());
        cb.aio_buf = reinterpret_cast<std::uint64_t>(r.in_place ? r.in_place : st.bufs[s]);
        cb.aio_nbytes = r.b - r.a;
        cb.aio_offset = static_cast<std::int64_t>(r.a);
        cb.aio_data = static_cast<std::uint64_t>(s);
        struct iocb* p = &cb;
        long rc = SysIoSubmit(st.ctx, 1, &p);
        if (rc == 1) {
          slot_req[s] = static_cast<int>(next);
          free_slots.pop_back();
          ++next;
          ++inflight;
          continue;
        }
        int err = rc < 0 ? errno : EAGAIN;
        if ((err == EAGAIN || err == EINTR) && inflight > 0) break;  // reap, then retry
        if ((err == EAGAIN || err == EINTR) && ++busy_retries < 10000) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        status = ShortRead(r, -err);
      }
      if (inflight == 0) continue;
      long got = SysIoGetevents(st.ctx, 1, inflight, events.data());
      if (got < 0) {
        if (errno == EINTR) continue;
        // Cannot reap: the kernel still owns buffers. This should not happen; report it.
        st.aio_clean = false;
        return Status::Internal(path_ + ": io_getevents: " + Errno(errno) + " with " +
                                std::to_string(inflight) + " O_DIRECT reads in flight");
      }
      for (long e = 0; e < got; ++e) {
        int s = static_cast<int>(events[e].data);
        const Request& r = reqs[slot_req[s]];
        std::int64_t res = events[e].res;
        --inflight;
        free_slots.push_back(s);
        if (res < 0 || static_cast<std::uint64_t>(res) < r.need) {
          if (status.ok()) status = ShortRead(r, res);
          continue;
        }
        if (status.ok() && !r.in_place) Scatter(r, st.bufs[s], ex, n);
      }
    }
    return status;
  }

  std::string path_;
  Fd fd_;
  std::uint64_t size_;
  DirectOptions o_;
};

// ---------------------------------------------------------------------------------------------
class FaultySource final : public Source {
 public:
  FaultySource(std::unique_ptr<Source> inner, const FaultSpec& spec)
      : inner_(std::move(inner)), spec_(spec) {}
  const std::string& path() const override { return inner_->path(); }
  std::uint64_t size() const override { return inner_->size(); }
  std::string_view kind() const override { return "faulty"; }
  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    std::int64_t call = calls_.fetch_add(1);
    if (spec_.delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(spec_.delay_us));
    if (spec_.eio_after >= 0 && call >= spec_.eio_after) {
      return Status::IoError(ReadContext(path(), offset, n) + ": " + Errno(EIO) + " (injected)");
    }
    if (spec_.short_read_after >= 0 && call == spec_.short_read_after) {
      std::uint64_t half = n / 2;
      HOIST_RETURN_IF_ERROR(inner_->ReadAt(offset, dst, half));
      return Status::IoError(ReadContext(path(), offset, n) + ": short read: got " +
                             std::to_string(half) + " bytes, ended at offset " +
                             std::to_string(offset + half) + " (injected)");
    }
    return inner_->ReadAt(offset, dst, n);
  }

 private:
  std::unique_ptr<Source> inner_;
  FaultSpec spec_;
  std::atomic<std::int64_t> calls_{0};
};

}  // namespace

std::size_t KeptAioContexts() { return AioPool::Get().size(); }

Status Source::ReadRows(const RowsRead& r) {
  if (r.rows == 0 || r.width == 0) return Status::Ok();
  if (r.rows == 1 || (r.src_pitch == r.width && r.dst_pitch == r.width)) {
    std::uint64_t n = 0;
    if (__builtin_mul_overflow(r.width, r.rows, &n)) {
      return Status::Corrupt(path() + ": strided read overflows at offset " +
                             std::to_string(r.offset));
    }
    return ReadAt(r.offset, r.dst, n);
  }
  for (std::uint64_t i = 0; i < r.rows; ++i) {
    HOIST_RETURN_IF_ERROR(ReadAt(r.offset + i * r.src_pitch, r.dst + i * r.dst_pitch, r.width));
  }
  return Status::Ok();
}

Status Source::ReadMany(const RowsRead* reads, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) HOIST_RETURN_IF_ERROR(ReadRows(reads[k]));
  return Status::Ok();
}

Result<std::unique_ptr<Source>> OpenBufferedSource(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(auto fs, OpenAndStat(path, O_RDONLY));
  return std::unique_ptr<Source>(new BufferedSource(path, std::move(fs.first), fs.second));
}

Result<std::unique_ptr<Source>> OpenMmapSource(const std::string& path, bool release_pages) {
  HOIST_ASSIGN_OR_RETURN(auto fs, OpenAndStat(path, O_RDONLY));
  std::byte* map = nullptr;
  if (fs.second > 0) {
    void* p = ::mmap(nullptr, fs.second, PROT_READ, MAP_SHARED, fs.first.get(), 0);
    if (p == MAP_FAILED) {
      return Status::IoError(path + ": mmap of " + std::to_string(fs.second) +
                             " bytes: " + Errno(errno));
    }
    map = static_cast<std::byte*>(p);
  }
  return std::unique_ptr<Source>(
      new MmapSource(path, std::move(fs.first), map, fs.second, release_pages));
}

std::unique_ptr<Source> OpenMmapSourceLazily(const std::string& path, std::uint64_t size,
                                             bool release_pages) {
  return std::make_unique<LazyMmapSource>(path, size, release_pages);
}

Result<std::unique_ptr<Source>> OpenDirectSource(const std::string& path,
                                                 const DirectOptions& options) {
  const std::uint64_t al = options.alignment;
  if (al == 0 || (al & (al - 1)) != 0) {
    return Status::InvalidArgument("O_DIRECT alignment must be a power of two, got " +
                                   std::to_string(al));
  }
  HOIST_ASSIGN_OR_RETURN(auto fs, OpenAndStat(path, O_RDONLY | O_DIRECT));
  // Some filesystems accept O_DIRECT at open and refuse it at read time: probe one block.
  if (fs.second > 0) {
    void* probe = std::aligned_alloc(al, al);
    if (probe == nullptr) return Status::ResourceExhausted("O_DIRECT probe buffer");
    ssize_t got;
    do {
      got = ::pread(fs.first.get(), probe, al, 0);
    } while (got < 0 && errno == EINTR);
    int err = errno;
    std::free(probe);
    if (got < 0) {
      if (err == EINVAL) {
        return Status::Unsupported(path + ": O_DIRECT read: " + Errno(err) +
                                   " (the filesystem does not support direct I/O at alignment " +
                                   std::to_string(al) + ")");
      }
      return Status::IoError(path + ": O_DIRECT read of " + std::to_string(al) +
                             " bytes at offset 0: " + Errno(err));
    }
  }
  return std::unique_ptr<Source>(new DirectSource(path, std::move(fs.first), fs.second, options));
}

std::unique_ptr<Source> WrapFaulty(std::unique_ptr<Source> inner, const FaultSpec& spec) {
  return std::make_unique<FaultySource>(std::move(inner), spec);
}

}  // namespace hoist::transport
