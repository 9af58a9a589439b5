// One rank's load: bind to the GPU's NUMA node, allocate one device arena, run the RankPlan
// through transport/ (sources -> pinned staging ring -> device), optionally verify and dump,
// and time every phase.
//
// Ownership: the returned LoadedRank owns the device backend and the arena; destroying it frees
// both. Failure: any error (file changed since planning, read fault, allocation failure,
// verification mismatch) is returned as a Status naming the rank, file, tensor and offset;
// nothing is left running. Threading: LoadRank is called from one thread; it starts and joins its
// own fill threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "rank/exchange.h"
#include "transport/device.h"
#include "transport/source.h"

namespace hoist::rank {

enum class DeviceKind { kAuto, kCuda, kHost };

// The device a rank will load into, opened before the rank has its plan: creating a CUDA context
// costs about 0.3 s, which the coordinator overlaps with MPI start-up and planning by calling
// PrepareDevice on a helper thread. It belongs to the `init` phase, not to the load.
struct PreparedDevice {
  std::unique_ptr<transport::Device> device;
  int ordinal = -1;    // CUDA ordinal; -1 on the host backend
  double start_s = 0;  // since the origin passed to PrepareDevice
  double seconds = 0;
};

// Opens the device for `kind`: CUDA ordinal `gpu` modulo the visible GPUs, or host memory.
// Threading: may run on any thread; the device it returns may then be used from any thread.
Result<PreparedDevice> PrepareDevice(DeviceKind kind, int gpu,
                                     std::chrono::steady_clock::time_point origin);

struct LoadOptions {
  transport::ReadMode read_mode = transport::ReadMode::kAuto;
  DeviceKind device = DeviceKind::kAuto;  // auto: CUDA when a GPU is visible, else host
  int slots = 0;                          // 0: the measured default (transport::kDefaultSlots)
  std::uint64_t slot_bytes = 0;           // 0: the measured default (transport::kDefaultSlotBytes)
  int threads = 0;                        // fill threads; 0: cores / ranks on this node, at most 16
  bool verify = false;                    // prove every arena byte equals the plan's bytes
  std::string dump_dir;                   // non-empty: write <dir>/rank-<R>.safetensors
  bool bind_numa = true;
  std::uint64_t chunk_bytes = 0;  // bytes per fill task; 0: slot_bytes / threads (>= 64 KiB)
  transport::StagingKind staging = transport::StagingKind::kAuto;  // auto = register
  bool lazy_staging = true;         // allocate each slot on first use
  int gpu = -1;                     // CUDA ordinal; -1: the plan's gpu (modulo the visible count)
  int local_ranks = 0;              // ranks sharing this host's cores; 0: count the plan's node
  transport::DirectOptions direct;  // O_DIRECT request size and depth
  // Unmap and close the checkpoint files on a detached thread once the bytes are on the device
  // (not counted in `total`); false: synchronously, inside `total`.
  bool close_in_background = true;
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
  // When set, bytes handed to the device are added here while the load runs (for progress).
  std::atomic<std::uint64_t>* progress = nullptr;
  // Clock origin shared by all phases and spans of the report.
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  // Dedup plans: the peer this rank exchanges with (rank/exchange.h); without one the rank
  // reads all its copies itself.
  ExchangeOptions exchange;
};

struct LoadedRank {
  std::unique_ptr<transport::Device> device;
  transport::DeviceBuffer arena;
  proto::RankReport report;
};

// Executes plan.ranks(rank). Phases recorded: bind, arena_alloc, residency (page-cache
// measurement), staging_alloc, read, h2d, drain, verify, dump, staging_free, total (init and plan
// are added by the caller; verify and dump only when asked).
Result<LoadedRank> LoadRank(const proto::LoadPlan& plan, std::uint32_t rank,
                            const LoadOptions& options);

}  // namespace hoist::rank
