// Guarded reads of file mappings. See mapped_read.h for the contract.
#include "transport/reading/mapped_read.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace hoist::transport {
namespace {

// ----- the SIGBUS guard ------------------------------------------------------------------------

// One guarded copy on one thread. `fault` is written by the signal handler.
struct Guard {
  sigjmp_buf env;
  const std::byte* lo = nullptr;  // the guarded mapping: [lo, hi)
  const std::byte* hi = nullptr;
  const std::byte* volatile fault = nullptr;
};

// Set only while this thread runs a guarded copy (the handler reads it on the faulting thread).
thread_local Guard* t_guard = nullptr;

struct sigaction g_previous;  // the SIGBUS action replaced by ours; written once, before use
bool g_installed = false;

void RestoreDefault() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

// Async-signal-safe: reads a thread-local pointer, compares addresses, jumps or chains.
void OnSigbus(int sig, siginfo_t* info, void* uctx) {
  Guard* g = t_guard;
  const auto* addr = static_cast<const std::byte*>(info->si_addr);
  // si_code > 0: raised by the kernel for a fault (not sent with kill or raise).
  if (g != nullptr && info->si_code > 0 && addr >= g->lo && addr < g->hi) {
    g->fault = addr;
    t_guard = nullptr;
    siglongjmp(g->env, 1);
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
      g_previous.sa_sigaction(sig, info, uctx);
    } else {
      g_previous.sa_handler(sig);
    }
    return;
  }
  // Not ours and nobody else's: the default action. A fault re-executes the faulting instruction
  // when the handler returns and now dies of it; a signal sent by a process is raised again.
  RestoreDefault();
  if (info->si_code <= 0) ::raise(sig);
}

bool InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnSigbus;
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: SIGBUS stays unblocked in the handler, so leaving it by siglongjmp needs no
    // mask restore (sigsetjmp(env, 0): no system call per guarded copy).
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    // The previous action is read first, so the handler never sees it half-written.
    g_installed =
        ::sigaction(SIGBUS, nullptr, &g_previous) == 0 && ::sigaction(SIGBUS, &sa, nullptr) == 0;
  });
  return g_installed;
}

void CopyRows(const RowsRead& r, const std::byte* base) {
  const std::byte* src = base + r.offset;
  if (r.rows == 1 || (r.src_pitch == r.width && r.dst_pitch == r.width)) {
    std::memcpy(r.dst, src, r.width * r.rows);
    return;
  }
  std::byte* dst = r.dst;
  for (std::uint64_t i = 0; i < r.rows; ++i) {
    std::memcpy(dst, src, r.width);
    src += r.src_pitch;
    dst += r.dst_pitch;
  }
}

// Copies the reads with a SIGBUS inside the mapping turned into a return of the faulting address
// (nullptr: no fault). Nothing with a destructor lives between sigsetjmp and the copies.
__attribute__((noinline)) const std::byte* RunGuarded(const MappedRange& m, const RowsRead* reads,
                                                      std::size_t n) {
  Guard g;
  g.lo = m.base;
  g.hi = m.base + m.bytes;
  if (sigsetjmp(g.env, 0) != 0) {
    t_guard = nullptr;
    return g.fault;
  }
  t_guard = &g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  for (std::size_t k = 0; k < n; ++k) {
    if (reads[k].rows > 0 && reads[k].width > 0) CopyRows(reads[k], m.base);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
  return nullptr;
}

// ----- size checks and messages ----------------------------------------------------------------

std::uint64_t EndOf(const RowsRead& r) { return r.offset + (r.rows - 1) * r.src_pitch + r.width; }

// The lowest offset and the highest end over the non-empty reads (lo > hi when all are empty).
std::pair<std::uint64_t, std::uint64_t> SpanOf(const RowsRead* reads, std::size_t n) {
  std::uint64_t lo = ~0ull, hi = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (reads[k].rows == 0 || reads[k].width == 0) continue;
    lo = std::min(lo, reads[k].offset);
    hi = std::max(hi, EndOf(reads[k]));
  }
  return {lo, hi};
}

Status Shrunk(const MappedRange& m, std::uint64_t lo, std::uint64_t hi, const std::byte* fault) {
  std::string now;
  struct stat st;
  if (m.fd >= 0 && ::fstat(m.fd, &st) == 0) {
    now = "the file is now " + std::to_string(st.st_size) + " bytes";
  } else {
    now = "its size now is unknown";
  }
  std::string where;
  if (fault != nullptr) {
    where = " (the mapping faulted at offset " + std::to_string(fault - m.base) + ")";
  }
  return Status::IoError(*m.path + ": read of bytes [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + ") through its mapping: " + now + ", " +
                         std::to_string(m.bytes) + " when mapped" + where +
                         ": it shrank while being loaded");
}

