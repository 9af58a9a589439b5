// The staging pipeline: executes one RankPlan's copies and fills into a device arena.
//
// Copies are packed, in plan order (sorted by file and offset), into a byte stream cut into a
// ring of K pinned slots of M bytes; a copy larger than a slot, or a row that straddles a slot
// boundary, is split. Each slot's bytes are cut into chunks ("tasks") that T fill threads take in
// order, gathering strided rows into the slot (2-D reads). The thread that completes a slot's
// last task enqueues its host->device copies (1-D or 2-D, one per plan copy piece) on one stream,
// bracketed by two timing events; the only synchronisation between DMA and refill is the slot's
// end event, waited by the first thread that needs the slot again. Fills run ahead while DMA
// drains. Plan Fills become device memsets enqueued first. The cutting into slots, pieces and tasks
// is the pure CutStaged/CutDirect (transport/staging/slot_plan.h); pipeline.cc's Runner runs it
// with one executor per mode family (staging/executors.h): staged (fill threads over the ring of
// slots, staging/slot_ring.h), pageable, registered; they share staging/run_context.h.
//
// Read modes (transport/reading/read_modes.h: the modes and the sources each opens): buffered
// (pread), mmap (memcpy from the mapping), direct (O_DIRECT, several requests in flight per
// thread), auto (each file's extent is asked once, a large one first in 64 sampled windows: a file
// under 1% resident is read with O_DIRECT throughout, a fully resident one (or one whose windows
// all are) through its mapping; otherwise per chunk, mmap when at least half its bytes are
// resident, asked just before it is read); pageable (no staging: synchronous copies straight from
// the mapping) and registered (the mapped file is registered, DMA reads it directly).
//
// Ownership: the pipeline allocates and frees its staging, streams and events; the arena and the
// sources belong to the caller. Failure: the first error (read fault, device error, a copy outside
// the file or the arena) stops every thread, in-flight DMA is drained, staging is freed, and the
// Status names the file and offset (or the copy index). It never hangs on a failed read.
// Threading: RunPipeline is called from one thread and starts/joins its own T threads, which
// inherit the caller's CPU and memory binding.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/devices/device.h"
#include "transport/packed/packed.h"
#include "transport/reading/read_modes.h"
#include "transport/reading/source.h"
#include "transport/staging/slot_plan.h"
#include "transport/timing/span_log.h"

