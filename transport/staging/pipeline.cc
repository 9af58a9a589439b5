#include "transport/staging/pipeline.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "transport/packed/decoder_maker.h"
#include "transport/staging/slot_plan.h"

namespace hoist::transport {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point z) {
  return std::chrono::duration<double>(z - a).count();
}

std::uint64_t Extent(std::uint64_t pitch, std::uint64_t width, std::uint64_t rows, bool* overflow) {
  if (rows <= 1) return width;
  std::uint64_t e = 0;
  if (__builtin_mul_overflow(rows - 1, pitch, &e) || __builtin_add_overflow(e, width, &e)) {
    *overflow = true;
    return 0;
  }
  return e;
}

std::string CopyLabel(int i, const std::vector<std::string>& paths, std::uint32_t file) {
  std::string s = "copy " + std::to_string(i);
  if (file < paths.size()) s += " (file " + paths[file] + ")";
  return s;
}

// ----- timing, written once ----------------------------------------------------------------

// One timed piece of work of one thread (a task read, a pageable copy).
struct LocalSpan {
  double start_s;
  double seconds;
  std::uint64_t bytes;
  std::uint32_t seq;
};

// What one worker thread did: its spans, their total time and (auto) how it read.
struct Lane {
  std::vector<LocalSpan> spans;
  double busy = 0;
  std::uint64_t cold = 0;      // bytes read through the cold source
  std::uint64_t resident = 0;  // bytes found in the page cache just before reading
  void Add(double start_s, double seconds, std::uint64_t bytes, std::uint32_t seq) {
    spans.push_back(LocalSpan{start_s, seconds, bytes, seq});
    busy += seconds;
  }
};

// The phase the lanes' spans cover (first start to last end, busy = their sum); ran only when
// they moved bytes. *bytes gets the bytes they moved.
PhaseTiming LanesPhase(const std::vector<Lane>& lanes, std::uint64_t* bytes) {
  double first = 1e300, last = -1e300, total_busy = 0;
  *bytes = 0;
  for (const Lane& lane : lanes) {
    for (const LocalSpan& s : lane.spans) {
      first = std::min(first, s.start_s);
      last = std::max(last, s.start_s + s.seconds);
      *bytes += s.bytes;
    }
    total_busy += lane.busy;
  }
  if (*bytes == 0) return PhaseTiming{};
  return PhaseTiming{first, last - first, total_busy, *bytes, true};
}

// A device span before it is logged (SpanEmitter::Device names it): a slot's copies or decode, a
// submit, or the registered mode's one span; the slot and sequence it belongs to, or -1.
struct DeviceSpan {
  int slot = -1;
  std::int64_t seq = -1;
  double start_s = 0;
  double seconds = 0;
  std::uint64_t bytes = 0;
};

// The phase the h2d spans cover; unchanged when there are none.
void SpansPhase(const std::vector<DeviceSpan>& spans, std::uint64_t bytes, PhaseTiming* out) {
  if (spans.empty()) return;
  double first = 1e300, last = -1e300, busy = 0;
  for (const DeviceSpan& s : spans) {
    first = std::min(first, s.start_s);
    last = std::max(last, s.start_s + s.seconds);
    busy += s.seconds;
  }
  *out = PhaseTiming{first, last - first, busy, bytes, true};
}

// Appends the fill lanes' spans and the device lanes' spans (h2d, decode, submit: one per slot
// each) to the report, coalesced per lane when there are more than max_spans. The device lanes
// get up to half of max_spans and the fill lanes the rest, so that a load's per-slot spans stay
// whole unless it has thousands of slots.
class SpanEmitter {
 public:
  SpanEmitter(std::size_t fill_total, std::size_t device_total, std::size_t max_spans, SpanLog* out)
      : device_budget_(std::min(device_total, std::max<std::size_t>(max_spans / 2, 1))),
        group_(GroupOf(fill_total, std::max<std::size_t>(max_spans - device_budget_, 1))),
        device_group_(GroupOf(device_total, device_budget_)),
        out_(*out) {
    out_.Reserve(out_.size() + (fill_total + group_ - 1) / group_ +
                 (device_total + device_group_ - 1) / device_group_);
  }

  // Lane "fill-<t>", "<what> seq N" for each fill thread's reads.
  void Fill(const std::vector<Lane>& lanes, const char* what) {
    const std::uint32_t label = out_.Label(what);
    for (std::size_t t = 0; t < lanes.size(); ++t) {
      const auto& v = lanes[t].spans;
      const std::uint32_t lane = out_.Lane("fill-" + std::to_string(t));
      for (std::size_t i = 0; i < v.size(); i += group_) {
        std::size_t j = std::min(v.size(), i + group_);
        std::uint64_t bytes = 0;
        for (std::size_t x = i; x < j; ++x) bytes += v[x].bytes;
        Emit(lane, label, v[i].seq, v[i].start_s, v[j - 1].start_s + v[j - 1].seconds, bytes,
             j - i);
      }
    }
  }

  // The device spans of one lane in start order, each labelled "<slot_label> <slot>" ("slot 2 seq
  // 478") or, without a slot, `slot_label` alone ("seq 478" for an empty one).
  void Device(std::vector<DeviceSpan>& spans, const char* lane_name, const char* slot_label) {
    std::sort(spans.begin(), spans.end(),
              [](const DeviceSpan& a, const DeviceSpan& b) { return a.start_s < b.start_s; });
    const std::uint32_t lane = out_.Lane(lane_name);
    std::vector<std::uint32_t> labels;  // by slot + 1
    for (std::size_t i = 0; i < spans.size(); i += device_group_) {
      std::size_t j = std::min(spans.size(), i + device_group_);
      std::uint64_t bytes = 0;
      double end = 0;
      for (std::size_t x = i; x < j; ++x) {
        bytes += spans[x].bytes;
        end = std::max(end, spans[x].start_s + spans[x].seconds);
      }
      const DeviceSpan& s = spans[i];
      Emit(lane, LabelOf(s.slot, slot_label, &labels), s.seq, s.start_s, end, bytes, j - i);
    }
  }

 private:
  static std::size_t GroupOf(std::size_t total, std::size_t max_spans) {
    const std::size_t cap = std::max<std::size_t>(max_spans, 1);
    return std::max<std::size_t>((total + cap - 1) / cap, 1);
  }

  std::uint32_t LabelOf(int slot, const char* slot_label, std::vector<std::uint32_t>* labels) {
    const std::size_t i = static_cast<std::size_t>(slot + 1);
    if (i >= labels->size()) labels->resize(i + 1, ~0u);
    std::uint32_t& label = (*labels)[i];
    if (label == ~0u) {
      label = out_.Label(slot < 0 ? std::string(slot_label)
                                  : std::string(slot_label) + " " + std::to_string(slot));
    }
    return label;
  }

  void Emit(std::uint32_t lane, std::uint32_t label, std::int64_t seq, double start, double end,
            std::uint64_t bytes, std::size_t n) {
    out_.Add(Span{lane, label, seq, static_cast<std::uint32_t>(n), start, end - start, bytes});
  }

  const std::size_t device_budget_, group_, device_group_;
  SpanLog& out_;
};

// ----- what every executor shares ------------------------------------------------------------

// The bytes of the plan's copies (~0 on overflow).
std::uint64_t CopyBytes(const proto::RankPlan& plan) {
  std::uint64_t total = 0;
  for (const proto::Copy& c : plan.copies()) {
    std::uint64_t n = 0;
    if (__builtin_mul_overflow(c.width(), c.rows(), &n) ||
        __builtin_add_overflow(total, n, &total)) {
      return ~0ull;
    }
  }
  return total;
}

// The slot a load smaller than one slot needs on a device that keeps no staging (each load makes
// and touches its ring): its bytes rounded up to 64 KiB, so that a small model does not touch a
// 16 MiB slot for a few hundred KiB. Unchanged where a kept ring exists (it is reused as made).
std::uint64_t LoneSlotBytes(const proto::RankPlan& plan) {
  constexpr std::uint64_t kRound = 64u << 10;
  const std::uint64_t total = CopyBytes(plan);
  if (total > ~0ull - kRound) return ~0ull;
  return std::max(kRound, (total + kRound - 1) / kRound * kRound);
}

// Auto mode's verdict on one file, taken once before the fill (Runner::JudgeFiles).
enum class Whole : char { kAskPerPiece, kCold, kHot };

// The run's inputs, its geometry and slot cut, the copy stream with its time base, the events to
// destroy at the end, and the h2d spans seen so far. Set up by Runner before any executor runs;
// executors change only `events`, `h2d_spans` (under their own locks) and the report.
struct RunContext {
  RunContext(Device& d, const DeviceBuffer& a, const proto::RankPlan& p,
             const std::vector<FileSources>& s, const PipelineOptions& opts, PipelineReport& r)
      : dev(d), arena(a), plan(p), sources(s), o(opts), rep(r) {}

