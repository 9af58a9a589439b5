#include "transport/source.h"

#include <array>
#include <utility>

namespace hoist::transport {
namespace {
constexpr std::array<std::pair<ReadMode, std::string_view>, 6> kModes = {{
    {ReadMode::kAuto, "auto"},
    {ReadMode::kBuffered, "buffered"},
    {ReadMode::kDirect, "direct"},
    {ReadMode::kMmap, "mmap"},
    {ReadMode::kPageable, "pageable"},
    {ReadMode::kRegistered, "registered"},
}};
}  // namespace

std::optional<ReadMode> ParseReadMode(std::string_view name) {
  for (const auto& [mode, n] : kModes) {
    if (n == name) return mode;
  }
  return std::nullopt;
}

std::string_view ReadModeName(ReadMode mode) {
  for (const auto& [m, n] : kModes) {
    if (m == mode) return n;
  }
  return "?";
}

}  // namespace hoist::transport
