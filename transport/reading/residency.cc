#include "transport/reading/residency.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include "transport/reading/page_cache.h"

namespace hoist::transport {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// Residency::Measure splits a file between at most this many threads.
constexpr std::uint64_t kMaxMeasureThreads = 16;

}  // namespace

using reading_internal::CachedPages;
using reading_internal::OpenAndStat;

Residency Residency::Uniform(std::uint64_t size, bool resident) {
  Residency r;
  r.size_ = size;
  r.page_ = 4096;
  r.pages_.assign((size + r.page_ - 1) / r.page_, resident ? 1 : 0);
  r.method_ = "uniform";
  r.BuildPrefix();
  return r;
}

Residency Residency::FromPages(std::uint64_t size, std::uint64_t page_bytes,
                               std::vector<unsigned char> pages) {
  Residency r;
  r.size_ = size;
  r.page_ = page_bytes == 0 ? 4096 : page_bytes;
  pages.resize((size + r.page_ - 1) / r.page_, 0);
  for (unsigned char& p : pages) p = p ? 1 : 0;
  r.pages_ = std::move(pages);
  r.method_ = "explicit";
  r.BuildPrefix();
  return r;
}

void Residency::BuildPrefix() {
  prefix_.assign(pages_.size() + 1, 0);
  for (std::size_t i = 0; i < pages_.size(); ++i) prefix_[i + 1] = prefix_[i] + (pages_[i] & 1);
}

Result<Residency> Residency::Measure(const std::string& path, int threads) {
  HOIST_ASSIGN_OR_RETURN(auto fs, OpenAndStat(path, O_RDONLY));
  Residency r;
  r.size_ = fs.second;
  long ps = ::sysconf(_SC_PAGESIZE);
  r.page_ = ps > 0 ? static_cast<std::uint64_t>(ps) : 4096;
  const std::uint64_t npages = (r.size_ + r.page_ - 1) / r.page_;
  r.pages_.assign(npages, 0);
  if (npages == 0) {
    r.method_ = "mincore";
    r.BuildPrefix();
    return r;
  }
  // mincore sees the page cache only for files the caller owns or may write (Linux >= 5.2);
  // otherwise it reports only pages mapped in this process. Then prefer cachestat.
  struct stat st;
  bool visible =
      ::fstat(fs.first.get(), &st) == 0 &&
      (st.st_uid == ::geteuid() || ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0);
  if (!visible) {
    const std::uint64_t granule = 1ull << 20;
    bool ok = true;
    for (std::uint64_t off = 0; off < r.size_ && ok; off += granule) {
      const std::uint64_t len = std::min(granule, r.size_ - off);
      const std::optional<std::uint64_t> cached = CachedPages(fs.first.get(), off, len);
      if (!cached) {
        ok = false;
        break;
      }
      const std::uint64_t p0 = off / r.page_;
      const std::uint64_t pn = (len + r.page_ - 1) / r.page_;
      // Counts only: mark the first `cached` pages of the granule (exact in total).
      for (std::uint64_t k = 0; k < pn && k < *cached; ++k) r.pages_[p0 + k] = 1;
    }
    if (ok) {
      r.method_ = "cachestat";
      r.BuildPrefix();
      return r;
    }
    std::fill(r.pages_.begin(), r.pages_.end(), 0);
  }
  void* map = ::mmap(nullptr, r.size_, PROT_READ, MAP_SHARED, fs.first.get(), 0);
  if (map == MAP_FAILED) {
    return Status::IoError(path + ": mmap for mincore: " + Errno(errno));
  }
  // At least 64 MiB per thread, at most kMaxMeasureThreads (a huge `threads` costs nothing).
  const int nt = static_cast<int>(
      std::clamp<std::uint64_t>(std::min<std::uint64_t>(npages / 16384 + 1, kMaxMeasureThreads), 1,
                                static_cast<std::uint64_t>(std::max(threads, 1))));
  std::vector<int> errs(nt, 0);
  auto work = [&](int t) {
    std::uint64_t p0 = npages * t / nt, p1 = npages * (t + 1) / nt;
    if (p1 > p0 && ::mincore(static_cast<std::byte*>(map) + p0 * r.page_, (p1 - p0) * r.page_,
                             r.pages_.data() + p0) != 0) {
      errs[t] = errno;
    }
  };
  if (nt == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    int t = 0;
    try {
      for (; t < nt; ++t) pool.emplace_back(work, t);
    } catch (const std::system_error&) {
      // No more threads to be had: this thread measures the parts not yet started.
    }
    for (int rest = t; rest < nt; ++rest) work(rest);
    for (auto& th : pool) th.join();
  }
  ::munmap(map, r.size_);
  for (int e : errs) {
    if (e != 0) return Status::IoError(path + ": mincore: " + Errno(e));
  }
  r.method_ = visible ? "mincore" : "mincore-limited";
  r.BuildPrefix();
  return r;
}

std::uint64_t Residency::ResidentBytes(std::uint64_t offset, std::uint64_t n) const {
  if (offset >= size_ || n == 0) return 0;
  n = std::min(n, size_ - offset);
  const std::uint64_t end = offset + n;
  const std::uint64_t p0 = offset / page_, p1 = (end - 1) / page_;
  if (p0 == p1) return (pages_[p0] & 1) ? n : 0;
  std::uint64_t total = 0;
  if (pages_[p0] & 1) total += (p0 + 1) * page_ - offset;
  if (pages_[p1] & 1) total += end - p1 * page_;
  total += (prefix_[p1] - prefix_[p0 + 1]) * page_;
  return total;
}

std::uint64_t Residency::ResidentBytes(std::uint64_t offset, std::uint64_t pitch,
                                       std::uint64_t width, std::uint64_t rows) const {
  if (rows <= 1 || pitch == width) return ResidentBytes(offset, width * rows);
  std::uint64_t total = 0;
  for (std::uint64_t i = 0; i < rows; ++i) total += ResidentBytes(offset + i * pitch, width);
  return total;
}

std::uint64_t Residency::TotalResident() const { return ResidentBytes(0, size_); }

}  // namespace hoist::transport
