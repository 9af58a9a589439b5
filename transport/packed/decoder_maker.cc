#include "transport/packed/decoder_maker.h"

#include <system_error>

namespace hoist::transport {

void DecoderMaker::Start(Device& device, const DecodeSet& set) {
  std::lock_guard lock(mu_);
  device_ = &device;
  auto make = [this, &device, &set] {
    const Clock::time_point a = Clock::now();
    Result<DecoderId> d = device.CreateDecoder(set);
    if (d.ok()) making_ = Making{a, Clock::now(), device.DecoderSteps(*d)};
    return d;
  };
  try {
    made_ = std::async(std::launch::async, make);
  } catch (const std::system_error&) {  // no thread: make it here
    std::promise<Result<DecoderId>> now;
    now.set_value(make());
    made_ = now.get_future();
  }
}

bool DecoderMaker::Ready() {
  std::lock_guard lock(mu_);
  return !made_.valid() || made_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Result<DecoderId> DecoderMaker::GetLocked() {
  if (made_.valid()) {
    Result<DecoderId> d = made_.get();
    if (d.ok()) decoder_ = *d;
    status_ = d.status();
  }
  if (!status_.ok()) return status_;
  return decoder_;
}

Result<DecoderId> DecoderMaker::Get() {
  std::lock_guard lock(mu_);
  return GetLocked();
}

Status DecoderMaker::Destroy() {
  std::lock_guard lock(mu_);
  Result<DecoderId> d = GetLocked();
  if (!d.ok()) return Status::Ok();  // nothing was made (the error is Get's to report)
  decoder_ = -1;
  status_ = Status::Internal("the decoder was destroyed");
  return device_->DestroyDecoder(*d);
}

std::optional<DecoderMaker::Making> DecoderMaker::making() {
  std::lock_guard lock(mu_);
  if (made_.valid()) return std::nullopt;  // not taken by Get yet: the thread may still write it
  return making_;
}

}  // namespace hoist::transport