// True when the file is shorter than `end` now (false when its size cannot be read).
bool ShorterThan(const MappedRange& m, std::uint64_t end) {
  struct stat st;
  return m.fd >= 0 && ::fstat(m.fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) < end;
}

Status CopyBatch(const MappedRange& m, const RowsRead* reads, std::size_t n, bool check) {
  const auto [lo, hi] = SpanOf(reads, n);
  if (lo > hi) return Status::Ok();
  if (check && ShorterThan(m, hi)) return Shrunk(m, lo, hi, nullptr);
  if (!InstallHandler()) {
    return Status::Internal(*m.path + ": cannot install the SIGBUS handler that guards mapped " +
                            "reads: " + std::strerror(errno));
  }
  if (const std::byte* fault = RunGuarded(m, reads, n); fault != nullptr) {
    return Shrunk(m, lo, hi, fault);
  }
  // A truncation racing the copy inside the file's last page reads zeros without a fault: the
  // size is checked again once the bytes are copied.
  if (check && ShorterThan(m, hi)) return Shrunk(m, lo, hi, nullptr);
  return Status::Ok();
}

// ----- the registry of mappings (GuardedCopy) --------------------------------------------------

struct Entry {
  std::uint64_t bytes;
  std::string path;
  int fd;
};

std::shared_mutex& RegistryMu() {
  static auto* mu = new std::shared_mutex;
  return *mu;
}
std::map<const std::byte*, Entry>& Registry() {
  static auto* m = new std::map<const std::byte*, Entry>;
  return *m;
}

}  // namespace

Status CopyFromMapping(const MappedRange& m, const RowsRead& r) {
  return CopyBatch(m, &r, 1, /*check=*/true);
}

Status CopyFromMappingGuardOnly(const MappedRange& m, const RowsRead& r) {
  return CopyBatch(m, &r, 1, /*check=*/false);
}

Status CopyFromMappingBatch(const MappedRange& m, const RowsRead* reads, std::size_t n) {
  return CopyBatch(m, reads, n, /*check=*/true);
}

MappingRegistration::MappingRegistration(const MappedRange& m) {
  if (m.base == nullptr || m.bytes == 0) return;
  std::unique_lock lock(RegistryMu());
  if (Registry().emplace(m.base, Entry{m.bytes, m.path ? *m.path : "", m.fd}).second) {
    base_ = m.base;
  }
}

MappingRegistration::MappingRegistration(MappingRegistration&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)) {}

MappingRegistration& MappingRegistration::operator=(MappingRegistration&& o) noexcept {
  if (this != &o) {
    MappingRegistration old(std::move(*this));
    base_ = std::exchange(o.base_, nullptr);
  }
  return *this;
}

MappingRegistration::~MappingRegistration() {
  if (base_ == nullptr) return;
  std::unique_lock lock(RegistryMu());
  Registry().erase(base_);
}

Status GuardedCopy(void* dst, std::uint64_t dst_pitch, const void* src, std::uint64_t src_pitch,
                   std::uint64_t width, std::uint64_t rows) {
  if (width == 0 || rows == 0) return Status::Ok();
  const auto* s = static_cast<const std::byte*>(src);
  RowsRead r;
  r.src_pitch = rows > 1 ? src_pitch : width;
  r.width = width;
  r.rows = rows;
  r.dst = static_cast<std::byte*>(dst);
  r.dst_pitch = rows > 1 ? dst_pitch : width;
  {
    std::shared_lock lock(RegistryMu());
    auto it = Registry().upper_bound(s);
    if (it != Registry().begin()) {
      --it;
      const std::uint64_t off = static_cast<std::uint64_t>(s - it->first);
      if (s >= it->first && off < it->second.bytes) {
        MappedRange m{it->first, it->second.bytes, &it->second.path, it->second.fd};
        r.offset = off;
        const std::uint64_t room = m.bytes - off;  // bytes from src to the mapping's end
        if (width > room ||
            (r.rows > 1 && r.src_pitch > 0 && r.rows - 1 > (room - width) / r.src_pitch)) {
          return Status::InvalidArgument(it->second.path + ": copy of " + std::to_string(rows) +
                                         " rows of " + std::to_string(width) + " bytes at offset " +
                                         std::to_string(off) + " reaches past its mapping (" +
                                         std::to_string(m.bytes) + " bytes)");
        }
        return CopyBatch(m, &r, 1, /*check=*/true);
      }
    }
  }
  CopyRows(r, s);  // offset 0 from src: plain memory
  return Status::Ok();
}

}  // namespace hoist::transport