  Device& dev;
  const DeviceBuffer& arena;
  const proto::RankPlan& plan;
  const std::vector<FileSources>& sources;
  const PipelineOptions& o;
  PipelineReport& rep;

  int threads = 1;
  int slots = 1;  // the ring's slots: the options', or deeper for a wholly cold load
  std::uint64_t slot_bytes = 0;
  std::uint64_t chunk = 0;
  bool staged = true;
  bool deep = false;  // the ring widened for a wholly cold load (PipelineOptions::read_depth_bytes)
  SlotPlan cut;
  std::vector<char> piece_cold;   // staged: cold by the precomputed residency, per piece
  std::vector<Whole> file_whole;  // auto: each file read cold or mapped throughout, or asked

  StreamId stream = -1;
  EventId t0_event = -1;  // recorded and completed at set-up: device times are relative to it
  double t0_s = 0;        // t0_event's host time since o.origin
  std::vector<EventId> events;
  std::vector<DeviceSpan> h2d_spans;

  // Packed work: blocks go to device slots on `stream` and are decoded on decode_stream.
  PackedWork* work = nullptr;  // its decode streams and names move to `decode` at set-up
  DecodeSet decode;            // the work's streams with the cut's jobs (the decoder's)
  StreamId decode_stream = -1;
  DeviceBuffer device_slots;  // device_slot_count x device_slot_stride
  int device_slot_count = 0;  // kDeviceSlotsPerSlot x the ring (at most one per sequence)
  std::uint64_t device_slot_stride = 0;  // DeviceSlotBytes(cut)
  std::vector<DeviceSpan> decode_spans;
  // The stream that ends a slot's work: slot end events and milestones are recorded there.
  StreamId tail() const { return work != nullptr ? decode_stream : stream; }

  double Since(Clock::time_point t) const { return Seconds(o.origin, t); }
  std::byte* ArenaAt(std::uint64_t off) const { return static_cast<std::byte*>(arena.ptr) + off; }
  Result<EventId> NewEvent() {
    HOIST_ASSIGN_OR_RETURN(EventId e, dev.CreateEvent(true));
    events.push_back(e);
    return e;
  }
  // The span of the work between two timed events recorded on a stream (slot and seq: -1 for
  // none).
  Result<DeviceSpan> SpanBetween(EventId a, EventId b, int slot, std::int64_t seq) const {
    HOIST_ASSIGN_OR_RETURN(double ea, dev.Elapsed(t0_event, a));
    HOIST_ASSIGN_OR_RETURN(double eb, dev.Elapsed(t0_event, b));
    return DeviceSpan{slot, seq, t0_s + ea, eb - ea, 0};
  }
  void AddProgress(std::uint64_t bytes) const {
    if (o.progress != nullptr) o.progress->fetch_add(bytes, std::memory_order_relaxed);
  }

  // Packed: the decoder, made on a helper thread while the ring fills (started by SetupDecode;
  // the first decode waits for it). Its making is a span on lane "decoder".
  DecoderMaker decoder;
};

// Auto's residency judgement (Runner::JudgeFiles): an extent of at least kJudgeSampleAbove bytes
// is first sampled in kJudgeSamples windows of kJudgeWindow bytes.
constexpr int kJudgeSamples = 64;
constexpr std::uint64_t kJudgeWindow = 1ull << 20;
constexpr std::uint64_t kJudgeSampleAbove = 8ull * kJudgeSamples * kJudgeWindow;

// Packed: device slots per staging slot. A staging slot is free again once its blocks are in a
// device slot; the device slot, once they are decoded (the copy stream waits for that on the
// device; it has finished long before in a load the link paces).
constexpr int kDeviceSlotsPerSlot = 2;
// Packed: decode records (events and span) per device slot: more than one, so that the record
// of the decode a device slot waits for is still intact when the slot is taken again.
constexpr int kDecodeRecordsPerDeviceSlot = 2;

// Runs fn and times it as a fully busy phase (bytes left to fn).
template <class F>
void TimePhase(const RunContext& cx, PhaseTiming* phase, F&& fn) {
  const Clock::time_point a = Clock::now();
  fn();
  const Clock::time_point z = Clock::now();
  phase->start_s = cx.Since(a);
  phase->seconds = phase->busy_s = Seconds(a, z);
  phase->ran = true;
}

// Starts `n` threads running fn(t) and joins them. A thread the OS refuses is reported through
// on_refused (the others still run to their end and are joined).
template <class F, class R>
void RunThreads(int n, F&& fn, R&& on_refused) {
  std::vector<std::thread> pool;
  pool.reserve(n);
  try {
    for (int t = 0; t < n; ++t) pool.emplace_back([&fn, t] { fn(t); });
  } catch (const std::system_error& e) {
    on_refused(Status::ResourceExhausted("pipeline: could not start fill thread " +
                                         std::to_string(pool.size()) + " of " + std::to_string(n) +
                                         ": " + e.what()));
  }
  for (auto& th : pool) th.join();
}

// The device copy of a direct-mode piece: from the file's mapping straight to the arena.
Copy2D DirectCopy(const RunContext& cx, const SlotPiece& p) {
  Copy2D c;
  c.dst = cx.ArenaAt(p.dst_off);
  c.dst_pitch = p.dst_pitch;
  c.src = cx.sources[p.file].primary->mapping() + p.src;
  c.src_pitch = p.src_pitch;
  c.width = p.width;
  c.rows = p.rows;
  return c;
}

// The first error of several threads, and a flag they poll to stop.
class FirstError {
 public:
  void Set(Status s) {
    std::lock_guard lock(mu_);
    if (status_.ok()) status_ = std::move(s);
    failed_.store(true);
  }
  bool failed() const { return failed_.load(); }
  Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  Status status_;
  std::atomic<bool> failed_{false};
};

// ----- milestones ------------------------------------------------------------------------------

// Records milestone events on the copy stream once every slot holding their copies is enqueued
// (PipelineOptions::milestone_copies). Threading: not thread-safe; the slot ring calls OnSubmitted
// under its submit lock, the runner calls ReachAll after the fill threads are joined.
class Milestones {
 public:
  explicit Milestones(RunContext& cx) : cx_(cx) {}

  // Marks slot q enqueued; once every slot up to some S is, records the milestones whose copies
  // all lie in slots <= S.
  Status OnSubmitted(std::uint32_t q) {
    if (cx_.o.milestone_copies.empty()) return Status::Ok();
    const std::uint64_t seqs = cx_.cut.seqs();
    if (submitted_.size() < seqs) submitted_.resize(seqs, false);
    submitted_[q] = true;
    while (prefix_ < seqs && submitted_[prefix_]) ++prefix_;
    std::size_t m = reached_;
    while (m < cx_.o.milestone_copies.size() &&
           LastSeqOfCopies(cx_.cut, cx_.o.milestone_copies[m]) <
               static_cast<std::int64_t>(prefix_)) {
      ++m;
    }
    return Reach(m);
  }

  Status ReachAll() { return Reach(cx_.o.milestone_copies.size()); }

 private:
  // Records milestones [reached_, upto) on the copy stream and announces them.
  Status Reach(std::size_t upto) {
    for (; reached_ < upto; ++reached_) {
      HOIST_RETURN_IF_ERROR(cx_.dev.Record(cx_.o.milestone_events[reached_], cx_.tail()));
      if (cx_.o.on_milestone) cx_.o.on_milestone(static_cast<int>(reached_));
    }
    return Status::Ok();
  }

  RunContext& cx_;
  std::vector<bool> submitted_;
  std::uint64_t prefix_ = 0;  // slots [0, prefix_) all enqueued
  std::size_t reached_ = 0;
};

// ----- read-mode strategy: one task's pieces from the files into a slot ------------------------

// Reads a task's pieces with the mode's sources: the primary source, or (auto) the cold source
// for pieces mostly absent from the page cache, decided by the precomputed residency or, without
// one, by asking the page cache just before reading. Threading: any number of fill threads.
class TaskReader {
 public:
  explicit TaskReader(const RunContext& cx) : cx_(cx) {}

