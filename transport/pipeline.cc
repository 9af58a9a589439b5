#include "transport/pipeline.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

// One host->device copy out of a slot: rows of `width` packed at slot_off (pitch = width).
struct Op {
  std::uint64_t slot_off;
  std::uint64_t dst;
  std::uint64_t dst_pitch;
  std::uint64_t width;
  std::uint64_t rows;
};

// One fill read: rows of `width` from the file into the slot at slot_off (packed).
struct Piece {
  std::uint32_t file;
  bool cold;
  std::uint32_t seq;
  std::uint64_t src;
  std::uint64_t src_pitch;
  std::uint64_t width;
  std::uint64_t rows;
  std::uint64_t slot_off;   // staged modes; the arena offset for pageable/registered
  std::uint64_t dst_pitch;  // pageable/registered only
  std::uint64_t bytes() const { return width * rows; }
};

// A chunk of work for one fill thread: pieces [begin, end) of one slot sequence number.
struct Task {
  std::uint32_t seq;
  std::size_t begin;
  std::size_t end;
  std::uint64_t bytes;
};

struct LocalSpan {
  double start_s;
  double seconds;
  std::uint64_t bytes;
  std::uint32_t seq;
};

std::uint64_t Extent(std::uint64_t pitch, std::uint64_t width, std::uint64_t rows, bool* overflow) {
  if (rows <= 1) return width;
  std::uint64_t e = 0;
  if (__builtin_mul_overflow(rows - 1, pitch, &e) || __builtin_add_overflow(e, width, &e)) {
    *overflow = true;
    return 0;
  }
  return e;
}

// Bytes of a strided block of a mapped file that are in the page cache now (mincore on the
// mapping; one call per row run, the vector reused per thread).
std::uint64_t ResidentNow(const std::byte* mapping, std::uint64_t size, std::uint64_t src,
                          std::uint64_t pitch, std::uint64_t width, std::uint64_t rows) {
  static const std::uint64_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::uint64_t>(p) : 4096u;
  }();
  thread_local std::vector<unsigned char> vec;
  auto range = [&](std::uint64_t off, std::uint64_t n) -> std::uint64_t {
    if (off >= size || n == 0) return 0;
    n = std::min(n, size - off);
    const std::uint64_t p0 = off / page, p1 = (off + n + page - 1) / page;
    vec.resize(p1 - p0);
    if (::mincore(const_cast<std::byte*>(mapping) + p0 * page, (p1 - p0) * page, vec.data()) != 0) {
      return n;  // cannot tell: treat as resident (the mapped read is always correct)
    }
    std::uint64_t got = 0;
    for (std::uint64_t k = p0; k < p1; ++k) {
      if (!(vec[k - p0] & 1)) continue;
      const std::uint64_t lo = std::max(off, k * page), hi = std::min(off + n, (k + 1) * page);
      got += hi - lo;
    }
    return got;
  };
  if (rows <= 1 || pitch == width) return range(src, width * rows);
  std::uint64_t total = 0;
  for (std::uint64_t r = 0; r < rows; ++r) total += range(src + r * pitch, width);
  return total;
}

std::string CopyLabel(int i, const std::vector<std::string>& paths, std::uint32_t file) {
  std::string s = "copy " + std::to_string(i);
  if (file < paths.size()) s += " (file " + paths[file] + ")";
  return s;
}

class Runner {
 public:
  Runner(Device& dev, const DeviceBuffer& arena, const proto::RankPlan& plan,
         const std::vector<FileSources>& sources, const PipelineOptions& o, PipelineReport* rep)
      : dev_(dev), arena_(arena), plan_(plan), sources_(sources), o_(o), rep_(*rep) {}

  Status Run() {
    HOIST_RETURN_IF_ERROR(Setup());
    Status s = Body();
    if (s.ok()) s = ReachMilestones(o_.milestone_copies.size());
    // Whatever happened, nothing may still read staging or write the arena when we return.
    if (stream_ >= 0) {
      Status sync = dev_.Synchronize(stream_);
      if (s.ok()) s = sync;
    }
    Status cleanup = Cleanup();
    if (s.ok()) s = cleanup;
    return s;
  }

 private:
  double Since(Clock::time_point t) const {
    return std::chrono::duration<double>(t - o_.origin).count();
  }

