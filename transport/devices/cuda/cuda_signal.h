// The CUDA backend's DeviceSignal (transport/devices/device.h): a word of mapped, portable pinned
// host memory that the host raises and engine streams wait on with cuStreamWaitValue32 (looked up
// through the runtime's driver entry point, so hoist links no libcuda).
// Ownership: the signal owns its pinned word (cudaFreeHost at destruction). Failure: allocation or
// lookup errors as Status naming the call. Threading: any thread.
#pragma once

#include <memory>

#include "hoist/status.h"
#include "transport/devices/device.h"

namespace hoist::transport {

// A signal on CUDA device `ordinal` (the calling thread's current device is set to it).
Result<std::unique_ptr<DeviceSignal>> CreateCudaSignal(int ordinal);

}  // namespace hoist::transport
