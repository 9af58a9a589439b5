// Opening checkpoint metadata files (config.json, the index, safetensors headers) without ever
// blocking: only regular files are opened. A FIFO, a device, a socket or a directory in their
// place is refused before any open (stat), and the open itself is non-blocking (O_NONBLOCK,
// cleared afterwards) with an fstat check on the opened descriptor, so a file swapped for a
// FIFO between the stat and the open cannot block either.
//
// Ownership: RegularFile owns its descriptor and closes it on destruction (move-only).
// Failure: NotFound (no such file), IoError (the OS failed stat/open/fstat/fcntl), Corrupt
// (the path is not a regular file: "<path> is a FIFO, not a regular file").
// Every Open counts one header open (planner/io_stats.h) unless told otherwise. Threading: a
// RegularFile is used by one thread at a time; Open is thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "hoist/status.h"

namespace hoist::planner {

class RegularFile {
 public:
  // `metadata`: count the open as a checkpoint metadata open (planner/io_stats.h).
  static Result<RegularFile> Open(const std::string& path, bool metadata = true);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  std::int64_t mtime_ns() const { return mtime_ns_; }

 private:
  RegularFile(int fd, std::uint64_t size, std::int64_t mtime_ns)
      : fd_(fd), size_(size), mtime_ns_(mtime_ns) {}
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::int64_t mtime_ns_ = 0;
};

}  // namespace hoist::planner
