#include "transport/devices/device.h"

namespace hoist::transport {
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