  // Reads task t into `slot`; *cold_bytes and *resident_bytes grow by what it read cold and
  // what it found resident.
  Status Read(const SlotTask& t, std::byte* slot, std::uint64_t* cold_bytes,
              std::uint64_t* resident_bytes) const {
    thread_local std::vector<RowsRead> batch;
    thread_local std::vector<char> cold;
    const std::vector<SlotPiece>& pieces = cx_.cut.pieces;
    cold.resize(t.end - t.begin);
    for (std::size_t i = t.begin; i < t.end; ++i) cold[i - t.begin] = Cold(i, resident_bytes);
    std::size_t i = t.begin;
    while (i < t.end) {  // one batch per run of pieces of one file and one source
      const SlotPiece& first = pieces[i];
      const bool is_cold = cold[i - t.begin];
      batch.clear();
      std::size_t j = i;
      for (; j < t.end && pieces[j].file == first.file && cold[j - t.begin] == is_cold; ++j) {
        const SlotPiece& p = pieces[j];
        batch.push_back(RowsRead{p.src, p.src_pitch, p.width, p.rows, slot + p.dst_off, p.width});
        if (is_cold) *cold_bytes += p.bytes();
      }
      const FileSources& fs = cx_.sources[first.file];
      Source* src = is_cold ? fs.cold : fs.primary;
      HOIST_RETURN_IF_ERROR(src->ReadMany(batch.data(), batch.size()));
      i = j;
    }
    return Status::Ok();
  }

 private:
  // Whether piece i reads from the cold source. Auto mode without a precomputed residency asks
  // the page cache now and counts the resident bytes: the cold source first (cachestat on its
  // descriptor, so a load found cold never maps its files), else the primary source's mapping.
  // Where neither can tell, the piece is read through the mapping (always correct).
  bool Cold(std::size_t i, std::uint64_t* resident) const {
    const SlotPiece& p = cx_.cut.pieces[i];
    const FileSources& fs = cx_.sources[p.file];
    if (cx_.o.mode != ReadMode::kAuto || fs.cold == nullptr || fs.residency != nullptr) {
      return cx_.piece_cold[i];
    }
    if (cx_.file_whole[p.file] != Whole::kAskPerPiece)
      return cx_.file_whole[p.file] == Whole::kCold;
    const RowsRead block{p.src, p.src_pitch, p.width, p.rows, nullptr, p.width};
    std::optional<std::uint64_t> here = fs.cold->ResidentNow(block);
    if (!here) here = fs.primary->ResidentNow(block);
    if (!here) return cx_.piece_cold[i];
    *resident += *here;
    return *here * 2 < p.bytes();
  }

  const RunContext& cx_;
};

// ----- DMA strategy: the ring of staging slots ---------------------------------------------------

// The staged modes' DMA side: K staging slots (allocated eagerly, or lazily on first use) that fill
// threads acquire for a slot sequence number q (waiting, by its end event, for the slot's copies
// of q - K to complete), fill, and hand back as host->device copies enqueued on the one stream
// between two timing events. The first failure stops every waiter. Drain waits for what is still
// in flight; FreeStaging releases the slots. Threading: Acquire, Submit, TaskDone, Fail and
// EnsureAllocated from any fill thread; Drain, FreeStaging and ReportAlloc after they are joined.
class SlotRing {
 public:
  SlotRing(RunContext& cx, Milestones& milestones, int slots)
      : cx_(cx), milestones_(milestones), slots_(slots) {
    remaining_.assign(cx.cut.seqs(), 0);
    for (const SlotTask& t : cx.cut.tasks) ++remaining_[t.seq];
  }

  int size() const { return static_cast<int>(slots_.size()); }
  std::byte* buffer(int k) const { return slots_[k].buf.ptr; }
  bool failed() const { return failed_.load(); }

  Status CreateEvents() {
    for (int k = 0; k < size(); ++k) {
      HOIST_ASSIGN_OR_RETURN(EventId a, cx_.NewEvent());
      HOIST_ASSIGN_OR_RETURN(EventId b, cx_.NewEvent());
      ev_start_.push_back(a);
      ev_end_.push_back(b);
    }
    if (cx_.work == nullptr) return Status::Ok();
    HOIST_ASSIGN_OR_RETURN(flush_event_, cx_.NewEvent());
    for (int i = 0; i < kDecodeRecordsPerDeviceSlot * cx_.device_slot_count; ++i) {
      HOIST_ASSIGN_OR_RETURN(EventId a, cx_.NewEvent());
      HOIST_ASSIGN_OR_RETURN(EventId b, cx_.NewEvent());
      decodes_.push_back(Decode{a, b});
    }
    return Status::Ok();
  }

  Status AllocateAll() {
    for (Slot& s : slots_) HOIST_RETURN_IF_ERROR(AllocSlot(s));
    return Status::Ok();
  }

  // Allocates slot k's staging unless another thread is doing it (then waits for that thread).
  Status EnsureAllocated(int k) {
    std::unique_lock lock(mu_);
    return EnsureAllocated(slots_[k], lock);
  }

