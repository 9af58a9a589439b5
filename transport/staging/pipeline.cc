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

#include "transport/staging/executors.h"
#include "transport/staging/run_context.h"
#include "transport/staging/slot_plan.h"

namespace hoist::transport {
namespace pipeline_internal {
namespace {

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
    if (o.cores > 0 && cx_.threads > o.cores) {  // beyond the cores a thread only slices them
      cx_.rep.threads_asked = cx_.threads;
      cx_.threads = o.cores;
    }
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
    const std::uint64_t want = std::min<std::uint64_t>(
        {ReadDepthBytes(o, o.ranks_on_node) / cx_.slot_bytes, seqs, kMaxDeepSlots});
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
      cx_.AddProgress(f.bytes());  // payload, as the progress total counts it
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
        for (const Device::DecoderStep& step : m->steps) {
          cx_.rep.spans.Add("decoder", step.what, cx_.Since(step.start),
                            Seconds(step.start, step.end));
        }
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
}  // namespace pipeline_internal

using pipeline_internal::CopyLabel;
using pipeline_internal::Extent;
using pipeline_internal::Runner;

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

std::uint64_t ReadDepthBytes(const PipelineSettings& settings, int ranks_on_node) {
  return settings.read_depth_bytes.value_or(DefaultReadDepthBytes(ranks_on_node));
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
  HOIST_ASSIGN_OR_RETURN(PackedWork work, options.packed->Translate(plan));
  return Runner(device, arena, work.plan, sources, options, report ? report : &local, &work).Run();
}

}  // namespace hoist::transport
