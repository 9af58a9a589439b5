// spdlog set-up: every line carries rank and host. Threading: call once, before other threads.
#pragma once

#include <string>

#include "hoist/status.h"

namespace hoist::launch {

Status SetUpLogging(const std::string& level, int rank, const std::string& host);

}  // namespace hoist::launch