  void Fail(Status s) {
    std::lock_guard lock(mu_);
    if (status_.ok()) status_ = std::move(s);
    failed_.store(true);
    cv_.notify_all();
  }

  Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }

  // Waits until slot k may take sequence q: its copies of q - K completed.
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
        Result<DeviceSpan> span = WaitSlot(k, need);
        lock.lock();
        slot.waiting = false;
        if (!span.ok()) {
          cv_.notify_all();
          return span.status();
        }
        cx_.h2d_spans.push_back(std::move(*span));
        slot.waited = need;
        cv_.notify_all();
      } else {
        cv_.wait(lock);
      }
    }
    return Status::Ok();
  }

  // One task of sequence q is read; true when it was the last.
  bool TaskDone(std::uint32_t q) {
    std::lock_guard lock(mu_);
    return --remaining_[q] == 0;
  }

  // Enqueues sequence q's host->device copies out of its slot (q's ops, contiguously). The time
  // from asking for the submit lock to the last call is a span on lane "submit".
  Status Submit(std::uint32_t q) {
    const int k = static_cast<int>(q % slots_.size());
    {
      const Clock::time_point a = Clock::now();
      std::lock_guard lock(submit_mu_);
      HOIST_RETURN_IF_ERROR(cx_.dev.Record(ev_start_[k], cx_.stream));
      for (std::size_t i = cx_.cut.seq_ops[q]; i < cx_.cut.seq_ops[q + 1]; ++i) {
        HOIST_RETURN_IF_ERROR(cx_.dev.CopyAsync(
            SlotOpCopy(cx_.cut.ops[i], slots_[k].buf.ptr, cx_.arena.ptr), cx_.stream));
      }
      if (cx_.work != nullptr) {
        HOIST_RETURN_IF_ERROR(SubmitDecode(q, k));  // records ev_end_[k] after its copy
      } else {
        HOIST_RETURN_IF_ERROR(cx_.dev.Record(ev_end_[k], cx_.stream));
        HOIST_RETURN_IF_ERROR(milestones_.OnSubmitted(q));
      }
      submits_.push_back(Timed{q, a, Clock::now()});
    }
    std::lock_guard lock(mu_);
    slots_[k].submitted = q;
    bytes_h2d_ += cx_.cut.seq_bytes[q];
    cx_.AddProgress(cx_.cut.seq_bytes[q]);
    cv_.notify_all();
    return Status::Ok();
  }

  // Waits for every submitted slot, oldest first, then the stream: the first error.
  Status Drain() {
    Status status;
    std::vector<std::pair<std::int64_t, int>> outstanding;
    for (int k = 0; k < size(); ++k) {
      if (slots_[k].submitted > slots_[k].waited) outstanding.emplace_back(slots_[k].submitted, k);
    }
    std::sort(outstanding.begin(), outstanding.end());
    for (auto [q, k] : outstanding) {
      Result<DeviceSpan> span = WaitSlot(k, q);
      if (!span.ok()) {
        if (status.ok()) status = span.status();
        continue;
      }
      cx_.h2d_spans.push_back(std::move(*span));
      slots_[k].waited = q;
    }
    if (cx_.work != nullptr && !failed()) {  // packed: decodes still waiting for the decoder
      std::lock_guard lock(submit_mu_);
      Status s = FlushDecodes();
      if (status.ok()) status = s;
    }
    for (std::size_t i = 0; i < decodes_.size(); ++i) {  // packed: oldest submit first
      Status s = CollectDecode(decodes_[(decode_submits_ + i) % decodes_.size()]);
      if (status.ok()) status = s;
    }
    Status sync = cx_.dev.Synchronize(cx_.stream);
    if (status.ok()) status = sync;
    if (cx_.work != nullptr) {
      sync = cx_.dev.Synchronize(cx_.decode_stream);
      if (status.ok()) status = sync;
      Result<DecoderId> decoder = cx_.decoder.Get();
      sync = decoder.ok() ? cx_.dev.DecoderStatus(*decoder) : decoder.status();
      if (status.ok()) status = sync;
    }
    return status;
  }

  // The staging_alloc phase and the bytes enqueued, into the report.
  void ReportAlloc() {
    PipelineReport& rep = cx_.rep;
    if (alloc_first_ != Clock::time_point::max()) {
      rep.staging_alloc = PhaseTiming{cx_.Since(alloc_first_), Seconds(alloc_first_, alloc_last_),
                                      alloc_busy_, 0, true};
      for (const Slot& s : slots_) rep.staging_alloc.bytes += s.buf.bytes;
    }
    rep.bytes_h2d = bytes_h2d_;
  }

  // The submit spans (after the fill threads are joined).
  std::vector<DeviceSpan> TakeSubmitSpans() const {
    std::vector<DeviceSpan> spans;
    spans.reserve(submits_.size());
    for (const Timed& t : submits_) {
      spans.push_back(
          DeviceSpan{-1, t.seq, cx_.Since(t.a), Seconds(t.a, t.z), cx_.cut.seq_bytes[t.seq]});
    }
    return spans;
  }

  // Frees every allocated slot (the stream must have drained): the first error.
  Status FreeStaging() {
    Status status;
    TimePhase(cx_, &cx_.rep.staging_free, [&] {
      for (Slot& s : slots_) {
        if (s.buf.ptr == nullptr) continue;
        std::uint64_t n = s.buf.bytes;
        Status f = cx_.dev.FreeStaging(s.buf);
        if (status.ok()) status = f;
        cx_.rep.staging_free.bytes += n;
      }
    });
    return status;
  }

 private:
  struct Slot {
    HostBuffer buf;
    bool allocating = false;
    std::int64_t submitted = -1;  // latest seq whose copies were enqueued
    std::int64_t waited = -1;     // latest seq whose completion was observed
    bool waiting = false;
  };

  // Packed: one decode's events, its sequence (-1: none, or collected) and device slot.
  struct Decode {
    EventId start = -1, end = -1;
    std::int64_t seq = -1;
    int slot = 0;
  };
  // Packed: a decode not yet enqueued: slot sequence q, the n-th submit.
  struct PendingDecode {
    std::uint32_t q;
    std::uint64_t n;
  };

  // Packed: slot q's blocks [lo, hi) to device slot d (submits take the device slots in turn),
  // ev_end_[k] on the copy stream after them, then on the decode stream, once they are there,
  // slot q's decode jobs (EnqueueDecode). Nothing here waits on the host before the copy is
  // enqueued: the copy stream waits, on the device, for the decode that last read slot d (submit
  // n - device slots). Until the decoder is made, decodes wait in pending_ and the copies go on:
  // the first device slots fill while the decoder's tables upload; a submit that needs a device
  // slot whose decode still waits, waits for the decoder (FlushDecodes). Called under submit_mu_.
  Status SubmitDecode(std::uint32_t q, int k) {
    const std::uint64_t n = decode_submits_++;
    const std::uint64_t slots = static_cast<std::uint64_t>(cx_.device_slot_count);
    if (n >= slots) {  // pending_ holds submit n - slots, if it holds any
      HOIST_RETURN_IF_ERROR(FlushDecodes());
      HOIST_RETURN_IF_ERROR(
          cx_.dev.StreamWait(cx_.stream, decodes_[(n - slots) % decodes_.size()].end));
    }
    const std::size_t first = cx_.cut.seq_jobs[q], last = cx_.cut.seq_jobs[q + 1];
    std::byte* dslot = DeviceSlot(n);
    if (first < last) {
      const std::uint64_t lo = cx_.decode.jobs[first].src;
      const std::uint64_t hi = cx_.decode.jobs[last - 1].src + cx_.decode.jobs[last - 1].bytes;
      Copy2D c;
      c.dst = dslot + lo;
      c.src = slots_[k].buf.ptr + lo;
      c.width = hi - lo;
      HOIST_RETURN_IF_ERROR(cx_.dev.CopyAsync(c, cx_.stream));
    }
    HOIST_RETURN_IF_ERROR(cx_.dev.Record(ev_end_[k], cx_.stream));
    if (!cx_.decoder.Ready()) {  // pending_ then holds submits 0 to n (readiness never reverts)
      pending_.push_back(PendingDecode{q, n});
      return Status::Ok();
    }
    HOIST_RETURN_IF_ERROR(FlushDecodes());  // made: returns at once
    HOIST_RETURN_IF_ERROR(cx_.dev.StreamWait(cx_.decode_stream, ev_end_[k]));
    return EnqueueDecode(PendingDecode{q, n});
  }

  // Packed: submit n's device slot (submits take them in turn), its index and first byte.
  int DeviceSlotIndex(std::uint64_t n) const {
    return static_cast<int>(n % static_cast<std::uint64_t>(cx_.device_slot_count));
  }
  std::byte* DeviceSlot(std::uint64_t n) const {
    return static_cast<std::byte*>(cx_.device_slots.ptr) +
           DeviceSlotIndex(n) * cx_.device_slot_stride;
  }

  // Packed: enqueues the decodes that wait for the decoder, once it is made (its error is
  // theirs). The decode stream first waits for every copy enqueued so far: theirs are among
  // them. Under submit_mu_.
  Status FlushDecodes() {
    if (pending_.empty()) return Status::Ok();
    HOIST_RETURN_IF_ERROR(cx_.decoder.Get().status());
    HOIST_RETURN_IF_ERROR(cx_.dev.Record(flush_event_, cx_.stream));
    HOIST_RETURN_IF_ERROR(cx_.dev.StreamWait(cx_.decode_stream, flush_event_));
    for (const PendingDecode& p : pending_) HOIST_RETURN_IF_ERROR(EnqueueDecode(p));
    pending_.clear();
    return Status::Ok();
  }

  // Packed: slot q's decode jobs (submit n, in device slot n mod device slots) on the decode
  // stream, between the events of decode record n (records taken in turn; as there are more
  // records than device slots, a record is intact until its device slot's next copy has waited
  // for it); the record's previous use (submit n - records) is collected first. Then the
  // milestones that q completes. Under submit_mu_, its copy on the decode stream's side.
  Status EnqueueDecode(const PendingDecode& p) {
    const std::size_t first = cx_.cut.seq_jobs[p.q], last = cx_.cut.seq_jobs[p.q + 1];
    Decode& rec = decodes_[p.n % decodes_.size()];
    HOIST_RETURN_IF_ERROR(CollectDecode(rec));
    HOIST_RETURN_IF_ERROR(cx_.dev.Record(rec.start, cx_.decode_stream));
    if (first < last) {
      HOIST_ASSIGN_OR_RETURN(DecoderId decoder, cx_.decoder.Get());
      HOIST_RETURN_IF_ERROR(cx_.dev.DecodeAsync(decoder, first, last - first, DeviceSlot(p.n),
                                                cx_.arena.ptr, cx_.decode_stream));
    }
    HOIST_RETURN_IF_ERROR(cx_.dev.Record(rec.end, cx_.decode_stream));
    rec.seq = p.q;
    rec.slot = DeviceSlotIndex(p.n);
    return milestones_.OnSubmitted(p.q);
  }

  // Packed: waits for a decode record's decode (if it holds a sequence) and keeps its span (lane
  // "decode-0"). Under submit_mu_, or after the fill threads are joined.
  Status CollectDecode(Decode& rec) {
    if (rec.seq < 0) return Status::Ok();
    const std::int64_t q = rec.seq;
    rec.seq = -1;
    HOIST_RETURN_IF_ERROR(cx_.dev.Wait(rec.end));
    HOIST_ASSIGN_OR_RETURN(DeviceSpan span, cx_.SpanBetween(rec.start, rec.end, rec.slot, q));
    span.seconds = std::max(0.0, span.seconds);
    for (std::size_t j = cx_.cut.seq_jobs[q]; j < cx_.cut.seq_jobs[q + 1]; ++j) {
      span.bytes += std::uint64_t{cx_.decode.jobs[j].values} * 2;
    }
    std::lock_guard lock(mu_);
    cx_.decode_spans.push_back(std::move(span));
    return Status::Ok();
  }

  Status AllocSlot(Slot& slot) {
    Clock::time_point a = Clock::now();
    Result<HostBuffer> b = cx_.dev.AllocateStaging(cx_.slot_bytes, cx_.o.staging);
    Clock::time_point z = Clock::now();
    std::lock_guard lock(mu_);
    alloc_first_ = std::min(alloc_first_, a);
    alloc_last_ = std::max(alloc_last_, z);
    alloc_busy_ += Seconds(a, z);
    if (!b.ok()) return b.status();
    slot.buf = *b;
    return Status::Ok();
  }

  // mu_ held through `lock`.
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

  // mu_ released. Waits for slot k's copies of sequence q (packed: its blocks are in their
  // device slot) and returns their span.
  Result<DeviceSpan> WaitSlot(int k, std::int64_t q) {
    HOIST_RETURN_IF_ERROR(cx_.dev.Wait(ev_end_[k]));
    HOIST_ASSIGN_OR_RETURN(DeviceSpan s, cx_.SpanBetween(ev_start_[k], ev_end_[k], k, q));
    s.seconds = std::max(0.0, s.seconds);
    s.bytes = cx_.cut.seq_bytes[q];
    return s;
  }

  RunContext& cx_;
  Milestones& milestones_;
  std::vector<EventId> ev_start_, ev_end_;  // ev_end_: the slot's copies are out of it
  std::vector<Decode> decodes_;             // packed; guarded by submit_mu_
  std::uint64_t decode_submits_ = 0;        // packed; guarded by submit_mu_
  std::vector<PendingDecode> pending_;      // packed, until the decoder is made; submit_mu_
  EventId flush_event_ = -1;                // packed: the copies before a flush of pending_

  std::mutex mu_;  // guards slots_, remaining_, status_, cx_.h2d_spans, alloc stats, bytes_h2d_
  std::condition_variable cv_;
  std::mutex submit_mu_;  // one slot's ops are enqueued contiguously; guards submits_
  struct Timed {          // a submit: its sequence, from asking for the lock to its last call
    std::uint32_t seq;
    Clock::time_point a, z;
  };
  std::vector<Timed> submits_;
  std::vector<Slot> slots_;
  std::vector<int> remaining_;  // tasks of each seq not yet read
  std::atomic<bool> failed_{false};
  Status status_;
  Clock::time_point alloc_first_ = Clock::time_point::max();
  Clock::time_point alloc_last_ = Clock::time_point::min();
  double alloc_busy_ = 0;
  std::uint64_t bytes_h2d_ = 0;
};

