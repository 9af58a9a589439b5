// The Device seam (skeleton; transport/ owner fills in).
#pragma once

#include <cstdint>
#include <string>

#include "hoist/status.h"

namespace hoist::transport {

struct DeviceBuffer {
  void* ptr = nullptr;
  std::uint64_t bytes = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string Name() const = 0;
};

}  // namespace hoist::transport
