// Copies into memory the CPU will not read again (staging slots that the GPU's DMA reads) with
// non-temporal stores: the destination's lines are written to memory without first being read
// into the cache (a plain memcpy of rows a few KiB long reads every destination line before
// writing it), and they do not evict the source lines other fill threads are about to read.
//
// StreamCopy is memcpy's contract (no overlap); its stores are weakly ordered, so the thread
// calls StreamFence before another agent (a thread, a DMA) may read what it copied. Without
// SSE2 (non-x86 builds) both are plain memcpy and nothing. Failure: none. Threading: any thread;
// the fence orders only the calling thread's stores.
#pragma once

#include <cstddef>

namespace hoist::transport {

// Copies below this many bytes go through memcpy (whose stores need no fence either way).
inline constexpr std::size_t kStreamCopyMinBytes = 1024;

void StreamCopy(void* dst, const void* src, std::size_t n);
void StreamFence();

}  // namespace hoist::transport