// ----- the executors, one per way the bytes travel
// -------------------------------------------------

// Staged modes (buffered, mmap, direct, auto): T fill threads take tasks in order, read them into
// the ring's slots, and the thread completing a slot's last task enqueues its copies; then the
// ring drains and frees its staging.
class StagedExecutor {
 public:
  StagedExecutor(RunContext& cx, Milestones& milestones)
      : cx_(cx),
        ring_(cx, milestones, static_cast<int>(std::min<std::uint64_t>(cx.slots, cx.cut.seqs()))),
        reader_(cx) {}

  Status Run() {
    if (cx_.cut.seqs() == 0) return Status::Ok();
    cx_.rep.slots = ring_.size();
    HOIST_RETURN_IF_ERROR(ring_.CreateEvents());
    Status status = cx_.o.lazy_staging ? Status::Ok() : ring_.AllocateAll();
    std::vector<Lane> lanes(cx_.threads);
    if (status.ok()) {
      RunThreads(
          cx_.threads, [this, &lanes](int t) { FillLoop(t, &lanes[t]); },
          [this](Status s) { ring_.Fail(std::move(s)); });
      status = ring_.status();
    }
    ReportRead(lanes);
    Status drained;  // every submitted slot completes before staging can go
    TimePhase(cx_, &cx_.rep.drain, [&] { drained = ring_.Drain(); });
    if (status.ok()) status = drained;
    ring_.ReportAlloc();
    SpansPhase(cx_.h2d_spans, cx_.rep.bytes_h2d, &cx_.rep.h2d);
    for (const DeviceSpan& d : cx_.decode_spans) cx_.rep.bytes_decoded += d.bytes;
    if (!cx_.decode_spans.empty()) {
      SpansPhase(cx_.decode_spans, cx_.rep.bytes_decoded, &cx_.rep.decode);
    }
    Status freed = ring_.FreeStaging();
    if (status.ok()) status = freed;
    std::vector<DeviceSpan> submits = ring_.TakeSubmitSpans();
    SpanEmitter emit(FillSpanCount(lanes),
                     cx_.h2d_spans.size() + cx_.decode_spans.size() + submits.size(),
                     cx_.o.max_spans, &cx_.rep.spans);
    emit.Fill(lanes, "read");
    emit.Device(cx_.h2d_spans, "h2d-0", "slot");
    emit.Device(cx_.decode_spans, "decode-0", "device slot");
    emit.Device(submits, "submit", "");
    return status;
  }

 private:
  void FillLoop(int tid, Lane* lane) {
    // Lazy staging: thread t first sets up slot t, so the slots' set-up (touching pages,
    // registering them) runs in parallel while the other threads already fill slot 0.
    if (tid < ring_.size()) {
      Status s = ring_.EnsureAllocated(tid);
      if (!s.ok()) return ring_.Fail(std::move(s));
    }
    const std::vector<SlotTask>& tasks = cx_.cut.tasks;
    for (;;) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= tasks.size() || ring_.failed()) return;
      if (cx_.o.cancel != nullptr && cx_.o.cancel->load()) {
        return ring_.Fail(Status::Aborted("pipeline cancelled"));
      }
      const SlotTask& t = tasks[i];
      const int k = static_cast<int>(t.seq % ring_.size());
      Status s = ring_.Acquire(k, t.seq);
      if (!s.ok()) return ring_.Fail(std::move(s));
      const Clock::time_point a = Clock::now();
      s = reader_.Read(t, ring_.buffer(k), &lane->cold, &lane->resident);
      const Clock::time_point z = Clock::now();
      if (!s.ok()) return ring_.Fail(std::move(s));
      lane->Add(cx_.Since(a), Seconds(a, z), t.bytes, t.seq);
      if (ring_.TaskDone(t.seq)) {
        s = ring_.Submit(t.seq);
        if (!s.ok()) return ring_.Fail(std::move(s));
      }
    }
  }

  void ReportRead(const std::vector<Lane>& lanes) {
    std::uint64_t bytes = 0;
    const PhaseTiming read = LanesPhase(lanes, &bytes);
    if (bytes > 0) cx_.rep.read = read;
    cx_.rep.bytes_read = bytes;
    for (const Lane& lane : lanes) {
      cx_.rep.bytes_cold += lane.cold;
      cx_.rep.bytes_resident += lane.resident;
    }
  }

  static std::size_t FillSpanCount(const std::vector<Lane>& lanes) {
    std::size_t total = 0;
    for (const Lane& lane : lanes) total += lane.spans.size();
    return total;
  }

  RunContext& cx_;
  SlotRing ring_;
  TaskReader reader_;
  std::atomic<std::size_t> next_{0};
};

// Pageable: no staging; T threads copy pieces synchronously straight from the files' mappings.
class PageableExecutor {
 public:
  explicit PageableExecutor(RunContext& cx) : cx_(cx) {}

  Status Run() {
    std::vector<Lane> lanes(cx_.threads);
    RunThreads(
        cx_.threads, [this, &lanes](int t) { CopyLoop(&lanes[t]); },
        [this](Status s) { error_.Set(std::move(s)); });
    std::uint64_t bytes = 0;
    const PhaseTiming phase = LanesPhase(lanes, &bytes);
    if (bytes > 0) cx_.rep.read = cx_.rep.h2d = phase;
    cx_.rep.bytes_read = cx_.rep.bytes_h2d = bytes;
    cx_.AddProgress(bytes);
    std::size_t total = 0;
    for (const Lane& lane : lanes) total += lane.spans.size();
    SpanEmitter emit(total, 0, cx_.o.max_spans, &cx_.rep.spans);
    emit.Fill(lanes, "pageable");
    return error_.status();
  }

 private:
  void CopyLoop(Lane* lane) {
    for (;;) {
      const std::size_t i = next_.fetch_add(1);
      if (i >= cx_.cut.tasks.size() || error_.failed()) return;
      const SlotPiece& p = cx_.cut.pieces[cx_.cut.tasks[i].begin];
      const Clock::time_point a = Clock::now();
      Status s = cx_.dev.CopySync(DirectCopy(cx_, p));
      const Clock::time_point z = Clock::now();
      if (!s.ok()) {
        return error_.Set(std::move(s).Annotate(cx_.sources[p.file].primary->path() +
                                                ": pageable copy at offset " +
                                                std::to_string(p.src)));
      }
      lane->Add(cx_.Since(a), Seconds(a, z), p.bytes(), 0);
    }
  }

  RunContext& cx_;
  std::atomic<std::size_t> next_{0};
  FirstError error_;
};

// Registered: the mapped files are registered with the device and every piece is one async copy
// from them, enqueued by this thread between two timing events; then the files are unregistered.
class RegisteredExecutor {
 public:
  explicit RegisteredExecutor(RunContext& cx) : cx_(cx) {}

  Status Run() {
    Status status;
    TimePhase(cx_, &cx_.rep.staging_alloc, [&] { status = RegisterFiles(); });
    if (status.ok()) status = CopyAll();
    TimePhase(cx_, &cx_.rep.staging_free, [&] {
      for (const void* p : registered_) {
        Status u = cx_.dev.UnregisterHost(p);
        if (status.ok()) status = u;
      }
    });
    cx_.rep.staging_free.bytes = cx_.rep.staging_alloc.bytes;
    SpanEmitter emit(0, cx_.h2d_spans.size(), cx_.o.max_spans, &cx_.rep.spans);
    emit.Device(cx_.h2d_spans, "h2d-0", "registered");
    return status;
  }

