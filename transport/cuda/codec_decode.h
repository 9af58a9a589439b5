// The GPU decoder of the codec (docs/CODEC.md): decodes a whole codec stream that is already in
// device memory straight into device memory (the arena). Built only with the CUDA toolkit
// (hoist_codec_cuda); CUDA types stay behind this header (streams are passed as void*).
//
// One CUDA block of `sub_streams` threads per codec block: it stages the 12-bit decode table
// and the block's coded words in shared memory, scans the sub-stream bit lengths, then thread t
// decodes values t, t + T, t + 2T, ... (coalesced raw-byte reads and 2-byte writes). Stored
// streams are one device-to-device copy.
//
// Failure: LaunchCodecDecode checks its arguments on the host (InvalidArgument: unaligned or
// null pointers, a sub-stream count the kernel cannot take; ResourceExhausted: a block too large
// for shared memory) and returns CUDA launch errors as Internal. The stream's header must have
// been validated by codec::ParseStream on the host (the kernel trusts block offsets); the kernel
// itself checks every sub-stream (a bit length past the block, a bit pattern with no code, a
// code overrunning its sub-stream, bits left over) and on failure stores 1 + the index of a bad
// block in *d_error (atomicCAS from 0), writing garbage, never outside `out` or the stream. It
// does not recompute checksums: CodecDecodeError reports the flag; byte equality is proven on
// the host (codec::Decode, or --verify).
// Ownership: the caller owns every device buffer; d_lut holds the 4096-entry table of
// codec::StreamInfo::lut (8 KiB), uploaded by the caller (UploadCodecLut). Threading: calls are
// enqueued on `cuda_stream`; buffers must stay alive until it completes.
#pragma once

#include <cstdint>
#include <string_view>

#include "codec/codec.h"
#include "hoist/status.h"

namespace hoist::transport::cuda {

// Copies info.lut to d_lut (4096 x u16, device) on `cuda_stream` (cudaStream_t or nullptr).
// The host table must outlive the copy (it is pageable memory: the copy is synchronous).
Status UploadCodecLut(const codec::StreamInfo& info, std::uint16_t* d_lut, void* cuda_stream);

// Enqueues the decode of d_stream (info.stream_bytes() bytes, at least 8-byte aligned) into
// d_out (info.original_bytes, 2-byte aligned) on `cuda_stream`.
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

}  // namespace hoist::transport::cuda
