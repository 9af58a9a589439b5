// A page map of a whole file's page-cache residency, taken once: the report's
// bytes_resident_at_start in the modes other than `auto`, and auto's per-file verdict before the
// fill (transport/staging/pipeline.h). Measured with mincore on a temporary mapping, or cachestat
// where mincore may not report; the file is opened as every source opens one
// (transport/reading/page_cache.h: regular files only, never blocking).
//
// Ownership: a value. Failure: Measure returns the open's or the system call's error naming the
// path. Threading: Measure may use several threads; a Residency is immutable afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"

namespace hoist::transport {

// Page-cache residency of one file: one bit per page, taken when the call is made.
class Residency {
 public:
  // Measures the residency of [0, size) of `path`. Uses mincore on a temporary mapping and falls
  // back to cachestat (Linux >= 6.5, per 1 MiB granule) when mincore cannot see the page cache
  // (a file the caller neither owns nor may write). Threads > 1 split the file between threads
  // (at most 16, at least 64 MiB each; threads the system refuses are done inline).
  static Result<Residency> Measure(const std::string& path, int threads = 1);

  // A residency where every page is resident (or none): for tests and for unknown cases.
  static Residency Uniform(std::uint64_t size, bool resident);
  // An explicit page map (pages[i] != 0: page i resident); for tests.
  static Residency FromPages(std::uint64_t size, std::uint64_t page_bytes,
                             std::vector<unsigned char> pages);

  std::uint64_t size() const { return size_; }
  std::uint64_t page_bytes() const { return page_; }
  // Bytes of [offset, offset + n) that lie in resident pages.
  std::uint64_t ResidentBytes(std::uint64_t offset, std::uint64_t n) const;
  // Resident bytes of a strided block.
  std::uint64_t ResidentBytes(std::uint64_t offset, std::uint64_t pitch, std::uint64_t width,
                              std::uint64_t rows) const;
  std::uint64_t TotalResident() const;
  std::string_view method() const { return method_; }  // "mincore", "cachestat", "uniform"

 private:
  std::uint64_t size_ = 0;
  std::uint64_t page_ = 4096;
  std::vector<unsigned char> pages_;   // 1: resident
  std::vector<std::uint64_t> prefix_;  // prefix_[i]: resident pages in [0, i)
  std::string method_;
  void BuildPrefix();
};

}  // namespace hoist::transport