  Status Setup() {
    threads_ = o_.threads > 0 ? o_.threads : DefaultFillThreads();
    if (threads_ > kMaxFillThreads) {
      return Status::InvalidArgument("pipeline: " + std::to_string(threads_) +
                                     " fill threads; at most " +
                                     std::to_string(kMaxFillThreads));
    }
    if (o_.slots < 1) return Status::InvalidArgument("pipeline: slots must be >= 1");
    if (o_.slot_bytes < 1) return Status::InvalidArgument("pipeline: slot bytes must be >= 1");
    slot_bytes_ = o_.slot_bytes;
    chunk_ = o_.chunk_bytes > 0 ? o_.chunk_bytes
                                : std::max<std::uint64_t>(
                                      64u << 10, slot_bytes_ / static_cast<unsigned>(threads_));
    chunk_ = std::min(chunk_, slot_bytes_);
    staged_ = o_.mode != ReadMode::kPageable && o_.mode != ReadMode::kRegistered;
    rep_.threads = threads_;
    rep_.slot_bytes = staged_ ? slot_bytes_ : 0;
    rep_.chunk_bytes = chunk_;

    for (int i = 0; i < plan_.copies_size(); ++i) {
      const proto::Copy& c = plan_.copies(i);
      if (c.width() == 0 || c.rows() == 0) continue;
      if (c.file() >= sources_.size() || sources_[c.file()].primary == nullptr) {
        return Status::InvalidArgument("pipeline: copy " + std::to_string(i) + " reads file " +
                                       std::to_string(c.file()) + " which has no source");
      }
      if (!staged_ && sources_[c.file()].primary->mapping() == nullptr &&
          sources_[c.file()].primary->size() > 0) {
        return Status::InvalidArgument("pipeline: read mode " + std::string(ReadModeName(o_.mode)) +
                                       " needs a mapped " + "source for " +
                                       sources_[c.file()].primary->path());
      }
    }
    if (o_.milestone_events.size() != o_.milestone_copies.size()) {
      return Status::InvalidArgument("pipeline: milestone events and copy counts differ in size");
    }
    if (staged_) {
      BuildStaged();
    } else {
      BuildDirect();
    }
    rep_.tasks = tasks_.size();

    HOIST_ASSIGN_OR_RETURN(stream_, dev_.CreateStream());
    HOIST_ASSIGN_OR_RETURN(t0_event_, dev_.CreateEvent(true));
    HOIST_RETURN_IF_ERROR(dev_.Record(t0_event_, stream_));
    HOIST_RETURN_IF_ERROR(dev_.Wait(t0_event_));
    t0_s_ = Since(Clock::now());
    return Status::Ok();
  }

  Status Cleanup() {
    Status s;
    auto keep = [&s](Status x) {
      if (s.ok() && !x.ok()) s = std::move(x);
    };
    for (EventId e : events_) keep(dev_.DestroyEvent(e));
    if (t0_event_ >= 0) keep(dev_.DestroyEvent(t0_event_));
    if (stream_ >= 0) keep(dev_.DestroyStream(stream_));
    events_.clear();
    t0_event_ = stream_ = -1;
    return s;
  }

  bool ColdFor(std::uint32_t file, std::uint64_t src, std::uint64_t pitch, std::uint64_t width,
               std::uint64_t rows) const {
    if (o_.mode != ReadMode::kAuto) return false;
    const FileSources& fs = sources_[file];
    if (fs.cold == nullptr || fs.residency == nullptr) return false;
    return fs.residency->ResidentBytes(src, pitch, width, rows) * 2 < width * rows;
  }

  // Splits one slot op into pieces of at most chunk_ bytes.
  void AddPieces(std::uint32_t file, std::uint32_t seq, std::uint64_t src, std::uint64_t pitch,
                 std::uint64_t width, std::uint64_t rows, std::uint64_t slot_off) {
    auto add = [&](std::uint64_t s, std::uint64_t w, std::uint64_t n, std::uint64_t off) {
      pieces_.push_back(Piece{file, ColdFor(file, s, pitch, w, n), seq, s, pitch, w, n, off, 0});
    };
    if (rows > 1 && width <= chunk_) {
      const std::uint64_t per = std::max<std::uint64_t>(1, chunk_ / width);
      for (std::uint64_t r = 0; r < rows; r += per) {
        add(src + r * pitch, width, std::min(per, rows - r), slot_off + r * width);
      }
      return;
    }
    for (std::uint64_t r = 0; r < rows; ++r) {
      for (std::uint64_t c = 0; c < width; c += chunk_) {
        add(src + r * pitch + c, std::min(chunk_, width - c), 1, slot_off + r * width + c);
      }
    }
  }

  void BuildStaged() {
    std::uint32_t seq = 0;
    std::uint64_t pos = 0;
    seq_ops_.push_back(0);
    auto next_slot = [&] {
      seq_bytes_.push_back(pos);
      ++seq;
      pos = 0;
      seq_ops_.push_back(ops_.size());
    };
    copy_last_seq_.assign(plan_.copies_size(), -1);
    std::int64_t last_seq = -1;  // of the latest copy with bytes
    for (int ci = 0; ci < plan_.copies_size(); ++ci) {
      const proto::Copy& c = plan_.copies(ci);
      std::uint64_t width = c.width(), rows = c.rows();
      std::uint64_t sp = c.src_pitch(), dp = c.dst_pitch();
      copy_last_seq_[ci] = last_seq;
      if (width == 0 || rows == 0) continue;
      if (rows > 1 && sp == width && dp == width) {  // contiguous on both sides: one range
        width *= rows;
        rows = 1;
      }
      std::uint64_t row = 0, col = 0;
      while (row < rows) {
        const std::uint64_t rem = slot_bytes_ - pos;
        std::uint64_t src = c.src_offset() + row * sp + col;
        std::uint64_t dst = c.dst_offset() + row * dp + col;
        if (col == 0 && width <= rem) {
          std::uint64_t n = std::min(rows - row, rem / width);
          ops_.push_back(Op{pos, dst, dp, width, n});
          AddPieces(c.file(), seq, src, sp, width, n, pos);
          pos += n * width;
          row += n;
        } else {
          std::uint64_t len = std::min(width - col, rem);
          ops_.push_back(Op{pos, dst, 0, len, 1});
          AddPieces(c.file(), seq, src, 0, len, 1, pos);
          pos += len;
          col += len;
          if (col == width) {
            col = 0;
            ++row;
          }
        }
        if (pos == slot_bytes_) next_slot();
      }
      if (pos == 0 && seq > 0) {
        copy_last_seq_[ci] = last_seq = seq - 1;  // ended exactly at a slot boundary
      } else {
        copy_last_seq_[ci] = last_seq = seq;
      }
    }
    if (pos > 0) next_slot();
    seqs_ = seq;
    rep_.slot_seqs = seqs_;
    GroupTasks();
  }

