// The Source seam: read a byte range of one file into caller memory.
// (Skeleton: transport/ owner fills in the implementations; see docs.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "hoist/status.h"

namespace hoist::transport {

enum class ReadMode { kAuto, kBuffered, kDirect, kMmap, kPageable, kRegistered };

std::optional<ReadMode> ParseReadMode(std::string_view name);
std::string_view ReadModeName(ReadMode mode);

}  // namespace hoist::transport
