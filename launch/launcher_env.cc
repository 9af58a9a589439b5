#include "launch/launcher_env.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace hoist::launch {
namespace {

// The first of `vars` that is set to a non-negative integer, else -1.
int FirstIndex(std::initializer_list<const char*> vars) {
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (errno == 0 && *end == '\0' && n >= 0 && n <= 0x7fffffff) return static_cast<int>(n);
  }
  return -1;
}

}  // namespace

int LauncherRank() {
  return FirstIndex({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"});
}

int LauncherLocalRank() {
  return FirstIndex(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMIX_LOCAL_RANK", "SLURM_LOCALID"});
}

}  // namespace hoist::launch