  // Pageable splits copies into chunks so that threads copy in parallel; registered enqueues
  // whole copies (one async op each) from a single thread.
  void BuildDirect() {
    const std::uint64_t chunk = o_.mode == ReadMode::kRegistered ? ~0ull : chunk_;
    for (const proto::Copy& c : plan_.copies()) {
      std::uint64_t width = c.width(), rows = c.rows();
      std::uint64_t sp = c.src_pitch(), dp = c.dst_pitch();
      if (width == 0 || rows == 0) continue;
      if (rows > 1 && sp == width && dp == width) {
        width *= rows;
        rows = 1;
      }
      if (rows > 1 && width <= chunk) {
        const std::uint64_t per = std::max<std::uint64_t>(1, chunk / width);
        for (std::uint64_t r = 0; r < rows; r += per) {
          pieces_.push_back(Piece{c.file(), false, 0, c.src_offset() + r * sp, sp, width,
                                  std::min(per, rows - r), c.dst_offset() + r * dp, dp});
        }
        continue;
      }
      for (std::uint64_t r = 0; r < rows; ++r) {
        for (std::uint64_t col = 0; col < width; col += chunk) {
          pieces_.push_back(Piece{c.file(), false, 0, c.src_offset() + r * sp + col, 0,
                                  std::min(chunk, width - col), 1, c.dst_offset() + r * dp + col,
                                  0});
        }
      }
    }
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      tasks_.push_back(Task{0, i, i + 1, pieces_[i].bytes()});
    }
  }

  void GroupTasks() {
    Task cur{0, 0, 0, 0};
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      if (cur.end > cur.begin && (p.seq != cur.seq || cur.bytes + p.bytes() > chunk_)) {
        tasks_.push_back(cur);
        cur = Task{p.seq, i, i, 0};
      }
      if (cur.end == cur.begin) cur = Task{p.seq, i, i, 0};
      cur.end = i + 1;
      cur.bytes += p.bytes();
    }
    if (cur.end > cur.begin) tasks_.push_back(cur);
    remaining_.assign(seqs_, 0);
    for (const Task& t : tasks_) ++remaining_[t.seq];
  }

  Status Body() {
    for (const proto::Fill& f : plan_.fills()) {
      if (f.bytes() == 0) continue;
      HOIST_RETURN_IF_ERROR(dev_.MemsetAsync(static_cast<std::byte*>(arena_.ptr) + f.dst_offset(),
                                             static_cast<std::uint8_t>(f.value()), f.bytes(),
                                             stream_));
      rep_.bytes_filled += f.bytes();
    }
    if (o_.mode == ReadMode::kPageable) return RunPageable();
    if (o_.mode == ReadMode::kRegistered) return RunRegistered();
    return RunStaged();
  }

  // ----- staged modes ---------------------------------------------------------------------
  struct Slot {
    HostBuffer buf;
    bool allocating = false;
    std::int64_t submitted = -1;  // latest seq whose copies were enqueued
    std::int64_t waited = -1;     // latest seq whose completion was observed
    bool waiting = false;
  };

  void Fail(Status s) {
    std::lock_guard lock(mu_);
    if (status_.ok()) status_ = std::move(s);
    failed_.store(true);
    cv_.notify_all();
  }

  Status AllocSlot(Slot& slot) {
    Clock::time_point a = Clock::now();
    Result<HostBuffer> b = dev_.AllocateStaging(slot_bytes_, o_.staging);
    Clock::time_point z = Clock::now();
    std::lock_guard lock(mu_);
    alloc_first_ = std::min(alloc_first_, a);
    alloc_last_ = std::max(alloc_last_, z);
    alloc_busy_ += std::chrono::duration<double>(z - a).count();
    if (!b.ok()) return b.status();
    slot.buf = *b;
    return Status::Ok();
  }

  // mu_ released. Waits for slot k's copies of sequence q and returns their span.
  Result<SpanRecord> WaitSlot(int k, std::int64_t q) {
    HOIST_RETURN_IF_ERROR(dev_.Wait(ev_end_[k]));
    HOIST_ASSIGN_OR_RETURN(double a, dev_.Elapsed(t0_event_, ev_start_[k]));
    HOIST_ASSIGN_OR_RETURN(double b, dev_.Elapsed(t0_event_, ev_end_[k]));
    SpanRecord s;
    s.lane = "h2d-0";
    s.what = "slot " + std::to_string(k) + " seq " + std::to_string(q);
    s.start_s = t0_s_ + a;
    s.seconds = std::max(0.0, b - a);
    s.bytes = seq_bytes_[q];
    return s;
  }

  // mu_ held through `lock`. Allocates the slot's staging unless another thread is doing it
  // (then waits for that thread).
  Status EnsureAllocated(Slot& slot, std::unique_lock<std::mutex>& lock) {
    while (slot.buf.ptr == nullptr) {
      if (failed_.load()) return Status::Aborted("pipeline stopped");
      if (slot.allocating) {
        cv_.wait(lock);
        continue;
      }
      slot.allocating = true;
      lock.unlock();
      Status s = AllocSlot(slot);
      lock.lock();
      slot.allocating = false;
      cv_.notify_all();
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  Status Acquire(int k, std::int64_t q) {
    Slot& slot = slots_[k];
    std::unique_lock lock(mu_);
    HOIST_RETURN_IF_ERROR(EnsureAllocated(slot, lock));
    const std::int64_t need = q - static_cast<std::int64_t>(slots_.size());
    while (slot.waited < need) {
      if (failed_.load()) return Status::Aborted("pipeline stopped");
      if (slot.submitted == need && !slot.waiting) {
        slot.waiting = true;
        lock.unlock();
        Result<SpanRecord> span = WaitSlot(k, need);
        lock.lock();
        slot.waiting = false;
        if (!span.ok()) {
          cv_.notify_all();
          return span.status();
        }
        h2d_spans_.push_back(std::move(*span));
        slot.waited = need;
        cv_.notify_all();
      } else {
        cv_.wait(lock);
      }
    }
    return Status::Ok();
  }

  Status Submit(std::uint32_t q) {
    const int k = static_cast<int>(q % slots_.size());
    std::byte* base = slots_[k].buf.ptr;
    {
      std::lock_guard lock(submit_mu_);
      HOIST_RETURN_IF_ERROR(dev_.Record(ev_start_[k], stream_));
      for (std::size_t i = seq_ops_[q]; i < seq_ops_[q + 1]; ++i) {
        const Op& op = ops_[i];
        Copy2D c;
        c.dst = static_cast<std::byte*>(arena_.ptr) + op.dst;
        c.dst_pitch = op.dst_pitch;
        c.src = base + op.slot_off;
        c.src_pitch = op.width;
        c.width = op.width;
        c.rows = op.rows;
        if (c.rows > 1 && c.dst_pitch == c.width) {  // packed on both sides: one 1-D copy
          c.width *= c.rows;
          c.rows = 1;
        }
        HOIST_RETURN_IF_ERROR(dev_.CopyAsync(c, stream_));
      }
      HOIST_RETURN_IF_ERROR(dev_.Record(ev_end_[k], stream_));
      HOIST_RETURN_IF_ERROR(AdvanceSubmitted(q));
    }
    std::lock_guard lock(mu_);
    slots_[k].submitted = q;
    bytes_h2d_ += seq_bytes_[q];
    if (o_.progress != nullptr) o_.progress->fetch_add(seq_bytes_[q], std::memory_order_relaxed);
    cv_.notify_all();
    return Status::Ok();
  }

  // submit_mu_ held. Marks seq q enqueued; once every seq up to some S is, records the
  // milestones whose copies all lie in seqs <= S.
  Status AdvanceSubmitted(std::uint32_t q) {
    if (o_.milestone_copies.empty()) return Status::Ok();
    if (submitted_seq_.size() < seqs_) submitted_seq_.resize(seqs_, false);
    submitted_seq_[q] = true;
    while (prefix_ < seqs_ && submitted_seq_[prefix_]) ++prefix_;
    std::size_t m = milestones_reached_;
    while (m < o_.milestone_copies.size() && MilestoneSeq(m) < static_cast<std::int64_t>(prefix_)) {
      ++m;
    }
    return ReachMilestones(m);
  }

  // The last slot sequence number holding bytes of milestone m (-1: it has none).
  std::int64_t MilestoneSeq(std::size_t m) const {
    const int n = o_.milestone_copies[m];
    if (n <= 0 || copy_last_seq_.empty()) return -1;
    return copy_last_seq_[std::min<std::size_t>(n, copy_last_seq_.size()) - 1];
  }

  // Records milestones [milestones_reached_, upto) on the copy stream and announces them.
  // Called with submit_mu_ held (or after the run, when no fill thread is left).
  Status ReachMilestones(std::size_t upto) {
    for (; milestones_reached_ < upto; ++milestones_reached_) {
      HOIST_RETURN_IF_ERROR(dev_.Record(o_.milestone_events[milestones_reached_], stream_));
      if (o_.on_milestone) o_.on_milestone(static_cast<int>(milestones_reached_));
    }
    return Status::Ok();
  }

  bool Cancelled() const { return o_.cancel != nullptr && o_.cancel->load(); }

  // Whether piece p reads from the cold source. Auto mode without a precomputed residency asks
  // the page cache now, through the primary source's mapping, and counts the resident bytes.
  bool PieceCold(const Piece& p, std::uint64_t* resident) const {
    const FileSources& fs = sources_[p.file];
    if (o_.mode != ReadMode::kAuto || fs.cold == nullptr || fs.residency != nullptr ||
        fs.primary->mapping() == nullptr) {
      return p.cold;
    }
    const std::uint64_t here =
        ResidentNow(fs.primary->mapping(), fs.primary->size(), p.src, p.src_pitch, p.width, p.rows);
    *resident += here;
    return here * 2 < p.bytes();
  }

  // Reads task t into its slot; *cold_bytes and *resident_bytes grow by what it read cold and
  // what it found resident.
  Status Execute(const Task& t, std::byte* slot, std::uint64_t* cold_bytes,
                 std::uint64_t* resident_bytes) {
    thread_local std::vector<RowsRead> batch;
    thread_local std::vector<char> cold;
    cold.resize(t.end - t.begin);
    for (std::size_t i = t.begin; i < t.end; ++i) {
      cold[i - t.begin] = PieceCold(pieces_[i], resident_bytes);
    }
    std::size_t i = t.begin;
    while (i < t.end) {
      const Piece& first = pieces_[i];
      const bool is_cold = cold[i - t.begin];
      batch.clear();
      std::size_t j = i;
      for (; j < t.end && pieces_[j].file == first.file && cold[j - t.begin] == is_cold; ++j) {
        const Piece& p = pieces_[j];
        batch.push_back(RowsRead{p.src, p.src_pitch, p.width, p.rows, slot + p.slot_off, p.width});
        if (is_cold) *cold_bytes += p.bytes();
      }
      const FileSources& fs = sources_[first.file];
      Source* src = is_cold ? fs.cold : fs.primary;
      HOIST_RETURN_IF_ERROR(src->ReadMany(batch.data(), batch.size()));
      i = j;
    }
    return Status::Ok();
  }

  void FillLoop(int tid, std::vector<LocalSpan>* spans, double* busy, std::uint64_t* cold,
                std::uint64_t* resident) {
    // Lazy staging: thread t first sets up slot t, so the slots' set-up (touching pages,
    // registering them) runs in parallel while the other threads already fill slot 0.
    if (tid < static_cast<int>(slots_.size())) {
      std::unique_lock lock(mu_);
      Status s = EnsureAllocated(slots_[tid], lock);
      if (!s.ok()) {
        lock.unlock();
        return Fail(std::move(s));
      }
    }
    for (;;) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= tasks_.size() || failed_.load()) return;
      if (Cancelled()) return Fail(Status::Aborted("pipeline cancelled"));
      const Task& t = tasks_[i];
      const int k = static_cast<int>(t.seq % slots_.size());
      Status s = Acquire(k, t.seq);
      if (!s.ok()) return Fail(std::move(s));
      const Clock::time_point a = Clock::now();
      s = Execute(t, slots_[k].buf.ptr, cold, resident);
      const Clock::time_point z = Clock::now();
      if (!s.ok()) return Fail(std::move(s));
      spans->push_back(
          LocalSpan{Since(a), std::chrono::duration<double>(z - a).count(), t.bytes, t.seq});
      *busy += spans->back().seconds;
      bool last;
      {
        std::lock_guard lock(mu_);
        last = --remaining_[t.seq] == 0;
      }
      if (last) {
        s = Submit(t.seq);
        if (!s.ok()) return Fail(std::move(s));
      }
    }
  }

  Status RunStaged() {
    if (seqs_ == 0) return Status::Ok();
    const int k_slots = static_cast<int>(std::min<std::uint64_t>(o_.slots, seqs_));
    rep_.slots = k_slots;
    slots_.resize(k_slots);
    for (int k = 0; k < k_slots; ++k) {
      HOIST_ASSIGN_OR_RETURN(EventId a, dev_.CreateEvent(true));
      events_.push_back(a);
      HOIST_ASSIGN_OR_RETURN(EventId b, dev_.CreateEvent(true));
      events_.push_back(b);
      ev_start_.push_back(a);
      ev_end_.push_back(b);
    }
    alloc_first_ = Clock::time_point::max();
    alloc_last_ = Clock::time_point::min();
    Status status;
    if (!o_.lazy_staging) {
      for (Slot& s : slots_) {
        status = AllocSlot(s);
        if (!status.ok()) break;
      }
    }
    std::vector<std::vector<LocalSpan>> spans(threads_);
    std::vector<double> busy(threads_, 0.0);
    std::vector<std::uint64_t> cold(threads_, 0), resident(threads_, 0);
    if (status.ok()) {
      std::vector<std::thread> pool;
      pool.reserve(threads_);
      try {
        for (int t = 0; t < threads_; ++t) {
          pool.emplace_back([this, t, &spans, &busy, &cold, &resident] {
            FillLoop(t, &spans[t], &busy[t], &cold[t], &resident[t]);
          });
        }
      } catch (const std::system_error& e) {  // the OS refused a thread: stop the others
        Fail(Status::ResourceExhausted("pipeline: could not start fill thread " +
                                       std::to_string(pool.size()) + " of " +
                                       std::to_string(threads_) + ": " + e.what()));
      }
      for (auto& th : pool) th.join();
      status = status_;
    }

    // Read phase and fill spans.
    double first = 1e300, last = -1e300, total_busy = 0;
    std::uint64_t bytes = 0;
    for (int t = 0; t < threads_; ++t) {
      for (const LocalSpan& s : spans[t]) {
        first = std::min(first, s.start_s);
        last = std::max(last, s.start_s + s.seconds);
        bytes += s.bytes;
      }
      total_busy += busy[t];
      rep_.bytes_cold += cold[t];
      rep_.bytes_resident += resident[t];
    }
    if (bytes > 0) rep_.read = PhaseTiming{first, last - first, total_busy, bytes, true};
    rep_.bytes_read = bytes;

    // Drain: every submitted slot completes before staging can go.
    const Clock::time_point drain_start = Clock::now();
    std::vector<std::pair<std::int64_t, int>> outstanding;
    for (int k = 0; k < k_slots; ++k) {
      if (slots_[k].submitted > slots_[k].waited) outstanding.emplace_back(slots_[k].submitted, k);
    }
    std::sort(outstanding.begin(), outstanding.end());
    for (auto [q, k] : outstanding) {
      Result<SpanRecord> span = WaitSlot(k, q);
      if (!span.ok()) {
        if (status.ok()) status = span.status();
        continue;
      }
      h2d_spans_.push_back(std::move(*span));
      slots_[k].waited = q;
    }
    Status sync = dev_.Synchronize(stream_);
    if (status.ok()) status = sync;
    const Clock::time_point drain_end = Clock::now();
    rep_.drain =
        PhaseTiming{Since(drain_start),
                    std::chrono::duration<double>(drain_end - drain_start).count(), 0, 0, true};
    rep_.drain.busy_s = rep_.drain.seconds;

    if (alloc_first_ != Clock::time_point::max()) {
      rep_.staging_alloc = PhaseTiming{
          Since(alloc_first_), std::chrono::duration<double>(alloc_last_ - alloc_first_).count(),
          alloc_busy_, 0, true};
      for (const Slot& s : slots_) rep_.staging_alloc.bytes += s.buf.bytes;
    }
    rep_.bytes_h2d = bytes_h2d_;
    H2dPhase();

    // Staging free (after the stream drained above).
    const Clock::time_point fa = Clock::now();
    for (Slot& s : slots_) {
      if (s.buf.ptr == nullptr) continue;
      std::uint64_t n = s.buf.bytes;
      Status f = dev_.FreeStaging(s.buf);
      if (status.ok()) status = f;
      rep_.staging_free.bytes += n;
    }
    const Clock::time_point fz = Clock::now();
    rep_.staging_free.start_s = Since(fa);
    rep_.staging_free.seconds = std::chrono::duration<double>(fz - fa).count();
    rep_.staging_free.busy_s = rep_.staging_free.seconds;
    rep_.staging_free.ran = true;

    EmitSpans(spans, "read");
    return status;
  }

  void H2dPhase() {
    if (h2d_spans_.empty()) return;
    double first = 1e300, last = -1e300, busy = 0;
    for (const SpanRecord& s : h2d_spans_) {
      first = std::min(first, s.start_s);
      last = std::max(last, s.start_s + s.seconds);
      busy += s.seconds;
    }
    rep_.h2d = PhaseTiming{first, last - first, busy, rep_.bytes_h2d, true};
  }

  // Fill-thread spans plus h2d spans, coalesced per lane when there are more than max_spans.
  void EmitSpans(const std::vector<std::vector<LocalSpan>>& per_thread, const char* what) {
    std::size_t total = h2d_spans_.size();
    for (const auto& v : per_thread) total += v.size();
    const std::size_t cap = std::max<std::size_t>(o_.max_spans, 1);
    const std::size_t group = (total + cap - 1) / cap;
    auto emit = [&](const std::string& lane, const std::string& w, double start, double end,
                    std::uint64_t bytes, std::size_t n) {
      SpanRecord r;
      r.lane = lane;
      r.what = n > 1 ? w + " x" + std::to_string(n) : w;
      r.start_s = start;
      r.seconds = end - start;
      r.bytes = bytes;
      rep_.spans.push_back(std::move(r));
    };
    for (std::size_t t = 0; t < per_thread.size(); ++t) {
      const auto& v = per_thread[t];
      const std::string lane = "fill-" + std::to_string(t);
      for (std::size_t i = 0; i < v.size(); i += std::max<std::size_t>(group, 1)) {
        std::size_t j = std::min(v.size(), i + std::max<std::size_t>(group, 1));
        std::uint64_t bytes = 0;
        for (std::size_t x = i; x < j; ++x) bytes += v[x].bytes;
        std::string w = std::string(what) + " seq " + std::to_string(v[i].seq);
        emit(lane, w, v[i].start_s, v[j - 1].start_s + v[j - 1].seconds, bytes, j - i);
      }
    }
    std::sort(h2d_spans_.begin(), h2d_spans_.end(),
              [](const SpanRecord& a, const SpanRecord& b) { return a.start_s < b.start_s; });
    for (std::size_t i = 0; i < h2d_spans_.size(); i += std::max<std::size_t>(group, 1)) {
      std::size_t j = std::min(h2d_spans_.size(), i + std::max<std::size_t>(group, 1));
      std::uint64_t bytes = 0;
      double end = 0;
      for (std::size_t x = i; x < j; ++x) {
        bytes += h2d_spans_[x].bytes;
        end = std::max(end, h2d_spans_[x].start_s + h2d_spans_[x].seconds);
      }
      emit(h2d_spans_[i].lane, h2d_spans_[i].what, h2d_spans_[i].start_s, end, bytes, j - i);
    }
  }

  // ----- pageable: synchronous copies straight from the mapping ---------------------------
  Status RunPageable() {
    std::vector<std::vector<LocalSpan>> spans(threads_);
    std::vector<double> busy(threads_, 0.0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads_; ++t) {
      pool.emplace_back([this, t, &spans, &busy] {
        for (;;) {
          const std::size_t i = next_.fetch_add(1);
          if (i >= tasks_.size() || failed_.load()) return;
          const Piece& p = pieces_[tasks_[i].begin];
          Copy2D c;
          c.dst = static_cast<std::byte*>(arena_.ptr) + p.slot_off;
          c.dst_pitch = p.dst_pitch;
          c.src = sources_[p.file].primary->mapping() + p.src;
          c.src_pitch = p.src_pitch;
          c.width = p.width;
          c.rows = p.rows;
          const Clock::time_point a = Clock::now();
          Status s = dev_.CopySync(c);
          const Clock::time_point z = Clock::now();
          if (!s.ok()) {
            return Fail(std::move(s).Annotate(sources_[p.file].primary->path() +
                                              ": pageable copy at offset " +
                                              std::to_string(p.src)));
          }
          spans[t].push_back(
              LocalSpan{Since(a), std::chrono::duration<double>(z - a).count(), p.bytes(), 0});
          busy[t] += spans[t].back().seconds;
        }
      });
    }
    for (auto& th : pool) th.join();
    double first = 1e300, last = -1e300, total_busy = 0;
    std::uint64_t bytes = 0;
    for (int t = 0; t < threads_; ++t) {
      for (const LocalSpan& s : spans[t]) {
        first = std::min(first, s.start_s);
        last = std::max(last, s.start_s + s.seconds);
        bytes += s.bytes;
      }
      total_busy += busy[t];
    }
    if (bytes > 0) {
      rep_.read = PhaseTiming{first, last - first, total_busy, bytes, true};
      rep_.h2d = rep_.read;
    }
    rep_.bytes_read = rep_.bytes_h2d = bytes;
    if (o_.progress != nullptr) o_.progress->fetch_add(bytes, std::memory_order_relaxed);
    EmitSpans(spans, "pageable");
    return status_;
  }

  // ----- registered: register the mapped files, DMA straight from them ---------------------
  Status RunRegistered() {
    std::vector<const void*> registered;
    const Clock::time_point ra = Clock::now();
    Status status;
    std::vector<bool> done(sources_.size(), false);
    for (const Piece& p : pieces_) {
      if (done[p.file]) continue;
      done[p.file] = true;
      const Source* s = sources_[p.file].primary;
      status = dev_.RegisterHost(s->mapping(), s->size(), /*read_only=*/true);
      if (!status.ok()) {
        status.Annotate(s->path());
        break;
      }
      registered.push_back(s->mapping());
      rep_.staging_alloc.bytes += s->size();
    }
    const Clock::time_point rz = Clock::now();
    rep_.staging_alloc.start_s = Since(ra);
    rep_.staging_alloc.seconds = rep_.staging_alloc.busy_s =
        std::chrono::duration<double>(rz - ra).count();
    rep_.staging_alloc.ran = true;

    if (status.ok()) {
      HOIST_ASSIGN_OR_RETURN(EventId a, dev_.CreateEvent(true));
      events_.push_back(a);
      HOIST_ASSIGN_OR_RETURN(EventId b, dev_.CreateEvent(true));
      events_.push_back(b);
      status = dev_.Record(a, stream_);
      std::uint64_t bytes = 0;
      for (const Piece& p : pieces_) {
        if (!status.ok()) break;
        Copy2D c;
        c.dst = static_cast<std::byte*>(arena_.ptr) + p.slot_off;
        c.dst_pitch = p.dst_pitch;
        c.src = sources_[p.file].primary->mapping() + p.src;
        c.src_pitch = p.src_pitch;
        c.width = p.width;
        c.rows = p.rows;
        status = dev_.CopyAsync(c, stream_);
        bytes += p.bytes();
      }
      if (status.ok()) status = dev_.Record(b, stream_);
      if (status.ok()) status = dev_.Wait(b);
      Status sync = dev_.Synchronize(stream_);
      if (status.ok()) status = sync;
      if (status.ok()) {
        Result<double> ea = dev_.Elapsed(t0_event_, a);
        Result<double> eb = dev_.Elapsed(t0_event_, b);
        if (ea.ok() && eb.ok()) {
          SpanRecord s;
          s.lane = "h2d-0";
          s.what = "registered";
          s.start_s = t0_s_ + *ea;
          s.seconds = *eb - *ea;
          s.bytes = bytes;
          h2d_spans_.push_back(s);
        }
        rep_.bytes_read = rep_.bytes_h2d = bytes;
        if (o_.progress != nullptr) o_.progress->fetch_add(bytes, std::memory_order_relaxed);
        H2dPhase();
        rep_.read = rep_.h2d;
      }
    }
    const Clock::time_point fa = Clock::now();
    for (const void* p : registered) {
      Status u = dev_.UnregisterHost(p);
      if (status.ok()) status = u;
    }
    const Clock::time_point fz = Clock::now();
    rep_.staging_free.start_s = Since(fa);
    rep_.staging_free.seconds = rep_.staging_free.busy_s =
        std::chrono::duration<double>(fz - fa).count();
    rep_.staging_free.bytes = rep_.staging_alloc.bytes;
    rep_.staging_free.ran = true;
    EmitSpans({}, "registered");
    return status;
  }

  Device& dev_;
  const DeviceBuffer& arena_;
  const proto::RankPlan& plan_;
  const std::vector<FileSources>& sources_;
  const PipelineOptions& o_;
  PipelineReport& rep_;

  int threads_ = 1;
  std::uint64_t slot_bytes_ = 0;
  std::uint64_t chunk_ = 0;
  bool staged_ = true;

  std::vector<Op> ops_;
  std::vector<std::size_t> seq_ops_;  // ops of seq q: [seq_ops_[q], seq_ops_[q+1])
  std::vector<std::uint64_t> seq_bytes_;
  std::vector<Piece> pieces_;
  std::vector<Task> tasks_;
  std::uint64_t seqs_ = 0;
  std::vector<std::int64_t> copy_last_seq_;  // staged: last seq holding bytes of copies [0, i]
  std::vector<bool> submitted_seq_;          // guarded by submit_mu_
  std::uint64_t prefix_ = 0;                 // seqs [0, prefix_) all enqueued (submit_mu_)
  std::size_t milestones_reached_ = 0;       // submit_mu_

  StreamId stream_ = -1;
  EventId t0_event_ = -1;
  double t0_s_ = 0;
  std::vector<EventId> events_, ev_start_, ev_end_;

  std::mutex mu_;  // guards slots_, remaining_, status_, h2d_spans_, alloc stats, bytes_h2d_
  std::condition_variable cv_;
  std::mutex submit_mu_;  // one slot's ops are enqueued contiguously
  std::vector<Slot> slots_;
  std::vector<int> remaining_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> failed_{false};
  Status status_;
  std::vector<SpanRecord> h2d_spans_;
  Clock::time_point alloc_first_{}, alloc_last_{};
  double alloc_busy_ = 0;
  std::uint64_t bytes_h2d_ = 0;
};

}  // namespace

