#include "transport/devices/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace hoist::transport {
namespace {

constexpr std::uint64_t kHuge = 2ull << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

std::uint64_t Rounded(std::uint64_t bytes) { return (bytes + kHuge - 1) / kHuge * kHuge; }

void Touch(std::byte* p, std::uint64_t n) {
  if (n == 0) return;
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  for (std::uint64_t off = 0; off < n; off += 4096) p[off] = std::byte{0};
}

}  // namespace

Result<std::byte*> AllocTouched(std::uint64_t bytes, int threads) {
  if (bytes == 0) return Status::InvalidArgument("staging allocation of 0 bytes");
  const std::uint64_t n = Rounded(bytes);
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("host staging: mmap of " + std::to_string(n) +
                                     " bytes: " + std::strerror(errno));
  }
  auto* base = static_cast<std::byte*>(p);
  ::madvise(base, n, MADV_HUGEPAGE);  // best effort
  const int nt =
      static_cast<int>(std::clamp<std::uint64_t>(n / (16 * kHuge), 1, std::max(1, threads)));
  if (nt == 1) {
    Touch(base, n);
  } else {
    std::vector<std::thread> pool;
    const std::uint64_t per = (n / kHuge + nt - 1) / nt * kHuge;
    for (int t = 0; t < nt; ++t) {
      std::uint64_t lo = std::min(n, per * t), hi = std::min(n, per * (t + 1));
      pool.emplace_back([=] { Touch(base + lo, hi - lo); });
    }
    for (auto& th : pool) th.join();
  }
  return base;
}

void FreeTouched(std::byte* ptr, std::uint64_t bytes) {
  if (ptr != nullptr) ::munmap(ptr, Rounded(bytes));
}

}  // namespace hoist::transport
