#include "transport/devices/staging_pool.h"

namespace hoist::transport {

std::optional<HostBuffer> StagingPool::Take(int ordinal, StagingKind kind, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->ordinal == ordinal && it->buffer.kind == kind && it->buffer.bytes == bytes) {
      HostBuffer b = it->buffer;
      kept_bytes_ -= b.bytes;
      kept_.erase(it);
      return b;
    }
  }
  return std::nullopt;
}

std::vector<HostBuffer> StagingPool::Give(int ordinal, const HostBuffer& buffer) {
  std::vector<HostBuffer> out;
  if (buffer.ptr == nullptr) return out;
  if (buffer.bytes > capacity_) {
    out.push_back(buffer);
    return out;
  }
  std::lock_guard lock(mu_);
  while (kept_bytes_ + buffer.bytes > capacity_) {
    out.push_back(kept_.front().buffer);
    kept_bytes_ -= kept_.front().buffer.bytes;
    kept_.pop_front();
  }
  kept_.push_back(Kept{ordinal, buffer});
  kept_bytes_ += buffer.bytes;
  return out;
}

std::vector<HostBuffer> StagingPool::Trim(int ordinal) {
  std::vector<HostBuffer> out;
  std::lock_guard lock(mu_);
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (ordinal >= 0 && it->ordinal != ordinal) {
      ++it;
      continue;
    }
    out.push_back(it->buffer);
    kept_bytes_ -= it->buffer.bytes;
    it = kept_.erase(it);
  }
  return out;
}

std::uint64_t StagingPool::kept_bytes() const {
  std::lock_guard lock(mu_);
  return kept_bytes_;
}

}  // namespace hoist::transport