 private:
  // Registers each file the pieces read, once.
  Status RegisterFiles() {
    std::vector<bool> done(cx_.sources.size(), false);
    for (const SlotPiece& p : cx_.cut.pieces) {
      if (done[p.file]) continue;
      done[p.file] = true;
      const Source* s = cx_.sources[p.file].primary;
      Status status = cx_.dev.RegisterHost(s->mapping(), s->size(), /*read_only=*/true);
      if (!status.ok()) return status.Annotate(s->path());
      registered_.push_back(s->mapping());
      cx_.rep.staging_alloc.bytes += s->size();
    }
    return Status::Ok();
  }

  // Enqueues every piece between two events, waits, and reports the span.
  Status CopyAll() {
    HOIST_ASSIGN_OR_RETURN(EventId a, cx_.NewEvent());
    HOIST_ASSIGN_OR_RETURN(EventId b, cx_.NewEvent());
    Status status = cx_.dev.Record(a, cx_.stream);
    std::uint64_t bytes = 0;
    for (const SlotPiece& p : cx_.cut.pieces) {
      if (!status.ok()) break;
      status = cx_.dev.CopyAsync(DirectCopy(cx_, p), cx_.stream);
      bytes += p.bytes();
    }
    if (status.ok()) status = cx_.dev.Record(b, cx_.stream);
    if (status.ok()) status = cx_.dev.Wait(b);
    Status sync = cx_.dev.Synchronize(cx_.stream);
    if (status.ok()) status = sync;
    if (!status.ok()) return status;
    Result<DeviceSpan> span = cx_.SpanBetween(a, b, -1, -1);
    if (span.ok()) {
      span->bytes = bytes;
      cx_.h2d_spans.push_back(std::move(*span));
    }
    cx_.rep.bytes_read = cx_.rep.bytes_h2d = bytes;
    cx_.AddProgress(bytes);
    SpansPhase(cx_.h2d_spans, cx_.rep.bytes_h2d, &cx_.rep.h2d);
    cx_.rep.read = cx_.rep.h2d;
    return Status::Ok();
  }

  RunContext& cx_;
  std::vector<const void*> registered_;
};

// ----- the run
// -------------------------------------------------------------------------------------

// One RunPipeline call: checks the options and sources, cuts the plan, creates the copy stream,
// enqueues the fills, runs the mode's executor, records the milestones left, and always drains
// the stream and destroys what it created before returning.
class Runner {
 public:
  Runner(Device& dev, const DeviceBuffer& arena, const proto::RankPlan& plan,
         const std::vector<FileSources>& sources, const PipelineOptions& o, PipelineReport* rep,
         PackedWork* work = nullptr)
      : cx_(dev, arena, plan, sources, o, *rep), milestones_(cx_) {
    cx_.work = work;
  }

  Status Run() {
    Status set_up;
    TimePhase(cx_, &cx_.rep.setup, [&] { set_up = Setup(); });
    if (set_up.ok() && cx_.o.arena_ready) set_up = cx_.o.arena_ready();
    if (!set_up.ok()) {
      (void)Cleanup();  // what Setup created before it failed
      return set_up;
    }
    Status s = Body();
    if (s.ok()) s = milestones_.ReachAll();
    // Whatever happened, nothing may still read staging or write the arena when we return.
    if (cx_.stream >= 0) {
      Status sync = cx_.dev.Synchronize(cx_.stream);
      if (s.ok()) s = sync;
    }
    Status cleanup;
    SetupStep(
        [&] {
          cleanup = Cleanup();
          return "decoder, device slots, streams and events freed";
        },
        "teardown");
    if (s.ok()) s = cleanup;
    FreePackedInBackground();
    return s;
  }

 private:
  Status Setup() {
    HOIST_RETURN_IF_ERROR(Geometry());
    HOIST_RETURN_IF_ERROR(CheckSources());
    if (cx_.o.milestone_events.size() != cx_.o.milestone_copies.size()) {
      return Status::InvalidArgument("pipeline: milestone events and copy counts differ in size");
    }
    HOIST_RETURN_IF_ERROR(CheckPacked());
    if (cx_.staged && cx_.o.mode == ReadMode::kAuto) {
      SetupStep([&] {
        JudgeFiles();
        return "residency judged";
      });
    }
    Deepen();
    Chunk();
    SetupStep([&] { return Cut(); });
    Status s;
    SetupStep([&] {
      s = StartStream();
      return "copy stream started";
    });
    HOIST_RETURN_IF_ERROR(s);
    if (cx_.work == nullptr) return Status::Ok();
    SetupStep([&] {
      s = SetupDecode();
      return cx_.work != nullptr ? "decoder started" : "nothing to decode";
    });
    return s;
  }

  // Times one step of the set-up as a span on the "setup" lane (the tear-down's on lane
  // "teardown"), so that a report's timeline says where the `setup` phase and the load's tail
  // went. `fn` returns the span's name.
  template <typename Fn>
  void SetupStep(Fn fn, const char* lane = "setup") {
    const Clock::time_point a = Clock::now();
    std::string what = fn();
    const Clock::time_point z = Clock::now();
    cx_.rep.spans.Add(lane, what, cx_.Since(a), Seconds(a, z));
  }

  // The copy stream and the event every device span is timed from.
  Status StartStream() {
    HOIST_ASSIGN_OR_RETURN(cx_.stream, cx_.dev.CreateStream());
    HOIST_ASSIGN_OR_RETURN(cx_.t0_event, cx_.dev.CreateEvent(true));
    HOIST_RETURN_IF_ERROR(cx_.dev.Record(cx_.t0_event, cx_.stream));
    HOIST_RETURN_IF_ERROR(cx_.dev.Wait(cx_.t0_event));
    cx_.t0_s = cx_.Since(Clock::now());
    return Status::Ok();
  }

  // Packed work needs a staged mode and slots that hold its largest block.
  Status CheckPacked() const {
    if (cx_.work == nullptr) return Status::Ok();
    if (!cx_.staged) {
      return Status::InvalidArgument(
          "read mode " + std::string(ReadModeName(cx_.o.mode)) +
          " cannot load a packed checkpoint (its blocks are decoded out of the staging ring): "
          "use auto, mmap, direct or buffered");
    }
    if (cx_.work->decode.max_block_bytes > cx_.slot_bytes) {
      return Status::InvalidArgument(
          "a packed block of " + std::to_string(cx_.work->decode.max_block_bytes) +
          " bytes does not fit a staging slot of " + std::to_string(cx_.slot_bytes) +
          " bytes: raise the slot size (--slot-mib)");
    }
    for (const DecodeUnit& u : cx_.work->units) {
      if (u.file >= cx_.sources.size() || cx_.sources[u.file].primary == nullptr) {
        return Status::InvalidArgument("pipeline: packed blocks read file " +
                                       std::to_string(u.file) + " which has no source");
      }
    }
    return Status::Ok();
  }

  // Packed (Setup calls it only with work): the decode stream, the device slots and the decoder
  // (its jobs are the cut's).
  Status SetupDecode() {
    if (cx_.cut.jobs.empty()) {
      cx_.work = nullptr;  // nothing to decode: the plain path
      return Status::Ok();
    }
    // The device slots overlap the DMA with the decode: as many as the configured ring needs, not
    // a deep ring's (its depth is for the disk).
    const int ring = static_cast<int>(std::min<std::uint64_t>(cx_.o.slots, cx_.cut.seqs()));
    HOIST_ASSIGN_OR_RETURN(cx_.decode_stream, cx_.dev.CreateStream());
    cx_.device_slot_count = static_cast<int>(
        std::min<std::uint64_t>(std::uint64_t{kDeviceSlotsPerSlot} * ring, cx_.cut.seqs()));
    cx_.device_slot_stride = DeviceSlotBytes(cx_.cut);
    HOIST_ASSIGN_OR_RETURN(cx_.device_slots,
                           cx_.dev.Allocate(cx_.device_slot_count * cx_.device_slot_stride));
    // The work's streams, names and tables, and the cut's jobs, move to the decoder's set (the
    // cut and the work keep the rest).
    cx_.decode = cx_.work->decode.MoveTablesWith(std::move(cx_.cut.jobs));
    cx_.decoder.Start(cx_.dev, cx_.decode);  // the first slot's decode waits for it
    return Status::Ok();
  }

