// Proving, finishing and exporting what a rank loaded, independently of the staging pipeline.
//
// TransposeArenaTensors swaps, in place on the device, the tensors the plan holds transposed
// (TensorOut.transpose: the fused layout of experts vLLM transposes at load) once their copies
// landed; it is the last step of a load (and of a packed host cache's restore).
//
// VerifyArena re-reads every copy's source bytes with plain pread on the host (a packed
// checkpoint's: decoded on the host by the CPU reference decoder, checksummed against the
// original bytes' XXH64), copies the arena
// back from the device (in windows of at most 64 MiB; a transposed tensor whole, put back on the
// host as its copies landed it) and compares; fills are checked against their value. DumpArena
// writes <dir>/rank-<R>.safetensors holding exactly the rank's TensorOuts (name, dtype, shape) with
// the bytes copied back from the device; the header is written here (8-byte little-endian length +
// JSON padded with spaces to 8 bytes, data offsets contiguous in plan order).
//
// Ownership: borrows the device and arena. Failure: the first mismatch is a Corrupt status naming
// the tensor, the byte offset inside it, the arena offset, the file and file offset; I/O errors
// name the path. Threading: call from one thread after the load has drained.
#pragma once

#include <cstdint>
#include <string>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/devices/device.h"
#include "transport/packed/packed.h"

namespace hoist::rank {

// Adds the bytes transposed to *bytes (when not null).
Status TransposeArenaTensors(transport::Device& device, const transport::DeviceBuffer& arena,
                             const proto::RankPlan& rank_plan, std::uint64_t* bytes = nullptr);

// Expects the transposed tensors transposed (after TransposeArenaTensors).
Status VerifyArena(transport::Device& device, const transport::DeviceBuffer& arena,
                   const proto::LoadPlan& plan, const proto::RankPlan& rank_plan);

// Returns the path written.
Result<std::string> DumpArena(transport::Device& device, const transport::DeviceBuffer& arena,
                              const proto::RankPlan& rank_plan, const std::string& dir);

// "tensor NAME byte K" for an arena offset, or "arena offset X (no tensor)".
std::string DescribeArenaOffset(const proto::RankPlan& rank_plan, std::uint64_t arena_offset);

}  // namespace hoist::rank
