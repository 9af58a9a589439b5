// The host backend's DeviceSignal (transport/devices/device.h): an atomic counter and a condition
// variable; EnqueueWait blocks the calling thread until the counter reaches the value. Also
// Device::CreateSignal's default, so every backend has one.
// Threading: any thread.
#include <condition_variable>
#include <mutex>

#include "transport/devices/device.h"

namespace hoist::transport {
namespace {

class HostSignal final : public DeviceSignal {
 public:
  void Raise(std::uint32_t value) override {
    {
      std::lock_guard lock(mu_);
      if (value <= value_) return;
      value_ = value;
    }
    cv_.notify_all();
  }
  std::uint32_t Value() const override {
    std::lock_guard lock(mu_);
    return value_;
  }
  Status EnqueueWait(void* /*stream*/, std::uint32_t value) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return value_ >= value; });
    return Status::Ok();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint32_t value_ = 0;
};

}  // namespace

std::unique_ptr<DeviceSignal> MakeHostSignal() { return std::make_unique<HostSignal>(); }

Result<std::unique_ptr<DeviceSignal>> Device::CreateSignal() { return MakeHostSignal(); }

}  // namespace hoist::transport
