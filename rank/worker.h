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

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/device.h"
#include "transport/source.h"

namespace hoist::rank {

enum class DeviceKind { kAuto, kCuda, kHost };

struct LoadOptions {
  transport::ReadMode read_mode = transport::ReadMode::kAuto;
  DeviceKind device = DeviceKind::kAuto;
  int slots = 0;            // 0: the measured default
  std::uint64_t slot_bytes = 0;  // 0: the measured default
  int threads = 0;          // fill threads; 0: the measured default
  bool verify = false;      // prove every arena byte equals the plan's bytes
  std::string dump_dir;     // non-empty: write <dir>/rank-<R>.safetensors
  bool bind_numa = true;
  // Clock origin shared by all phases and spans of the report.
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
};

struct LoadedRank {
  std::unique_ptr<transport::Device> device;
  transport::DeviceBuffer arena;
  proto::RankReport report;
};

// Executes plan.ranks(rank). Phases recorded: bind, arena_alloc, staging_alloc, read, h2d,
// drain, verify, staging_free, total (init and plan are added by the caller).
Result<LoadedRank> LoadRank(const proto::LoadPlan& plan, std::uint32_t rank,
                            const LoadOptions& options);

}  // namespace hoist::rank
