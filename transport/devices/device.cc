#include "transport/devices/device.h"

#include <array>
#include <utility>

namespace hoist::transport {
namespace {
constexpr std::array<std::pair<StagingKind, std::string_view>, 3> kKinds = {{
    {StagingKind::kAuto, "auto"},
    {StagingKind::kRegister, "register"},
    {StagingKind::kMallocHost, "mallochost"},
}};
}  // namespace

std::optional<StagingKind> ParseStagingKind(std::string_view name) {
  for (const auto& [k, n] : kKinds) {
    if (n == name) return k;
  }
  return std::nullopt;
}

std::string_view StagingKindName(StagingKind kind) {
  for (const auto& [k, n] : kKinds) {
    if (k == kind) return n;
  }
  return "?";
}

#ifndef HOIST_HAVE_CUDA
int CudaDeviceCount() { return 0; }
Result<std::string> CudaPciBusId(int ordinal) {
  return Status::Unsupported("cuda:" + std::to_string(ordinal) +
                             ": this build of hoist has no CUDA backend (toolkit not found)");
}
bool CudaPeerAccessAll() { return false; }

Result<std::unique_ptr<Device>> OpenCudaDevice(int ordinal) {
  return Status::Unsupported("cuda:" + std::to_string(ordinal) +
                             ": this build of hoist has no CUDA backend (toolkit not found)");
}
#endif

}  // namespace hoist::transport