  // Threads, slot and chunk sizes from the options (defaults resolved), into the report.
  Status Geometry() {
    const PipelineOptions& o = cx_.o;
    cx_.threads = o.threads > 0 ? o.threads : DefaultFillThreads();
    if (cx_.threads > kMaxFillThreads) {
      return Status::InvalidArgument("pipeline: " + std::to_string(cx_.threads) +
                                     " fill threads; at most " + std::to_string(kMaxFillThreads));
    }
    if (o.slots < 1) return Status::InvalidArgument("pipeline: slots must be >= 1");
    if (o.slot_bytes < 1) return Status::InvalidArgument("pipeline: slot bytes must be >= 1");
    cx_.staged = Staged(o.mode);
    cx_.slots = o.slots;
    cx_.slot_bytes = o.slot_bytes;
    if (cx_.staged && cx_.work == nullptr && cx_.dev.KeptStagingBytes() == 0) {
      cx_.slot_bytes = std::min(cx_.slot_bytes, LoneSlotBytes(cx_.plan));
    }
    cx_.rep.threads = cx_.threads;
    cx_.rep.slot_bytes = cx_.staged ? cx_.slot_bytes : 0;
    return Status::Ok();
  }

  // A wholly cold load (every byte through O_DIRECT) widens the ring to read_depth_bytes of
  // slots and runs a fill thread per slot, so that that many bytes are read at once. (A packed
  // load's slots hold fewer, stored, bytes than its copies: its depth is then an upper bound.)
  void Deepen() {
    const PipelineOptions& o = cx_.o;
    if (!cx_.staged || !WhollyCold()) return;
    const std::uint64_t load = StreamBytes();
    const std::uint64_t seqs = load / cx_.slot_bytes + (load % cx_.slot_bytes != 0);
    const std::uint64_t want =
        std::min<std::uint64_t>({o.read_depth_bytes / cx_.slot_bytes, seqs, kMaxDeepSlots});
    if (want <= static_cast<std::uint64_t>(cx_.slots)) return;
    cx_.slots = static_cast<int>(want);
    cx_.threads = std::max(cx_.threads, std::min(cx_.slots, kMaxDeepThreads));
    cx_.deep = cx_.rep.deep = true;
    cx_.rep.threads = cx_.threads;
  }

  // Whether every byte of the load is read through the O_DIRECT source: direct mode, or auto
  // with every file that has bytes judged cold (JudgeFiles).
  bool WhollyCold() const {
    if (cx_.o.mode == ReadMode::kDirect) return true;
    if (cx_.o.mode != ReadMode::kAuto || cx_.file_whole.empty()) return false;
    auto cold = [&](std::uint32_t file) {
      return file < cx_.file_whole.size() && cx_.file_whole[file] == Whole::kCold;
    };
    for (const proto::Copy& c : cx_.plan.copies()) {
      if (c.width() != 0 && c.rows() != 0 && !cold(c.file())) return false;
    }
    if (cx_.work == nullptr) return true;
    for (const DecodeUnit& u : cx_.work->units) {
      if (u.bytes != 0 && !cold(u.file)) return false;
    }
    return true;
  }

  // The bytes the fill threads read: the plan's copies and, packed, its stored blocks.
  std::uint64_t StreamBytes() const {
    std::uint64_t total = CopyBytes(cx_.plan);
    if (cx_.work == nullptr) return total;
    for (const DecodeUnit& u : cx_.work->units) total += u.bytes;
    return total;
  }

  // The fill chunk (one task's bytes): a deep ring's whole slot unless one is given, else
  // FillChunkBytes (at most a slot smaller than the options', LoneSlotBytes).
  void Chunk() {
    const PipelineOptions& o = cx_.o;
    cx_.chunk = cx_.deep && o.chunk_bytes == 0 ? cx_.slot_bytes
                                               : std::min(FillChunkBytes(o), cx_.slot_bytes);
    cx_.rep.chunk_bytes = cx_.chunk;
  }

  // Every copy with bytes has a source; direct modes need it mapped.
  Status CheckSources() const {
    for (int i = 0; i < cx_.plan.copies_size(); ++i) {
      const proto::Copy& c = cx_.plan.copies(i);
      if (c.width() == 0 || c.rows() == 0) continue;
      if (c.file() >= cx_.sources.size() || cx_.sources[c.file()].primary == nullptr) {
        return Status::InvalidArgument("pipeline: copy " + std::to_string(i) + " reads file " +
                                       std::to_string(c.file()) + " which has no source");
      }
      const Source* primary = cx_.sources[c.file()].primary;
      if (!cx_.staged && primary->mapping() == nullptr && primary->size() > 0) {
        return Status::InvalidArgument("pipeline: read mode " +
                                       std::string(ReadModeName(cx_.o.mode)) + " needs a mapped " +
                                       "source for " + primary->path());
      }
    }
    return Status::Ok();
  }

  // The slot cut (transport/staging/slot_plan.h) and, staged, each piece's cold/hot choice by the
  // precomputed residency. Pageable copies in chunks so that threads copy in parallel;
  // registered enqueues whole copies. Returns what it did, for the set-up's span.
  const char* Cut() {
    const char* what = "slot cut";
    if (!cx_.staged) {
      cx_.cut = CutDirect(cx_.plan, cx_.o.mode == ReadMode::kRegistered ? ~0ull : cx_.chunk);
    } else if (CutAhead* ahead = cx_.o.cut_ahead; ahead != nullptr &&
                                                  ahead->slot_bytes == cx_.slot_bytes &&
                                                  ahead->chunk_bytes == cx_.chunk) {
      cx_.cut = std::move(ahead->cut);  // made while the device opened
      *ahead = CutAhead{};
      what = "slot cut made ahead, taken";
    } else {
      cx_.cut = cx_.work == nullptr ? CutStaged(cx_.plan, cx_.slot_bytes, cx_.chunk)
                                    : CutStaged(*cx_.work, cx_.slot_bytes, cx_.chunk);
      what = cx_.o.cut_ahead != nullptr ? "slot cut made again (the ahead one does not fit)"
                                        : "slot cut";
    }
    if (cx_.staged) cx_.rep.slot_seqs = cx_.cut.seqs();
    cx_.piece_cold.assign(cx_.cut.pieces.size(), 0);
    if (cx_.staged && cx_.o.mode == ReadMode::kAuto) {
      for (std::size_t i = 0; i < cx_.cut.pieces.size(); ++i) {
        const SlotPiece& p = cx_.cut.pieces[i];
        const FileSources& fs = cx_.sources[p.file];
        if (fs.cold == nullptr || fs.residency == nullptr) continue;
        cx_.piece_cold[i] =
            fs.residency->ResidentBytes(p.src, p.src_pitch, p.width, p.rows) * 2 < p.bytes();
      }
    }
    cx_.rep.tasks = cx_.cut.tasks.size();
    return what;
  }

  // Auto without a precomputed residency: the extent of each file that this load reads is asked
  // once (cachestat on the cold source's descriptor; a large extent is first sampled,
  // SampledResident). A file found almost entirely out of the page cache (under 1% of the extent
  // resident) is read cold throughout, exactly as `direct` reads it; one found entirely resident is
  // read through its mapping; only files in between ask per piece. The bytes found resident count
  // once, here. A packed load's extents include its stored blocks.
  void JudgeFiles() {
    const std::size_t nf = cx_.sources.size();
    std::vector<std::uint64_t> lo(nf, ~0ull), hi(nf, 0), bytes(nf, 0);
    std::vector<char> unknown(nf, 0);  // an extent that overflows: ask per piece
    auto add = [&](std::uint32_t f, std::uint64_t off, std::uint64_t extent, bool overflow,
                   std::uint64_t n) {
      if (f >= nf || n == 0) return;
      std::uint64_t end = 0;
      if (overflow || __builtin_add_overflow(off, extent, &end)) {
        unknown[f] = 1;
        return;
      }
      lo[f] = std::min(lo[f], off);
      hi[f] = std::max(hi[f], end);
      bytes[f] += n;
    };
    for (const proto::Copy& c : cx_.plan.copies()) {
      if (c.rows() == 0 || c.width() == 0) continue;
      bool overflow = false;
      const std::uint64_t extent = Extent(c.src_pitch(), c.width(), c.rows(), &overflow);
      add(c.file(), c.src_offset(), extent, overflow, c.width() * c.rows());
    }
    if (cx_.work != nullptr) {  // a packed load's stored blocks
      for (const DecodeUnit& u : cx_.work->units) add(u.file, u.src, u.bytes, false, u.bytes);
    }
    cx_.file_whole.assign(nf, Whole::kAskPerPiece);
    for (std::size_t f = 0; f < nf; ++f) {
      const FileSources& fs = cx_.sources[f];
      if (fs.cold == nullptr || fs.residency != nullptr || unknown[f] || lo[f] >= hi[f]) continue;
      const std::uint64_t extent = hi[f] - lo[f];
      if (SampledResident(*fs.cold, lo[f], extent)) {
        cx_.file_whole[f] = Whole::kHot;
        cx_.rep.bytes_resident += bytes[f];
        continue;
      }
      const std::optional<std::uint64_t> here =
          fs.cold->ResidentNow(RowsRead{lo[f], extent, extent, 1, nullptr, extent});
      if (!here) continue;
      if (*here >= extent) {
        cx_.file_whole[f] = Whole::kHot;
        cx_.rep.bytes_resident += bytes[f];
      } else if (*here * 100 < extent) {
        cx_.file_whole[f] = Whole::kCold;
        cx_.rep.bytes_resident += std::min(*here, bytes[f]);
      }
    }
  }

