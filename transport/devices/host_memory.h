// Page-aligned anonymous host memory for staging, touched before use so that registering it for
// DMA (cudaHostRegister) is cheap and its pages land on the calling thread's NUMA policy.
//
// Ownership: the caller frees with FreeTouched(ptr, bytes). Failure: ResourceExhausted naming the
// size. Threading: thread-safe; `threads` > 1 touches the pages in parallel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hoist/status.h"

namespace hoist::transport {

// Huge pages are requested (MADV_HUGEPAGE) and the range is populated (MADV_POPULATE_WRITE, or a
// write per page on kernels without it).
Result<std::byte*> AllocTouched(std::uint64_t bytes, int threads = 1);
void FreeTouched(std::byte* ptr, std::uint64_t bytes);

}  // namespace hoist::transport
