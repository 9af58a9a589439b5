// Paths the tests need: the hoist and hoist-mkckpt binaries and the source tree. The build
// compiles them in (tests/CMakeLists.txt); the environment (HOIST_BIN, HOIST_MKCKPT,
// HOIST_SOURCE_DIR) overrides them.
#pragma once

#include <cstdlib>
#include <string>

namespace hoist::testing {

inline std::string PathFromEnv(const char* var, const char* built_in) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? v : built_in;
}
inline std::string HoistBin() { return PathFromEnv("HOIST_BIN", HOIST_BIN_PATH); }
inline std::string MkckptBin() { return PathFromEnv("HOIST_MKCKPT", HOIST_MKCKPT_PATH); }
inline std::string SourceDir() { return PathFromEnv("HOIST_SOURCE_DIR", HOIST_SOURCE_DIR_PATH); }

}  // namespace hoist::testing
