// Host-to-device copies made by the GPU's multiprocessors: a kernel that reads pinned host memory
// through its device mapping and writes device memory, so that the copy does not use the copy
// engine. On the H200 box (run X) such a copy runs at 45-47 GiB/s against the copy engine's
// 50.5-50.8, but right after a cudaFree it keeps that rate while the copy engine's halves for as
// long as the driver clears the freed memory (25.6 GiB/s for the first GiB after an 8 GiB free):
// the daemon's restore copies its head this way when a release has just freed memory
// (rank/host_cache.h). Built only with nvcc (hoist_codec_cuda); CUDA types stay behind this
// header (the stream is passed as void*).
//
// Failure: InvalidArgument for a null pointer; Unsupported when `host_src` is not mapped into the
// device's address space (the caller then copies with the copy engine); launch errors as
// Internal. Ownership: the caller owns both buffers. Threading: the copy is enqueued on
// `cuda_stream`; both buffers must stay alive until it completes.
#pragma once

#include <cstdint>

#include "hoist/status.h"

namespace hoist::transport::cuda {

// Enqueues dst[0, bytes) = host_src[0, bytes) as one kernel on `cuda_stream` (cudaStream_t, or
// nullptr for the legacy stream). host_src: memory cudaHostRegister'd or cudaMallocHost'd on a
// system with unified addressing (mapped by default there).
Status LaunchHostCopy(void* dst, const void* host_src, std::uint64_t bytes, void* cuda_stream);

}  // namespace hoist::transport::cuda
