#include "transport/reading/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "util/file_kind.h"

namespace hoist::transport::reading_internal {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// cachestat(2), Linux >= 6.5. Same syscall number on x86_64 and aarch64.
struct CachestatRange {
  std::uint64_t off;
  std::uint64_t len;
};
struct CachestatResult {
  std::uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
constexpr long kSysCachestat = 451;

// Set once cachestat is found missing (ENOSYS): later calls skip the system call.
std::atomic<bool> g_no_cachestat{false};

Status OpenError(const std::string& path, const char* call, int err) {
  if (err == ENOENT) return Status::NotFound(path + ": " + call + ": " + Errno(err));
  return Status::IoError(path + ": " + call + ": " + Errno(err));
}

}  // namespace

std::uint64_t PageBytes() {
  static const std::uint64_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::uint64_t>(p) : 4096u;
  }();
  return page;
}

// Pages of [off, off + len) of the file open as fd in the page cache (cachestat); nullopt where
// cachestat is missing or fails.
std::optional<std::uint64_t> CachedPages(int fd, std::uint64_t off, std::uint64_t len) {
  if (fd < 0 || g_no_cachestat.load(std::memory_order_relaxed)) return std::nullopt;
  CachestatRange range{off, len};
  CachestatResult cs{};
  if (::syscall(kSysCachestat, fd, &range, &cs, 0) != 0) {
    if (errno == ENOSYS) g_no_cachestat.store(true, std::memory_order_relaxed);
    return std::nullopt;
  }
  return cs.nr_cache;
}

namespace {

// Resident bytes of [off, off + n) of the file open as fd, by cachestat over the pages the range
// touches; nullopt where cachestat is missing or fails. Partly resident: whole resident pages.
std::optional<std::uint64_t> CachedRange(int fd, std::uint64_t off, std::uint64_t n) {
  if (n == 0) return 0;
  const std::uint64_t page = PageBytes();
  const std::uint64_t lo = off / page * page, hi = (off + n + page - 1) / page * page;
  const std::optional<std::uint64_t> cached = CachedPages(fd, lo, hi - lo);
  if (!cached) return std::nullopt;
  if (*cached >= (hi - lo) / page) return n;
  return std::min(n, *cached * page);
}

}  // namespace

// Resident bytes of [off, off + n) of a mapping, by mincore (the vector reused per thread);
// nullopt where mincore fails.
std::optional<std::uint64_t> MincoreRange(const std::byte* map, std::uint64_t off,
                                          std::uint64_t n) {
  if (n == 0) return 0;
  const std::uint64_t page = PageBytes();
  const std::uint64_t p0 = off / page, p1 = (off + n + page - 1) / page;
  thread_local std::vector<unsigned char> vec;
  vec.resize(p1 - p0);
  if (::mincore(const_cast<std::byte*>(map) + p0 * page, (p1 - p0) * page, vec.data()) != 0) {
    return std::nullopt;
  }
  std::uint64_t got = 0;
  for (std::uint64_t k = p0; k < p1; ++k) {
    if (!(vec[k - p0] & 1)) continue;
    got += std::min(off + n, (k + 1) * page) - std::max(off, k * page);
  }
  return got;
}

std::optional<std::uint64_t> FdResident(int fd, std::uint64_t size, const RowsRead& b) {
  return BlockResident(
      size, b, [fd](std::uint64_t off, std::uint64_t n) { return CachedRange(fd, off, n); });
}

Result<std::pair<Fd, std::uint64_t>> OpenAndStat(const std::string& path, int flags) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, "stat", errno);
  if (!S_ISREG(st.st_mode)) return Status::Corrupt(NotARegularFile(path, st.st_mode));
  const int direct = flags & O_DIRECT;
  int fd = ::open(path.c_str(), (flags & ~O_DIRECT) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, "open", errno);
  Fd owned(fd);
  if (::fstat(fd, &st) != 0) return OpenError(path, "fstat", errno);
  if (!S_ISREG(st.st_mode)) return Status::Corrupt(NotARegularFile(path, st.st_mode));
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, (fl & ~O_NONBLOCK) | direct) != 0) {
    const int err = errno;
    if (err == EINVAL && direct != 0) {
      return Status::Unsupported(path + ": open with O_DIRECT: " + Errno(err) +
                                 " (the filesystem does not support direct I/O)");
    }
    return OpenError(path, "fcntl", err);
  }
  return std::make_pair(std::move(owned), static_cast<std::uint64_t>(st.st_size));
}

}  // namespace hoist::transport::reading_internal
