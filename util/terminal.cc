#include "util/terminal.h"

#include <cstdlib>
#include <initializer_list>

namespace hoist {

bool LogColoursAllowed() {
  const char* no_color = std::getenv("NO_COLOR");  // set and not empty: no colour
  if (no_color != nullptr && *no_color != '\0') return false;
  return !UnderLauncher();
}

bool UnderLauncher() {
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (std::getenv(launcher) != nullptr) return true;
  }
  return false;
}

}  // namespace hoist
