// spdlog set-up: every line carries rank and host, and the message is escaped for display
// (util/printable.h): control bytes and invalid UTF-8 in tensor names, paths or peer-supplied
// strings appear as \xNN, so one log record is one line and cannot drive the terminal.
// Threading: call once, before other threads (a second call replaces the "hoist" logger).
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>

#include "hoist/status.h"

namespace hoist::launch {

Status SetUpLogging(const std::string& level, int rank, const std::string& host);

// The formatter SetUpLogging installs: `pattern` as spdlog's, with %v replaced by the escaped
// message. Exposed for tests.
std::unique_ptr<spdlog::formatter> PrintableFormatter(const std::string& pattern);

}  // namespace hoist::launch
