#include "tools/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hoist::tools {

Status WriteAll(int fd, const std::uint8_t* data, std::uint64_t n, std::uint64_t offset,
                const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path + ": pwrite of " + std::to_string(n) + " bytes at offset " +
                             std::to_string(offset) + ": " + std::strerror(errno));
    }
    if (w == 0) {
      return Status::IoError(path + ": pwrite wrote 0 bytes at offset " + std::to_string(offset));
    }
    data += w;
    n -= static_cast<std::uint64_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
  return Status::Ok();
}

}  // namespace hoist::tools
