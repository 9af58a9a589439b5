// The GPU decoder of the codec (docs/CODEC.md), two entry points. Built only with the CUDA toolkit
// (hoist_codec_cuda); CUDA types stay behind this header (streams are passed as void*).
//  - LaunchCodecDecode: a whole codec stream already in device memory, straight into device
//    memory (the codec bench and tests).
//  - LaunchCodecJobs: batched jobs of packed loads (transport/devices/decode_job.h is the contract,
//    CudaDevice::DecodeAsync the user): one CUDA block per job, its kept values into the arena.
//
// One CUDA block of `sub_streams` threads per codec block: it stages the 12-bit decode table
// and the block's coded words in shared memory, scans the sub-stream bit lengths (format 2's u16s
// or format 3's packed fields), then thread t decodes values t, t + T, t + 2T, ... (coalesced raw
// reads and value writes), reading its sub-stream through a 64-bit register (one shared-memory
// table load per value). The decode loop is instantiated per row of codec/split.h (BF16, F16,
// F8 E4M3, F8 E5M2). Stored streams are one device-to-device copy.
//
// Failure: LaunchCodecDecode checks its arguments on the host (InvalidArgument: unaligned or
// null pointers, a sub-stream count the kernel cannot take; ResourceExhausted: a block too large
// for shared memory) and returns CUDA launch errors as Internal. The stream's header must have
// been validated by codec::ParseStream on the host (the kernel trusts block offsets); the kernel
// itself checks every sub-stream (a bit length past the block, a bit pattern with no code, a
// code overrunning its sub-stream, bits left over) and on failure stores 1 + the index of a bad
// block in *d_error (atomicCAS from 0), writing garbage, never outside `out` or the stream. This
// whole-stream path does not recompute checksums (DecodeOnGpu compares the result's XXH64 on the
// host); the batched jobs of packed loads do (below).
// Ownership: the caller owns every device buffer; d_lut holds the 4096-entry table of
// codec::BuildDecodeLut(info.code_lengths) (8 KiB), uploaded by the caller (UploadCodecLut).
// Threading: calls are enqueued on `cuda_stream`; buffers must stay alive until it completes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "hoist/status.h"

