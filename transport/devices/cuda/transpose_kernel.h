// The CUDA Device's transpose kernel (transpose_kernel.cu, built where nvcc is found:
// HOIST_HAVE_CUDA_TRANSPOSE). CUDA types stay inside transport/devices/cuda/.
//
// Ownership: the caller's device buffers. Threading: enqueues on the caller's stream; safe from
// any thread. Failure: the launch's cudaError_t (kernel faults surface at the stream's next
// synchronization).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hoist::transport {

// Enqueues dst[b] (cols x rows) = the transpose of src[b] (rows x cols) for b < batch, matrices
// back to back, elements of elem_bytes (1, 2, 4 or 8); src and dst must not overlap.
cudaError_t LaunchTranspose(const void* src, void* dst, std::uint64_t batch, std::uint64_t rows,
                            std::uint64_t cols, std::uint32_t elem_bytes, cudaStream_t stream);

}  // namespace hoist::transport
