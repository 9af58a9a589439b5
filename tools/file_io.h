// Whole-buffer file writes for the tools that write checkpoints (hoist-mkckpt, hoist pack).
//
// Ownership: the caller owns the descriptor. Failure: IoError naming the path, the size and the
// offset (and errno's text). Threading: any thread; writes to distinct ranges of one descriptor
// may run concurrently.
#pragma once

#include <cstdint>
#include <string>

#include "hoist/status.h"

namespace hoist::tools {

// pwrites all n bytes at `offset`, retrying EINTR and short writes.
Status WriteAll(int fd, const std::uint8_t* data, std::uint64_t n, std::uint64_t offset,
                const std::string& path);

}  // namespace hoist::tools
