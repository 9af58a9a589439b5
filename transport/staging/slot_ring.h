// The staged modes' ring of pinned staging slots and its DMA (internal to transport/staging/;
// see the class comment). Ownership: the ring owns its slots' staging until FreeStaging and
// borrows the run's context and milestones. Failure: the first error stops every waiter (Fail);
// Status throughout.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "transport/staging/run_context.h"

namespace hoist::transport::pipeline_internal {

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
    for (Slot& slot : slots_) slot.cv.notify_all();
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
          slot.cv.notify_all();
          return span.status();
        }
        cx_.h2d_spans.push_back(std::move(*span));
        slot.waited = need;
        slot.cv.notify_all();
      } else {
        slot.cv.wait(lock);
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
      // The slot's plain copies go in one batch (Device::CopyBatchAsync), before a packed slot's
      // blocks (SubmitDecode): those wait for a device slot, the plain copies for nothing.
      batch_.clear();
      for (std::size_t i = cx_.cut.seq_ops[q]; i < cx_.cut.seq_ops[q + 1]; ++i) {
        batch_.push_back(SlotOpCopy(cx_.cut.ops[i], slots_[k].buf.ptr, cx_.arena.ptr));
      }
      HOIST_RETURN_IF_ERROR(cx_.dev.Record(ev_start_[k], cx_.stream));
      HOIST_RETURN_IF_ERROR(cx_.dev.CopyBatchAsync(batch_, cx_.stream));
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
    slots_[k].cv.notify_all();
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
    std::condition_variable cv;  // this slot's waiters (Acquire, EnsureAllocated); under mu_
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
  // n - device slots); the slot's plain copies were enqueued before that wait (Submit), so they
  // never wait for a decode. Until the decoder is made, decodes wait in pending_ and the copies go
  // on: the first device slots fill while the decoder's tables upload; a submit that needs a device
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
        slot.cv.wait(lock);
        continue;
      }
      slot.allocating = true;
      lock.unlock();
      Status s = AllocSlot(slot);
      lock.lock();
      slot.allocating = false;
      slot.cv.notify_all();
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
  std::mutex submit_mu_;  // one slot's ops are enqueued contiguously; guards submits_
  struct Timed {          // a submit: its sequence, from asking for the lock to its last call
    std::uint32_t seq;
    Clock::time_point a, z;
  };
  std::vector<Timed> submits_;
  std::vector<Copy2D> batch_;  // the slot being submitted's copies (CopyBatchAsync); submit_mu_
  std::vector<Slot> slots_;
  std::vector<int> remaining_;  // tasks of each seq not yet read
  std::atomic<bool> failed_{false};
  Status status_;
  Clock::time_point alloc_first_ = Clock::time_point::max();
  Clock::time_point alloc_last_ = Clock::time_point::min();
  double alloc_busy_ = 0;
  std::uint64_t bytes_h2d_ = 0;
};

}  // namespace hoist::transport::pipeline_internal
