// Pinned staging kept between loads of one process. Setting up a ring (touching its pages and
// registering them with the driver, or cudaMallocHost) costs 6-20 ms per load on the H200 box;
// an engine that loads more than once (the embedding API, a daemon that loads again) pays it
// only on the first load when freed staging is kept here and handed back to the next request of
// the same device, kind and size.
//
// Ownership: the pool holds the buffers it was given until Take hands one back or Give/Trim
// returns it to the caller to free; it never frees memory itself (it knows no device). It keeps
// at most `capacity_bytes`; Give evicts the oldest buffers first and returns what does not fit.
// Failure: none (pure bookkeeping). Threading: every method is safe from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "transport/devices/device.h"

namespace hoist::transport {

class StagingPool {
 public:
  // Default capacity: a ring of 8 x 16 MiB, or two of 4 x 16 MiB.
  static constexpr std::uint64_t kDefaultCapacity = 128ull << 20;

  explicit StagingPool(std::uint64_t capacity_bytes = kDefaultCapacity)
      : capacity_(capacity_bytes) {}

  // A kept buffer of exactly `bytes` and `kind` for device `ordinal`, or none.
  std::optional<HostBuffer> Take(int ordinal, StagingKind kind, std::uint64_t bytes);

  // Keeps `buffer` (of device `ordinal`) for a later Take. Returns the buffers the caller must
  // free now: older ones evicted to make room, or `buffer` itself when it is larger than the
  // capacity.
  std::vector<HostBuffer> Give(int ordinal, const HostBuffer& buffer);

  // Everything kept for device `ordinal` (-1: every device), for the caller to free.
  std::vector<HostBuffer> Trim(int ordinal = -1);

  std::uint64_t kept_bytes() const;
  std::uint64_t capacity_bytes() const { return capacity_; }

 private:
  struct Kept {
    int ordinal;
    HostBuffer buffer;
  };
  const std::uint64_t capacity_;
  mutable std::mutex mu_;
  std::deque<Kept> kept_;  // oldest first; guarded by mu_
  std::uint64_t kept_bytes_ = 0;
};

}  // namespace hoist::transport
