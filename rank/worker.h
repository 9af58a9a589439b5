// One rank's load: place its fill threads (rank/placement.h), allocate one device arena, run the
// RankPlan through transport/ (sources -> pinned staging ring -> device), forwarding shared bytes
// to peers as a stage of that run when the plan dedups (rank/exchange.h), optionally verify and
// dump, and time every phase.
//
// Ownership: the returned LoadedRank owns the device backend and the arena; destroying it frees
// both. Failure: any error (file changed since planning, read fault, allocation failure,
// verification mismatch, cancellation) is returned as a Status naming the rank, file, tensor and
// offset; nothing is left running. Threading: LoadRank is called from one thread; it starts and
// joins its own fill threads. With an ExchangeHost it hands the exchange to the host's driver
// thread and waits for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "rank/device_kind.h"
#include "rank/exchange_options.h"
#include "rank/placement.h"
#include "transport/devices/device.h"
#include "transport/peers/peer.h"
#include "transport/reading/source.h"
#include "transport/staging/pipeline.h"
#include "util/enum_names.h"

namespace hoist::rank {

// The device a rank will load into, opened before the rank has its plan: creating a CUDA context
// costs about 0.3 s, which callers overlap with MPI start-up and planning by calling
// PrepareDevice on a helper thread. It belongs to the `device_init` phase, not to the load.
//
// The load's staging ring is made there too, once the context exists: its slots are touched
// (from threads bound like the load's fill threads, so the pages sit on the GPU's NUMA node) and
// registered, then handed to the device's kept staging (Device::KeptStagingBytes), where the
// load's pipeline takes them. Setting up the ring costs 3-9 ms on the H200 box and, done inside
// the load, held the first DMA back until the last slot was registered.
struct PreparedDevice {
  std::unique_ptr<transport::Device> device;
  int ordinal = -1;    // CUDA ordinal; -1 on the host backend
  double start_s = 0;  // since the origin passed to PrepareDevice
  double seconds = 0;  // opening the device (the context), without the ring
  // The ring made ahead (ran: false when none was: the host backend, a ring larger than the
  // device keeps, or a failure, which is logged; the load then makes its own).
  transport::PhaseTiming staging;
};

// The staging ring a load with these options uses (slots of slot bytes, kind), and how its
// fill threads are placed.
struct StagingRing {
  int slots = 0;  // 0: make none ahead
  std::uint64_t slot_bytes = 0;
  transport::StagingKind kind = transport::StagingKind::kAuto;
  CpuBind cpu_bind = CpuBind::kAuto;
  bool bind_numa = true;
};

// Makes `ring` on `dev` and frees its slots into the device's kept staging, where a load's
// pipeline takes them (PrepareDevice calls it once the device is open). ran: false when nothing
// was made: the device keeps no staging or less than the ring, or making it failed (logged).
// Threading: any thread; it starts one thread per slot.
transport::PhaseTiming MakeRingAhead(transport::Device& dev, const StagingRing& ring,
                                     std::chrono::steady_clock::time_point origin);

// Opens the device for `kind`: CUDA ordinal `gpu` modulo the visible GPUs, or host memory, and
// makes `ring` ahead (see above). Failure: the device's; the ring's is logged, not returned.
// Threading: may run on any thread; the device it returns may then be used from any thread.
Result<PreparedDevice> PrepareDevice(DeviceKind kind, int gpu,
                                     std::chrono::steady_clock::time_point origin,
                                     const StagingRing& ring = {});

// The CUDA ordinal a rank uses for plan gpu `gpu` (modulo the visible GPUs), -1 for the host
// backend (kHost, or kAuto without a visible GPU).
int ResolveOrdinal(DeviceKind kind, int gpu);

// What a rank is doing, for the progress display (LoadWiring::stage).
enum class LoadStage : int { kStarting, kDevice, kArena, kReading, kVerify, kDump, kDone };
inline constexpr EnumName<LoadStage> kLoadStageNames[] = {
    {LoadStage::kStarting, "starting"},
    {LoadStage::kDevice, "opening the device"},
    {LoadStage::kArena, "allocating the arena"},
    {LoadStage::kReading, "reading"},
    {LoadStage::kVerify, "verifying"},
    {LoadStage::kDump, "dumping"},
    {LoadStage::kDone, "done"},
};
constexpr std::string_view LoadStageName(LoadStage stage) {
  return NameOfEnum(kLoadStageNames, stage);
}

class Exchange;   // rank/exchange.h
class LoadWatch;  // rank/load_watch.h

// The driver side of a dedup exchange (rank/rank_job.h implements it): the load hands over the
// Exchange it created and waits while the driver thread completes it.
class ExchangeHost {
 public:
  virtual ~ExchangeHost() = default;
  // This rank's peer (nullptr: the rank reads every copy itself) and the exchange options.
  virtual transport::Peer* peer() = 0;
  virtual const ExchangeOptions& exchange_options() = 0;
  // Load thread: the driver polls `exchange` from now on; it outlives the Finish below.
  virtual void Start(Exchange* exchange) = 0;
  // Load thread: the reads ended with `reads`. Blocks until the driver completed the exchange
  // (or it failed, or the job was cancelled) and returns the first error.
  virtual Status Finish(const Status& reads) = 0;
};

// A rank's load settings: the user's options as config/ resolved them, defaults included
// (config/job_spec.h), plain values that every layer below takes as they are. The defaults here
// are the resolved defaults, so a default LoadSettings is a valid one.
struct LoadSettings {
  DeviceKind device = DeviceKind::kAuto;  // auto: CUDA when a GPU is visible, else host
  // The pipeline's settings, handed to it as they are: read mode, ring (slots x slot_bytes),
  // fill chunk, read depth (unset: by the plan's ranks on this rank's node), pinning kind, lazy
  // staging. Its `threads` (0: the rank's cpus, at most 16) is replaced by the threads placed.
  transport::PipelineSettings pipeline;
  bool verify = false;                // prove every arena byte equals the plan's bytes
  std::string dump_dir;               // non-empty: write <dir>/rank-<R>.safetensors
  CpuBind cpu_bind = CpuBind::kAuto;  // where the fill threads run (rank/placement.h)
  bool bind_numa = true;              // bind staging memory to the cpus' NUMA nodes
  int gpu = -1;                       // CUDA ordinal; -1: the plan's gpu (modulo the visible count)
  transport::DirectOptions direct;    // O_DIRECT request size and depth
  // Unmap and close the checkpoint files on a detached thread once the bytes are on the device
  // (not counted in `total`); false: synchronously, inside `total`.
  bool close_in_background = true;
};

// A load's run-time wiring, apart from its settings: test hooks, the device opened ahead, the
// engine's arena allocator, progress and stage counters, cancellation, the clock origin and the
// exchange's driver. Pointers are borrowed: they must outlive LoadRank.
struct LoadWiring {
  // Tests: wraps every Source the load opens (e.g. transport::WrapFaulty to inject faults).
  std::function<std::unique_ptr<transport::Source>(std::unique_ptr<transport::Source>)> wrap_source;
  // A device opened early (see PrepareDevice); LoadRank waits for it and takes it. When its
  // ordinal is not the one the plan asks for, it is dropped and the right device is opened.
  // `total` starts once the device is ready. nullptr: LoadRank opens the device itself (and
  // `total` includes that).
  std::future<Result<PreparedDevice>>* prepared = nullptr;
  // An engine-supplied arena (include/hoist/hoist.h): called instead of Device::Allocate with the
  // device and the arena size. It must return memory the device accepts as an arena (adopted
  // with Device::AdoptArena) that outlives the LoadedRank. nullptr: the device allocates.
  std::function<Result<transport::DeviceBuffer>(transport::Device&, std::uint64_t)> allocate_arena;
  // When set, bytes handed to the device are added here while the load runs (for progress), and
  // the current stage is stored in `stage`.
  std::atomic<std::uint64_t>* progress = nullptr;
  std::atomic<LoadStage>* stage = nullptr;
  // When another thread sets it, the load stops (Aborted) as soon as it can.
  const std::atomic<bool>* cancel = nullptr;
  // Clock origin shared by all phases and spans of the report.
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  // Dedup plans: where the exchange runs (rank/rank_job.h). nullptr or without a peer: the rank
  // reads every one of its copies itself (e.g. a single rank run without mpirun).
  ExchangeHost* exchange = nullptr;
  // A load streaming behind its caller (rank/load_watch.h): told when the arena exists, as layer
  // groups land (not with an exchange: then only at the end) and when the load ended; a failed
  // load's device and arena are left in it. nullptr: none.
  LoadWatch* watch = nullptr;
};

// What LoadRank takes: the settings, as config/ resolved them and taken as they are, and the
// run's wiring, apart from them (config/ fills the settings; the caller that runs the load wires
// it). Copying one copies the wiring's borrowed pointers, not what they point at.
struct LoadOptions {
  LoadSettings settings;
  LoadWiring wiring;
};

// The ring `settings` ask for (their defaults resolved), for PrepareDevice.
StagingRing RingOf(const LoadSettings& settings);

// The GPU a rank of the plan loads into: settings.gpu when set, else the plan's gpu for it
// (WantedGpu), as a CUDA ordinal (ResolveOrdinal: modulo the visible GPUs; -1 on the host).
int WantedGpu(const LoadSettings& settings, const proto::RankPlan& rank_plan);
int RankOrdinal(const LoadSettings& settings, const proto::RankPlan& rank_plan);

// The plan's ranks on the node of `rank_plan` (at least 1).
int RanksOnNode(const proto::LoadPlan& plan, const proto::RankPlan& rank_plan);

// The read depth of a wholly cold load of `rank_plan`: transport::ReadDepthBytes of the
// settings, by the plan's ranks on its node.
std::uint64_t ReadDepthFor(const LoadSettings& settings, const proto::LoadPlan& plan,
                           const proto::RankPlan& rank_plan);

// True when a rank of `plan` runs an exchange: a dedup plan and a host with a peer.
bool ExchangeActive(const proto::LoadPlan& plan, const LoadWiring& wiring);

struct LoadedRank {
  std::unique_ptr<transport::Device> device;
  transport::DeviceBuffer arena;
  proto::RankReport report;
};

// Executes plan.ranks(rank). Phases recorded: device_init, bind, arena_alloc, residency
// (page-cache measurement), staging_alloc, read, h2d, peer (dedup), drain, verify, dump,
// staging_free, total (init, plan and peer_init are added by the caller; verify and dump only
// when asked). The report also carries cpus, fill_threads and cpu_bind.
Result<LoadedRank> LoadRank(const proto::LoadPlan& plan, std::uint32_t rank,
                            const LoadOptions& options);

}  // namespace hoist::rank