namespace hoist::transport::cuda {

// Builds info's decode table (codec::BuildDecodeLut) and copies it to d_lut (4096 x u16, device)
// on `cuda_stream` (cudaStream_t or nullptr); returns once the copy has completed.
Status UploadCodecLut(const codec::StreamInfo& info, std::uint16_t* d_lut, void* cuda_stream);

// Enqueues the decode of d_stream (info.stream_bytes() bytes, at least 8-byte aligned) into
// d_out (info.original_bytes, aligned to the value size) on `cuda_stream`.
Status LaunchCodecDecode(const codec::StreamInfo& info, const void* d_stream, void* d_out,
                         const std::uint16_t* d_lut, int* d_error, void* cuda_stream);

// The shared memory one CUDA block of this stream needs, in bytes.
std::uint64_t CodecDecodeSharedBytes(const codec::StreamInfo& info);

// After the stream completed: OK when *d_error is 0 (read with a synchronous copy), otherwise
// Corrupt naming `name` and the block. Resets *d_error to 0.
Status CodecDecodeError(int* d_error, std::string_view name);

// The whole GPU path in one synchronous call, for tests and checks: parses `stream` on the host,
// copies it to the current device, decodes it there, copies the result back into `out`
// (info.original_bytes) and compares its XXH64 with the stream's. Corrupt on a bad stream or a
// mismatch; Internal on a CUDA failure. Allocates and frees its own device memory.
Status DecodeOnGpu(std::span<const std::uint8_t> stream, std::span<std::uint8_t> out,
                   std::string_view name);

// ---- Batched jobs (packed loads) ----
//
// A job is one codec block of a Huffman stream (BF16, F16, F8) and one copy: value k of the block
// is element d = first + k of the copy's source, read as rows of `pitch` values; it is kept when
// d >= 0, r = d / pitch < rows and c = d % pitch < width, and is written (v = 1 or 2 bytes) at
// arena + dst + r * dst_pitch + c * v: the rule of transport::ForEachKeptRun, whose DecodeJob
// this mirrors (so that this file needs no transport header). Every value is decoded (and its
// sub-stream checked) whether it is kept or not, and for a stream of format 4 (`checked`) thread t
// folds the values it decodes into lane t of the block's lane checksum (codec/lane_sum.h), which
// the block's threads then XOR together and compare with job.checksum. A stored stream's job
// (`stored_value_bytes`) reads its values straight from the block, lane l (of lane::kStoredLanes)
// on thread l mod blockDim, with the same rule for where they land and the same check.
//
// The kernel: blockDim = CodecJobSet::threads (>= every stream's sub-stream count T, a multiple
// of 32); threads t >= T of a job's stream take no values. It stages the stream's table and the
// block's coded words in shared memory (CodecJobSharedBytes), scans the sub-stream bit lengths,
// then thread t decodes values t, t + T, ... A job whose kept values are one range of k (rows ==
// 1, or pitch == width with dst_pitch == v * width) writes that range; otherwise each thread
// divides once for its first value and then steps its (row, column) by T. Block bytes may sit at
// any address (unaligned blocks are read bytewise); nothing is read outside
// [src + job.src, + job.bytes) and nothing is written outside the job's kept values.
// Failure: a job whose bytes cannot hold its layout (raw bits and lengths, coded words beyond
// max_words), a stream whose dtype has no row or whose length fields are over 16 bits, a sub-stream
// past the coded bits, a bit pattern with no code, a code overrunning its sub-stream or bits left
// over, a checksum mismatch: atomicCAS(error, 0, 1 + the job's index in the set). Such a job may
// have written garbage into its kept values, never elsewhere.
struct CodecJob {
  std::uint64_t src = 0;        // the block's first byte, relative to `src` of the launch
  std::uint64_t dst = 0;        // arena byte of the copy's element (0, 0); value-aligned
  std::uint64_t dst_pitch = 0;  // arena bytes between the copy's rows; value-aligned
  std::int64_t first = 0;       // the copy's element index of the block's value 0 (may be < 0)
  std::uint64_t pitch = 0;      // source row length in values (0: nothing is kept)
  std::uint64_t width = 0;      // values kept per row
  std::uint64_t rows = 0;
  std::uint32_t bytes = 0;     // the block's encoded bytes
  std::uint32_t values = 0;    // values in the block
  std::uint32_t stream = 0;    // index into the stream arrays
  std::uint32_t block = 0;     // unused by the kernel (the caller's errors)
  std::uint32_t checksum = 0;  // the block's lane checksum (checked when its stream is `checked`)
};

struct CodecJobStream {
  std::uint32_t sub_streams = 0;    // T, 1 .. 1024 (a stored stream: 0)
  std::uint8_t dtype = 0;           // codec::DType: a coded row (BF16, F16, F8_E4M3, F8_E5M2), or
                                    // for a stored stream any dtype of 1, 2 or 4 bytes a value
  std::uint8_t packed_lengths = 0;  // 1: format 3 (head word and fields), 0: format 2 (u16s)
  std::uint8_t stored_value_bytes = 0;  // a stored stream (codec kStored: the blocks are its
                                        // values as they are): its value size, 1, 2 or 4; coded: 0
  std::uint8_t checked = 0;             // 1: format 4: every job checks its block's lane checksum
};

// Device arrays of one set of jobs, allocated and uploaded by the caller (CudaDevice).
struct CodecJobSet {
  const CodecJob* jobs = nullptr;  // every job of the set; launches take a range of them
  const CodecJobStream* streams = nullptr;
  const std::uint16_t* luts = nullptr;  // codec::kLutEntries per stream (stream s at s * 4096),
                                        // 16-byte aligned
  std::uint32_t threads = 0;            // blockDim: a multiple of 32, <= 1024, >= every T
  std::uint32_t max_words = 0;          // the largest job's coded words (shared memory)
  int* error = nullptr;                 // 0, or 1 + the index in `jobs` of a bad job
};

// Builds `tables` decode tables on `cuda_stream`: table i (codec::kLutEntries entries at
// luts + i * kLutEntries, device memory) from the 256 code lengths at lengths + i * 256 (device
// memory), as codec::BuildDecodeLut builds it on the host (codec/lut_build.h is both); all-zero
// lengths (a stored stream) give a table of zeros. The lengths must be valid
// (codec::CodeLengthsValid; ParseHeader checks them). InvalidArgument for null pointers or more
// than 2^31 - 1 tables; Internal for a launch failure. Both arrays must stay alive until the
// stream completes.
Status BuildCodecLuts(const std::uint8_t* lengths, std::uint16_t* luts, std::uint64_t tables,
                      void* cuda_stream);

// BuildCodecLuts in one synchronous call, for tests and checks: uploads `lengths`, builds their
// tables on the current device and copies them back. Internal on a CUDA failure.
Result<std::vector<codec::DecodeLut>> BuildCodecLutsOnGpu(
    std::span<const codec::CodeLengths> lengths);

// The shared memory one job of a set needs: the table, the scan and max_words + 2 words.
std::uint64_t CodecJobSharedBytes(std::uint64_t max_words);

// For the current device, once per set before its launches: ResourceExhausted when a block cannot
// have `shared_bytes` of shared memory (cudaDevAttrMaxSharedMemoryPerBlockOptin), otherwise lets
// the kernel use up to that limit. CUDA failures: Internal naming the call.
Status PrepareCodecJobs(std::uint64_t shared_bytes);

// Enqueues jobs [first, first + count) of `set` on `cuda_stream` (count 0: nothing); blocks at
// src + job.src (device memory), values into the arena at `arena` (2-byte aligned).
// InvalidArgument for null pointers, a bad thread count or first + count >= 2^31; Internal for a
// launch failure. The set's arrays, src and the arena must stay alive until the stream completes.
Status LaunchCodecJobs(const CodecJobSet& set, std::uint64_t first, std::uint64_t count,
                       const void* src, void* arena, void* cuda_stream);

}  // namespace hoist::transport::cuda
