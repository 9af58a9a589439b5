// Process-wide count of checkpoint metadata files (config.json, the index, safetensors headers)
// opened by planner/. The job report carries it per rank, which is how tests prove that only
// rank 0 reads headers. Threading: atomic.
#pragma once

#include <atomic>
#include <cstdint>

namespace hoist::planner {

inline std::atomic<std::uint64_t>& HeaderOpenCounter() {
  static std::atomic<std::uint64_t> counter{0};
  return counter;
}
inline void CountHeaderOpen() { HeaderOpenCounter().fetch_add(1, std::memory_order_relaxed); }
inline std::uint64_t HeaderOpenCount() {
  return HeaderOpenCounter().load(std::memory_order_relaxed);
}

}  // namespace hoist::planner
