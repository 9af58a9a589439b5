// The daemon's host cache (`hoist serve --host-cache`): a pinned host copy of a rank's arena, so
// `hoist ctl release` can free the device arena and `hoist ctl restore` bring it back with one
// DMA-speed pass (pinned memory -> device, no storage, no page cache).
//
// Ownership: a HostCache borrows the Device (which must outlive it) and owns the pinned buffer
// it allocated from that device (freed by the destructor). Failure: allocation, copy or
// synchronisation errors are returned as a Status naming the sizes. Threading: one thread at a
// time.
#pragma once

#include <cstdint>
#include <memory>

#include "hoist/status.h"
#include "transport/device.h"

namespace hoist::rank {

struct RestoreTiming {
  std::uint64_t bytes = 0;
  double seconds = 0;      // allocation excluded: the copy alone, enqueue to completion (host)
  double dma_seconds = 0;  // the copies alone, between two events on the stream (device clock)
  double alloc_seconds = 0;
};

class HostCache {
 public:
  // Copies the whole arena into newly allocated pinned host memory.
  static Result<std::unique_ptr<HostCache>> Capture(transport::Device& device,
                                                    const transport::DeviceBuffer& arena);
  ~HostCache();
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // Allocates a new arena on the device and fills it from the cache.
  Result<transport::DeviceBuffer> Restore(RestoreTiming* timing);

  std::uint64_t bytes() const { return buffer_.bytes; }
  const std::byte* data() const { return buffer_.ptr; }

 private:
  Status CopyIn(const transport::DeviceBuffer& arena, double* dma_seconds);
  HostCache(transport::Device& device, transport::HostBuffer buffer)
      : device_(device), buffer_(buffer) {}
  transport::Device& device_;
  transport::HostBuffer buffer_;
};

}  // namespace hoist::rank
