#include "util/units.h"

#include <cmath>
#include <cstdio>

namespace hoist {
namespace {

std::string Scaled(double v, const char* suffix) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%.0f B%s", std::floor(v), suffix);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s%s", v, kUnits[u], suffix);
  }
  return buf;
}

}  // namespace

std::string HumanBytes(std::uint64_t bytes) { return Scaled(static_cast<double>(bytes), ""); }

std::string HumanRate(double bytes_per_second) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0) bytes_per_second = 0;
  return Scaled(bytes_per_second, "/s");
}

}  // namespace hoist
