// A decoder made on a helper thread: Device::CreateDecoder uploads a decode set's jobs and tables
// (milliseconds on a GPU), so a packed load or restore starts making it, goes on copying blocks
// into device slots, and waits for it only to enqueue the first decode.
//
// Ownership: borrows the device and the decode set, which must outlive it; the decoder it made
// is destroyed by Destroy (the caller's streams that ran its jobs must have completed first).
// Failure: the making's error is every Get's; Get before Start is Internal.
// Threading: any thread; the calls are serialized inside. The destructor waits for a making
// still running (it does not destroy the decoder: call Destroy).
#pragma once

#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "hoist/status.h"
#include "transport/devices/device.h"

namespace hoist::transport {

class DecoderMaker {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts making `set`'s decoder on a helper thread (here, when no thread can start). Once.
  void Start(Device& device, const DecodeSet& set);
  // Whether Get would return at once: the making has ended, well or not (or never started).
  bool Ready();
  // Waits for the making: the decoder, or the making's error, on every call until Destroy.
  Result<DecoderId> Get();
  // Waits for the making and destroys the decoder it made, if any; then Get is Internal.
  Status Destroy();

  // When the making ran, and its steps as the device timed them (Device::DecoderSteps), once it
  // has ended and made a decoder.
  struct Making {
    Clock::time_point start, end;
    std::vector<Device::DecoderStep> steps;
  };
  std::optional<Making> making();

 private:
  Result<DecoderId> GetLocked();

  std::mutex mu_;
  Device* device_ = nullptr;
  std::future<Result<DecoderId>> made_;
  std::optional<Making> making_;  // written by the making thread before made_ is ready
  DecoderId decoder_ = -1;
  Status status_ = Status::Internal("no decoder was started");
};

}  // namespace hoist::transport
