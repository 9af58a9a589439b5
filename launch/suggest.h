// "Did you mean" for the command line: util/suggest.h (shared with the topology file's keys).
#pragma once

#include "util/suggest.h"

namespace hoist::launch {

using hoist::EditDistance;
using hoist::Nearest;

}  // namespace hoist::launch