  // Whether each of kJudgeSamples windows spread evenly over a large extent is wholly in the page
  // cache: such a file is taken as resident without asking for every page of its extent
  // (cachestat walks the extent's pages: 15 ms for 5.6 GB cached in small pages on the H200 box,
  // docs/BENCHMARKS.md, 2026-12-02). Any window short, or an extent under kJudgeSampleAbove: false,
  // and the whole extent is asked. A file resident but for holes between the windows is then
  // read through its mapping, which reads the holes from the disk.
  static bool SampledResident(const Source& s, std::uint64_t lo, std::uint64_t extent) {
    if (extent < kJudgeSampleAbove) return false;
    const std::uint64_t gap = (extent - kJudgeWindow) / (kJudgeSamples - 1);
    for (int i = 0; i < kJudgeSamples; ++i) {
      const std::uint64_t at = lo + static_cast<std::uint64_t>(i) * gap;
      const std::optional<std::uint64_t> here =
          s.ResidentNow(RowsRead{at, kJudgeWindow, kJudgeWindow, 1, nullptr, kJudgeWindow});
      if (!here || *here < kJudgeWindow) return false;
    }
    return true;
  }

  Status Body() {
    for (const proto::Fill& f : cx_.plan.fills()) {
      if (f.bytes() == 0) continue;
      HOIST_RETURN_IF_ERROR(cx_.dev.MemsetAsync(cx_.ArenaAt(f.dst_offset()),
                                                static_cast<std::uint8_t>(f.value()), f.bytes(),
                                                cx_.stream));
      cx_.rep.bytes_filled += f.bytes();
    }
    if (cx_.o.mode == ReadMode::kPageable) return PageableExecutor(cx_).Run();
    if (cx_.o.mode == ReadMode::kRegistered) return RegisteredExecutor(cx_).Run();
    return StagedExecutor(cx_, milestones_).Run();
  }

  // A packed load's decode set and slot cut (for qwen3-4b: 61,375 jobs, 253 streams with their
  // block tables, the code tables, the cut's pieces and tasks) took 1.2-2.8 ms to free at the end
  // of a hot load (measured 2026-12-02, call 4); once Cleanup has destroyed the decoder nothing
  // reads them, so a helper thread frees them (here, if no thread can start).
  void FreePackedInBackground() {
    if (cx_.work == nullptr) return;
    auto doomed =
        std::make_unique<std::pair<DecodeSet, SlotPlan>>(std::move(cx_.decode), std::move(cx_.cut));
    try {
      std::thread([d = std::move(doomed)] {}).detach();
    } catch (const std::system_error&) {  // the lambda, and with it the set, was freed here
    }
  }

  Status Cleanup() {
    Status s;
    auto keep = [&s](Status x) {
      if (s.ok() && !x.ok()) s = std::move(x);
    };
    if (cx_.decode_stream >= 0) {
      keep(cx_.dev.Synchronize(cx_.decode_stream));
      keep(cx_.decoder.Destroy());
      if (const auto m = cx_.decoder.making()) {
        cx_.rep.spans.Add("decoder", "decoder made", cx_.Since(m->start),
                          Seconds(m->start, m->end));
      }
    }
    if (cx_.device_slots.ptr != nullptr) keep(cx_.dev.Free(cx_.device_slots));
    if (cx_.decode_stream >= 0) keep(cx_.dev.DestroyStream(cx_.decode_stream));
    cx_.decode_stream = -1;
    for (EventId e : cx_.events) keep(cx_.dev.DestroyEvent(e));
    if (cx_.t0_event >= 0) keep(cx_.dev.DestroyEvent(cx_.t0_event));
    if (cx_.stream >= 0) keep(cx_.dev.DestroyStream(cx_.stream));
    cx_.events.clear();
    cx_.t0_event = cx_.stream = -1;
    return s;
  }

  RunContext cx_;
  Milestones milestones_;
};

}  // namespace

std::uint64_t FillChunkBytes(const PipelineOptions& o) {
  const std::uint64_t slot = std::max<std::uint64_t>(o.slot_bytes, 1);
  const std::uint64_t chunk =
      o.chunk_bytes > 0 ? o.chunk_bytes : std::max<std::uint64_t>(64u << 10, slot / 16);
  return std::min(chunk, slot);
}

namespace {

// `what` is a plan or a packed work (CutStaged takes either).
template <class What>
CutAhead CutAheadOf(const What& what, const PipelineOptions& o) {
  CutAhead c;
  c.slot_bytes = o.slot_bytes;
  c.chunk_bytes = FillChunkBytes(o);
  if (c.slot_bytes >= 1) c.cut = CutStaged(what, c.slot_bytes, c.chunk_bytes);
  return c;
}

}  // namespace

CutAhead CutPlanAhead(const proto::RankPlan& plan, const PipelineOptions& o) {
  return CutAheadOf(plan, o);
}

CutAhead CutPackedAhead(const PackedWork& work, const PipelineOptions& o) {
  return CutAheadOf(work, o);
}

int DefaultFillThreads(int ranks_on_node) {
  unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) hw = 1;
  int t = static_cast<int>(hw) / std::max(1, ranks_on_node);
  return std::clamp(t, 1, 16);
}

std::uint64_t DefaultReadDepthBytes(int ranks_on_node) {
  return ranks_on_node <= 1 ? kLoneReadDepthBytes : kSharedReadDepthBytes;
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
  if (options.packed == nullptr || options.packed->empty()) {
    return Runner(device, arena, plan, sources, options, report ? report : &local).Run();
  }
  if (options.packed_work != nullptr) {
    return Runner(device, arena, options.packed_work->plan, sources, options,
                  report ? report : &local, options.packed_work)
        .Run();
  }
  HOIST_ASSIGN_OR_RETURN(
      PackedWork work,
      options.packed->Translate(
          plan, device.Caps().gpu ? StoredBytes::kCopies : StoredBytes::kCheckedBlocks));
  return Runner(device, arena, work.plan, sources, options, report ? report : &local, &work).Run();
}

namespace {

// Auto mode's two sources of one file: the cold one (O_DIRECT, or buffered once O_DIRECT was
// found unsupported: *direct_ok turns false and the set's note says so), opened first, and the
// page-cache one, a mapping made only when a piece is found resident.
Status OpenAuto(const std::string& path, const DirectOptions& direct, const SourceWrapper& wrap,
                bool release_mapped_pages, bool* direct_ok, SourceSet* set, FileSources* out) {
  Result<std::unique_ptr<Source>> cold = Status::Internal("unset");
  if (*direct_ok) {
    cold = OpenDirectSource(path, direct);
    if (!cold.ok() && cold.status().code() == Code::kUnsupported) {
      *direct_ok = false;
      set->note =
          "O_DIRECT unsupported (" + cold.status().message() + "); auto reads cold ranges buffered";
    }
  }
  if (!*direct_ok) cold = OpenBufferedSource(path);
  if (!cold.ok()) return std::move(cold).status();
  std::unique_ptr<Source> primary =
      OpenMmapSourceLazily(path, (*cold)->size(), release_mapped_pages);
  if (wrap) {
    primary = wrap(std::move(primary));
    *cold = wrap(std::move(*cold));
  }
  out->primary = primary.get();
  out->cold = cold->get();
  set->owned.push_back(std::move(primary));
  set->owned.push_back(std::move(*cold));
  return Status::Ok();
}

}  // namespace

Result<SourceSet> OpenSources(const std::vector<std::string>& paths, const std::vector<bool>& used,
                              ReadMode mode, const DirectOptions& direct, const SourceWrapper& wrap,
                              bool release_mapped_pages) {
  SourceSet set;
  set.files.resize(paths.size());
  bool direct_ok = true;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    if (f < used.size() && !used[f]) continue;
    if (mode == ReadMode::kAuto) {
      HOIST_RETURN_IF_ERROR(
          OpenAuto(paths[f], direct, wrap, release_mapped_pages, &direct_ok, &set, &set.files[f]));
      continue;
    }
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
        primary = OpenMmapSource(paths[f], release_mapped_pages && mode == ReadMode::kMmap);
        break;
    }
    if (!primary.ok()) return std::move(primary).status();
    if (wrap) *primary = wrap(std::move(*primary));
    set.files[f].primary = primary->get();
    set.owned.push_back(std::move(*primary));
  }
  return set;
}

}  // namespace hoist::transport
