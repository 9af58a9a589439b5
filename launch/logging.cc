#include "launch/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace hoist::launch {

Status SetUpLogging(const std::string& level, int rank, const std::string& host) {
  const spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("--log-level '" + level +
                                   "' is not one of trace, debug, info, warn, error, off");
  }
  auto logger = spdlog::stderr_color_mt("hoist");
  logger->set_pattern("[%H:%M:%S.%e] [rank " + std::to_string(rank) + " " + host + "] [%^%l%$] %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace hoist::launch
