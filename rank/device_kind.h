// Where a rank's arena lives (the `device` option): a CUDA GPU, host memory standing in for one
// (the host backend, transport/devices/device.h), or auto (CUDA when a GPU is visible, else
// host). Its one name table is the option's choices (config/option_table.h).
// Threading: constants.
#pragma once

#include "util/enum_names.h"

namespace hoist::rank {

enum class DeviceKind { kAuto, kCuda, kHost };
inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {
    {DeviceKind::kAuto, "auto"},
    {DeviceKind::kCuda, "cuda"},
    {DeviceKind::kHost, "host"},
};

}  // namespace hoist::rank