namespace hoist::transport {

// Defaults measured on the H200 box (docs/BENCHMARKS.md, 2026-12-01, slot sweep, qwen3-4b hot, 16
// threads, the ring made while the device opens): 4 x 16 MiB 155 ms, 4 x 8 MiB 165 ms, 8 x 16
// MiB 162 ms, 4 x 32 MiB 164 ms; tp 2 rank 1: 4 x 16 MiB 85 ms, 4 x 8 MiB 91 ms, 8 x 8 MiB 95 ms.
// Half as many copies per byte keep the DMA engine nearer its ceiling; a deeper ring does not
// help. (When the ring was made inside the load, its set-up grew with its size and 4 x 8 MiB was
// the best.) Chunks of slot/threads, 16 fill threads at most.
inline constexpr int kDefaultSlots = 4;
inline constexpr int kMaxFillThreads = 256;
inline constexpr std::uint64_t kDefaultSlotBytes = 16ull << 20;
// Cold O_DIRECT reads go as fast as the bytes kept in flight allow, far past the ring's 64 MiB
// (docs/BENCHMARKS.md, 2026-12-01: qwen3-4b cold direct 1.0-1.25 GiB/s with the 4 x 16 MiB ring and
// 16 threads, 1.49-1.66 with 64 x 16 MiB slots and 64 threads, against 1.47-1.57 for a reader with
// 1 GiB queued). A load read wholly cold widens its ring to a read depth (PipelineSettings):
// DefaultReadDepthBytes unless one is given.
inline constexpr int kMaxDeepSlots = 1024;
// A deep ring's fill threads: one per slot up to this many. Each keeps 8 MiB in flight, so a
// depth of 1 GiB (64 slots of 16 MiB) keeps 512 MiB, and 2 GiB keeps 1 GiB, the reader's depth.
inline constexpr int kMaxDeepThreads = 128;
// The default read depth of a rank sharing its node with `ranks_on_node` - 1 others: 2 GiB alone
// (measured 2026-12-03: 1.62 GiB/s against 1.18 at 1 GiB, the reader 1.66; the node's one disk
// wants 1 GiB in flight), 1 GiB each where ranks share the node (their disk is shared too, and each
// pays its depth in pinned memory, plus half of it again in O_DIRECT bounce buffers).
inline constexpr std::uint64_t kLoneReadDepthBytes = 2ull << 30;
inline constexpr std::uint64_t kSharedReadDepthBytes = 1ull << 30;
std::uint64_t DefaultReadDepthBytes(int ranks_on_node = 1);
int DefaultFillThreads(int ranks_on_node = 1);

// A staged slot cut for one geometry (transport/staging/slot_plan.h), made before the run
// (CutPlanAhead, CutPackedAhead): while the device opens, off the load's clock.
struct CutAhead {
  std::uint64_t slot_bytes = 0, chunk_bytes = 0;
  SlotPlan cut;
};

// What a run is asked to do: plain values, no pointers. The user's options are resolved into
// these once, defaults included (config/job_spec.h, into rank::LoadSettings::pipeline), and
// rank/ hands them to the run as they are, setting only the fill threads it placed.
struct PipelineSettings {
  ReadMode mode = ReadMode::kAuto;
  int slots = kDefaultSlots;
  std::uint64_t slot_bytes = kDefaultSlotBytes;
  int threads = 0;                // 0: DefaultFillThreads()
  std::uint64_t chunk_bytes = 0;  // 0: FillChunkBytes: max(64 KiB, slot_bytes / 16)
  // Deep cold reads: when every byte of a staged load is read through O_DIRECT
  // (mode direct, or auto finding every file uncached), the ring widens to the read depth /
  // slot_bytes slots (at most kMaxDeepSlots, at most the load's slots), with as many fill threads
  // (at least the options', at most kMaxDeepThreads unless more are given), each reading a whole
  // slot at once (chunk_bytes 0 then means slot_bytes). The slots beyond the kept ring are made on
  // first use by the thread that takes them. 0, or a ring already that deep: the ring as given.
  // Unset: DefaultReadDepthBytes of the run's ranks on its node (ReadDepthBytes, the one rule).
  std::optional<std::uint64_t> read_depth_bytes;
  StagingKind staging = StagingKind::kAuto;
  bool lazy_staging = true;  // allocate each slot on first use (overlaps set-up with reading)
  // Spans beyond this are coalesced per lane (8192: a 5.6 GB load's 1 MiB reads stay whole beside
  // its per-slot spans, an 8 GB load's are paired; about 0.3 MB of report per rank).
  std::size_t max_spans = 8192;
};

// The read depth a run of `settings` uses: settings.read_depth_bytes when set, else
// DefaultReadDepthBytes(ranks_on_node).
std::uint64_t ReadDepthBytes(const PipelineSettings& settings, int ranks_on_node);

// One run: its settings, and the run-time wiring that comes with it (progress counter, clock
// origin, milestones, cancellation, the arena's readiness, packed work and cuts made ahead).
struct PipelineOptions : PipelineSettings {
  // The plan's ranks on this run's node (ReadDepthBytes when read_depth_bytes is unset).
  int ranks_on_node = 1;
  // The CPUs the fill threads run on (rank/ places them: the rank's cpuset, narrowed by a cgroup
  // CPU quota); 0: unknown. A run asked for more fill threads runs this many: threads beyond the
  // cores only time-slice them, so the slot the DMA engine waits for fills slowest (an H100, tp 2
  // rank on 8 cores, hot: 8 threads 81 ms, 16 threads 171 ms, 16 threads behind a ticket-ordered
  // gate of 7 or 8 cores 102 ms). A wholly cold load's deep ring still runs a thread per slot
  // (Deepen): its threads wait on the disk, not on the cores.
  int cores = 0;
  // When set, bytes handed to the DMA engine are added here as they go (relaxed atomics), so
  // another thread can show progress while the pipeline runs.
  std::atomic<std::uint64_t>* progress = nullptr;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  // Milestones (dedup forwarding, rank/exchange.h): milestone i is the first
  // milestone_copies[i] copies of the plan (ascending counts). Once all their bytes are enqueued
  // on the copy stream, the pipeline records milestone_events[i] there (events the caller created
  // on the same device; they outlive the run) and calls on_milestone(i) from the thread that
  // enqueued them; the event completes once those bytes are in the arena. Milestones are reached
  // in order; those not reached by a successful run's end are recorded before it returns.
  std::vector<int> milestone_copies;
  std::vector<EventId> milestone_events;
  std::function<void(int)> on_milestone;
  // When another thread sets it, the fill threads stop taking work and the run returns Aborted
  // (after draining what was enqueued).
  const std::atomic<bool>* cancel = nullptr;
  // When set, the arena may still be being allocated when the run starts (by another thread,
  // while the set-up runs): the run calls this once, on its calling thread, after the set-up and
  // before anything touches the arena, and stops with its error if it returns one (the run holds
  // the arena by reference and reads it only after this returns). It is not called when the
  // set-up fails.
  std::function<Status()> arena_ready;
  // A packed checkpoint's streams (transport/packed/packed.h): copies on its packed files are
  // translated into stored-byte copies and decode units; staged modes only. The compressed blocks
  // of each slot are copied into a device slot on the copy stream and decoded into the arena on a
  // second stream (which then carries the slots' end events and the milestones).
  const PackedStreams* packed = nullptr;
  // Optional: `packed`'s translation of exactly the plan RunPipeline gets (made ahead of time by
  // the caller, e.g. while the device opens); the run takes its decode streams, names and tables.
  PackedWork* packed_work = nullptr;
  // Optional: the slot cut of exactly the plan RunPipeline gets (CutPlanAhead) or, with
  // packed_work, of that work (CutPackedAhead), made ahead of time. The run takes it (moves from
  // it) when it was made for this run's slot and chunk sizes, and cuts again otherwise (a load
  // smaller than a slot, a deep cold ring).
  CutAhead* cut_ahead = nullptr;
};

// The fill chunk (one task's bytes) of staged runs: options.chunk_bytes, or max(64 KiB,
// slot_bytes / 16); at most slot_bytes (a deep cold ring reads whole slots unless chunk_bytes is
// given). It does not depend on the thread count, so that the cut can be made before the fill
// threads are placed.
std::uint64_t FillChunkBytes(const PipelineOptions& options);

// The cut RunPipeline would make of `plan` (staged modes) or of `work` under `options`
// (slot_bytes, FillChunkBytes), for PipelineOptions::cut_ahead. Pure functions of their
// arguments: any thread, no device.
CutAhead CutPlanAhead(const proto::RankPlan& plan, const PipelineOptions& options);
CutAhead CutPackedAhead(const PackedWork& work, const PipelineOptions& options);

struct PhaseTiming {
  double start_s = 0;  // since options.origin
  double seconds = 0;
  double busy_s = 0;
  std::uint64_t bytes = 0;
  bool ran = false;
};

struct PipelineReport {
  PhaseTiming setup, staging_alloc, read, h2d, decode, drain, staging_free;
  std::uint64_t bytes_decoded = 0;  // packed: arena bytes written by decode jobs
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_h2d = 0;
  std::uint64_t bytes_filled = 0;  // memset on the device
  std::uint64_t bytes_cold = 0;    // auto: bytes read through the cold (direct) source
  // auto without a precomputed residency: bytes found in the page cache just before reading
  std::uint64_t bytes_resident = 0;
  std::uint64_t slot_seqs = 0;  // slots filled (ring wraps = slot_seqs / slots)
  std::uint64_t tasks = 0;
  int slots = 0;
  int threads = 0;
  int threads_asked = 0;  // the fill threads asked, when more than options.cores (0: not capped)
  std::uint64_t slot_bytes = 0;
  std::uint64_t chunk_bytes = 0;
  bool deep = false;  // the ring was widened for a wholly cold load (read_depth_bytes)
  SpanLog spans;      // lanes fill-<t>, h2d-0, decode-0, submit, setup, decoder, teardown
};

// Checks every copy against its file's size and the arena, and every fill against the arena
// (overflow-safe). Errors name the copy index, the file and the offending offset.
Status ValidateRankPlan(const proto::RankPlan& plan, const std::vector<std::uint64_t>& file_sizes,
                        const std::vector<std::string>& file_paths, std::uint64_t arena_bytes);

Status RunPipeline(Device& device, const DeviceBuffer& arena, const proto::RankPlan& plan,
                   const std::vector<FileSources>& sources, const PipelineOptions& options,
                   PipelineReport* report);

}  // namespace hoist::transport
