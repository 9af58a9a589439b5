// The page cache and file opening, shared by transport/reading/'s sources (Source::ResidentNow)
// and Residency::Measure (internal to transport/reading/): how many of a file's pages are cached
// (cachestat, Linux >= 6.5; mincore on a mapping), and opening a regular file without blocking.
//
// Ownership: Fd owns its descriptor. Failure: the counters return std::nullopt where the system
// call is missing or fails; OpenAndStat a Status naming the path and the call. Threading: pure
// functions (cachestat's absence, once seen, is remembered in an atomic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "hoist/status.h"
#include "transport/reading/source.h"

namespace hoist::transport::reading_internal {

std::uint64_t PageBytes();

// Pages of [off, off + len) of the file open as fd in the page cache (cachestat); nullopt where
// cachestat is missing or fails.
std::optional<std::uint64_t> CachedPages(int fd, std::uint64_t off, std::uint64_t len);

// Resident bytes of [off, off + n) of a mapping, by mincore (the vector reused per thread);
// nullopt where mincore fails.
std::optional<std::uint64_t> MincoreRange(const std::byte* map, std::uint64_t off, std::uint64_t n);

// Source::ResidentNow for a file of `size` bytes, given a counter of resident bytes over a
// contiguous range: the block's extent (clipped to the file) counted once, scaled to its bytes.
template <class Count>
std::optional<std::uint64_t> BlockResident(std::uint64_t size, const RowsRead& b, Count count) {
  if (b.rows == 0 || b.width == 0 || b.offset >= size) return 0;
  std::uint64_t bytes = 0, extent = 0;
  if (__builtin_mul_overflow(b.width, b.rows, &bytes)) return std::nullopt;
  const bool contiguous = b.rows == 1 || b.src_pitch == b.width;
  if (contiguous) {
    extent = bytes;
  } else if (__builtin_mul_overflow(b.rows - 1, b.src_pitch, &extent) ||
             __builtin_add_overflow(extent, b.width, &extent)) {
    return std::nullopt;
  }
  const std::uint64_t n = std::min(extent, size - b.offset);
  const std::optional<std::uint64_t> here = count(b.offset, n);
  if (!here || contiguous) return here;
  if (*here >= n) return bytes;
  return static_cast<std::uint64_t>(static_cast<double>(*here) / static_cast<double>(n) *
                                    static_cast<double>(bytes));
}

// Source::ResidentNow of a file open as fd, by cachestat.
std::optional<std::uint64_t> FdResident(int fd, std::uint64_t size, const RowsRead& b);

// A file descriptor, closed when destroyed.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Opens a regular file (never anything else, never blocking): stat first, so that a FIFO or a
// device is not opened at all; then a non-blocking open and fstat of what was opened (a file
// swapped for a FIFO since the stat returns at once and is refused); then O_NONBLOCK is cleared
// and, when asked, O_DIRECT set (F_SETFL: EINVAL where the filesystem refuses direct I/O).
// Returns the descriptor and the file's size.
Result<std::pair<Fd, std::uint64_t>> OpenAndStat(const std::string& path, int flags);

}  // namespace hoist::transport::reading_internal