int DefaultFillThreads(int ranks_on_node) {
  unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) hw = 1;
  int t = static_cast<int>(hw) / std::max(1, ranks_on_node);
  return std::clamp(t, 1, 16);
}

Status ValidateRankPlan(const proto::RankPlan& plan, const std::vector<std::uint64_t>& file_sizes,
                        const std::vector<std::string>& file_paths, std::uint64_t arena_bytes) {
  for (int i = 0; i < plan.copies_size(); ++i) {
    const proto::Copy& c = plan.copies(i);
    if (c.width() == 0 || c.rows() == 0) continue;
    if (c.file() >= file_sizes.size()) {
      return Status::Corrupt(CopyLabel(i, file_paths, c.file()) + ": file index " +
                             std::to_string(c.file()) + " out of range (" +
                             std::to_string(file_sizes.size()) + " files)");
    }
    bool overflow = false;
    const std::uint64_t se = Extent(c.src_pitch(), c.width(), c.rows(), &overflow);
    const std::uint64_t de = Extent(c.dst_pitch(), c.width(), c.rows(), &overflow);
    if (overflow) {
      return Status::Corrupt(CopyLabel(i, file_paths, c.file()) + ": extent overflows at offset " +
                             std::to_string(c.src_offset()));
    }
    const std::uint64_t fs = file_sizes[c.file()];
    if (c.src_offset() > fs || se > fs - c.src_offset()) {
      return Status::Corrupt(CopyLabel(i, file_paths, c.file()) + ": bytes [" +
                             std::to_string(c.src_offset()) + ", +" + std::to_string(se) +
                             ") past the end of the file (" + std::to_string(fs) + " bytes)");
    }
    if (c.dst_offset() > arena_bytes || de > arena_bytes - c.dst_offset()) {
      return Status::Corrupt(CopyLabel(i, file_paths, c.file()) + ": arena bytes [" +
                             std::to_string(c.dst_offset()) + ", +" + std::to_string(de) +
                             ") outside the arena (" + std::to_string(arena_bytes) + " bytes)");
    }
    if (c.rows() > 1 && c.dst_pitch() < c.width()) {
      return Status::Corrupt(CopyLabel(i, file_paths, c.file()) + ": dst_pitch " +
                             std::to_string(c.dst_pitch()) + " < width " +
                             std::to_string(c.width()) + " (rows overlap in the arena)");
    }
  }
  for (int i = 0; i < plan.fills_size(); ++i) {
    const proto::Fill& f = plan.fills(i);
    if (f.dst_offset() > arena_bytes || f.bytes() > arena_bytes - f.dst_offset()) {
      return Status::Corrupt("fill " + std::to_string(i) + ": arena bytes [" +
                             std::to_string(f.dst_offset()) + ", +" + std::to_string(f.bytes()) +
                             ") outside the arena (" + std::to_string(arena_bytes) + " bytes)");
    }
    if (f.value() > 0xFF) {
      return Status::Unsupported("fill " + std::to_string(i) + ": value " +
                                 std::to_string(f.value()) + " is not a byte");
    }
  }
  return Status::Ok();
}

