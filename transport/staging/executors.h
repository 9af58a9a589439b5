// The pipeline's executors, one per way the bytes travel (internal to transport/staging/):
// staged (fill threads over the slot ring, transport/staging/slot_ring.h), pageable (copies
// straight from the files' mappings) and registered (the mappings registered for DMA).
// Ownership: each borrows the run's context. Failure: Status; a failed fill thread stops the
// others. Threading: Run starts and joins its own threads.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/staging/run_context.h"
#include "transport/staging/slot_ring.h"

namespace hoist::transport::pipeline_internal {

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

}  // namespace hoist::transport::pipeline_internal
