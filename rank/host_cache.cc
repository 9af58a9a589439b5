#include "rank/host_cache.h"

#include <algorithm>
#include <chrono>

namespace hoist::rank {
namespace {
using Clock = std::chrono::steady_clock;
// Restore enqueues the copy in pieces this large (one stream: the DMA engine stays busy).
constexpr std::uint64_t kPiece = 256ull << 20;
}  // namespace

Result<std::unique_ptr<HostCache>> HostCache::Capture(transport::Device& device,
                                                      const transport::DeviceBuffer& arena) {
  // Touched + registered memory: restores from it ran at the same 48.0 GiB/s as from
  // cudaMallocHost memory on the H200 box (docs/BENCHMARKS.md), and it is ten times cheaper to set
  // up.
  HOIST_ASSIGN_OR_RETURN(transport::HostBuffer buffer,
                         device.AllocateStaging(std::max<std::uint64_t>(arena.bytes, 1),
                                                transport::StagingKind::kRegister));
  std::unique_ptr<HostCache> cache(new HostCache(device, buffer));
  cache->buffer_.bytes = arena.bytes;
  Status s = device.CopyToHost(buffer.ptr, arena.ptr, arena.bytes);
  if (!s.ok())
    return s.Annotate("host cache: copying the " + std::to_string(arena.bytes) +
                      "-byte arena to pinned memory");
  return cache;
}

HostCache::~HostCache() {
  transport::HostBuffer b = buffer_;
  b.bytes = std::max<std::uint64_t>(b.bytes, 1);
  (void)device_.FreeStaging(b);
}

Result<transport::DeviceBuffer> HostCache::Restore(RestoreTiming* timing) {
  const Clock::time_point a = Clock::now();
  HOIST_ASSIGN_OR_RETURN(transport::DeviceBuffer arena, device_.Allocate(buffer_.bytes));
  const Clock::time_point b = Clock::now();
  double dma_seconds = 0;
  Status s = CopyIn(arena, &dma_seconds);
  if (!s.ok()) {
    (void)device_.Free(arena);
    return s.Annotate("host cache: restoring " + std::to_string(buffer_.bytes) + " bytes");
  }
  if (timing != nullptr) {
    timing->bytes = buffer_.bytes;
    timing->alloc_seconds = std::chrono::duration<double>(b - a).count();
    timing->seconds = std::chrono::duration<double>(Clock::now() - b).count();
    timing->dma_seconds = dma_seconds;
  }
  return arena;
}

// The cache into `arena` on a new stream, between two timing events (*dma_seconds: their
// distance). The first error wins; the stream and events are destroyed in every case.
Status HostCache::CopyIn(const transport::DeviceBuffer& arena, double* dma_seconds) {
  HOIST_ASSIGN_OR_RETURN(transport::StreamId stream, device_.CreateStream());
  Result<transport::EventId> from = device_.CreateEvent(true);
  Result<transport::EventId> to = device_.CreateEvent(true);
  Status status = !from.ok() ? from.status() : to.status();
  if (status.ok()) status = device_.Record(*from, stream);
  for (std::uint64_t off = 0; off < buffer_.bytes && status.ok(); off += kPiece) {
    transport::Copy2D op;
    op.dst = static_cast<std::byte*>(arena.ptr) + off;
    op.src = buffer_.ptr + off;
    op.width = std::min(kPiece, buffer_.bytes - off);
    status = device_.CopyAsync(op, stream);
  }
  if (status.ok()) status = device_.Record(*to, stream);
  Status sync = device_.Synchronize(stream);
  if (status.ok()) status = sync;
  if (status.ok()) {
    Result<double> elapsed = device_.Elapsed(*from, *to);
    if (elapsed.ok()) *dma_seconds = *elapsed;
    status = elapsed.status();
  }
  for (const Result<transport::EventId>* e : {&from, &to}) {
    if (e->ok()) (void)device_.DestroyEvent(**e);
  }
  Status destroy = device_.DestroyStream(stream);
  return status.ok() ? destroy : status;
}

}  // namespace hoist::rank