Status RunPipeline(Device& device, const DeviceBuffer& arena, const proto::RankPlan& plan,
                   const std::vector<FileSources>& sources, const PipelineOptions& options,
                   PipelineReport* report) {
  PipelineReport local;
  Runner runner(device, arena, plan, sources, options, report ? report : &local);
  return runner.Run();
}

Result<SourceSet> OpenSources(const std::vector<std::string>& paths, const std::vector<bool>& used,
                              ReadMode mode, const DirectOptions& direct, const SourceWrapper& wrap,
                              bool release_mapped_pages) {
  SourceSet set;
  set.files.resize(paths.size());
  bool direct_ok = true;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    if (f < used.size() && !used[f]) continue;
    Result<std::unique_ptr<Source>> primary = Status::Internal("unset");
    switch (mode) {
      case ReadMode::kBuffered:
        primary = OpenBufferedSource(paths[f]);
        break;
      case ReadMode::kDirect:
        primary = OpenDirectSource(paths[f], direct);
        break;
      case ReadMode::kAuto:
      case ReadMode::kMmap:
      case ReadMode::kPageable:
      case ReadMode::kRegistered:
        primary = OpenMmapSource(
            paths[f], release_mapped_pages && (mode == ReadMode::kAuto || mode == ReadMode::kMmap));
        break;
    }
    if (!primary.ok()) return std::move(primary).status();
    if (wrap) *primary = wrap(std::move(*primary));
    set.files[f].primary = primary->get();
    set.owned.push_back(std::move(*primary));
    if (mode != ReadMode::kAuto) continue;
    Result<std::unique_ptr<Source>> cold = Status::Internal("unset");
    if (direct_ok) {
      cold = OpenDirectSource(paths[f], direct);
      if (!cold.ok() && cold.status().code() == Code::kUnsupported) {
        direct_ok = false;
        set.note = "O_DIRECT unsupported (" + cold.status().message() +
                   "); auto reads cold ranges buffered";
      }
    }
    if (!direct_ok) cold = OpenBufferedSource(paths[f]);
    if (!cold.ok()) return std::move(cold).status();
    if (wrap) *cold = wrap(std::move(*cold));
    set.files[f].cold = cold->get();
    set.owned.push_back(std::move(*cold));
  }
  return set;
}

}  // namespace hoist::transport
