// The staging pipeline's parts (transport/staging/pipeline.h runs them), internal to
// transport/staging/: what every executor shares (RunContext: the run's inputs, geometry, cut,
// stream and events; the timing written once; the first error), the milestones, and the task
// reader (the read modes' side: one task's pieces from the files into a slot).
//
// Ownership: a RunContext borrows the device, arena, plan, sources, options and report of one
// RunPipeline call and owns the events it creates (the Runner destroys them). Failure: Status
// throughout. Threading: as each class says; RunContext's fields are set before the executors
// start, which then change only `events`, the span lists (under their own locks) and the report.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "transport/packed/decoder_maker.h"
#include "transport/staging/pipeline.h"
#include "transport/staging/slot_plan.h"

namespace hoist::transport::pipeline_internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point z) {
  return std::chrono::duration<double>(z - a).count();
}

inline std::uint64_t Extent(std::uint64_t pitch, std::uint64_t width, std::uint64_t rows,
                            bool* overflow) {
  if (rows <= 1) return width;
  std::uint64_t e = 0;
  if (__builtin_mul_overflow(rows - 1, pitch, &e) || __builtin_add_overflow(e, width, &e)) {
    *overflow = true;
    return 0;
  }
  return e;
}

inline std::string CopyLabel(int i, const std::vector<std::string>& paths, std::uint32_t file) {
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
inline PhaseTiming LanesPhase(const std::vector<Lane>& lanes, std::uint64_t* bytes) {
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
inline void SpansPhase(const std::vector<DeviceSpan>& spans, std::uint64_t bytes,
                       PhaseTiming* out) {
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
inline std::uint64_t CopyBytes(const proto::RankPlan& plan) {
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
inline std::uint64_t LoneSlotBytes(const proto::RankPlan& plan) {
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
  bool deep =
      false;  // the ring widened for a wholly cold load (PipelineSettings::read_depth_bytes)
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
inline constexpr int kJudgeSamples = 64;
inline constexpr std::uint64_t kJudgeWindow = 1ull << 20;
inline constexpr std::uint64_t kJudgeSampleAbove = 8ull * kJudgeSamples * kJudgeWindow;

// Packed: device slots per staging slot. A staging slot is free again once its blocks are in a
// device slot; the device slot, once they are decoded (the copy stream waits for that on the
// device; it has finished long before in a load the link paces).
inline constexpr int kDeviceSlotsPerSlot = 2;
// Packed: decode records (events and span) per device slot: more than one, so that the record
// of the decode a device slot waits for is still intact when the slot is taken again.
inline constexpr int kDecodeRecordsPerDeviceSlot = 2;

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
inline Copy2D DirectCopy(const RunContext& cx, const SlotPiece& p) {
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

}  // namespace hoist::transport::pipeline_internal
