// Reading a file mapping without dying when the file shrinks under it.
//
// A MAP_SHARED mapping of a file that is truncated after it was mapped raises SIGBUS on any access
// to the pages past the new end. Every host-side read of a hoist file mapping goes through this
// module: the mmap source's reads (modes mmap and auto) and the host device's copies whose source
// is a mapped file (modes pageable and registered, via GuardedCopy).
//
// Two defences, both needed: (1) before copying, the rows' end is checked against the file's size
// now (fstat on the file's descriptor: cheap, and it catches a file truncated before the read);
// (2) the copy itself runs under a per-thread SIGBUS guard, for a truncation that races the copy.
// The guard is a process-wide SIGBUS handler, installed once on first use, plus a thread-local
// record (a sigjmp_buf and the guarded mapping's address range) set only while that thread copies.
// A fault whose address lies in the faulting thread's guarded range jumps back (siglongjmp) out
// of the copy, which then returns IoError. Any other SIGBUS (another address, a thread that is not
// copying, a kill(2)) goes to the handler installed before hoist's (a sanitizer's, an
// embedder's), or, when that was the default, gets the default action: a fault hoist did not
// expect is never swallowed. The handler does not save or restore the signal mask (SA_NODEFER,
// sigsetjmp without the mask), so a guarded copy costs no system call beyond the fstat.
//
// Errors: IoError "<path>: read of N bytes at offset O: the file is now S bytes (it was T when
// mapped): it shrank while being loaded" (naming the faulting offset when the guard caught it).
//
// Ownership: nothing here owns a mapping. MappingRegistration records a mapping (address range,
// path, descriptor) for GuardedCopy; the mapping and the descriptor must outlive it.
// Threading: every function may be called from any number of threads at once; GuardedCopy holds
// a shared lock on the registry while it copies, so a registration cannot end mid-copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hoist/status.h"
#include "transport/reading/source.h"

namespace hoist::transport {

// A read-only mapping of file bytes [0, bytes) at base; fd is open on the same file.
struct MappedRange {
  const std::byte* base = nullptr;
  std::uint64_t bytes = 0;
  const std::string* path = nullptr;
  int fd = -1;
};

// Copies the rows of `r` (offsets are file offsets) out of the mapping: the size check, then the
// guarded copy. The caller has checked r against m.bytes (CheckRows). Plain memcpy on purpose:
// streaming (non-temporal) stores into the staging slots made every staged load on the H200 box
// slower, strided tp 2 rows by 30% (docs/BENCHMARKS.md, 2026-12-03).
Status CopyFromMapping(const MappedRange& m, const RowsRead& r);

// Several reads checked and guarded together (one fstat before and after for the batch).
Status CopyFromMappingBatch(const MappedRange& m, const RowsRead* reads, std::size_t n);

// The guarded copy alone, without the size check: what protects a copy that races a truncation.
// For tests of the guard, which cannot make that race deterministic otherwise.
Status CopyFromMappingGuardOnly(const MappedRange& m, const RowsRead& r);

// Records a mapping for GuardedCopy until destroyed. Move-only.
class MappingRegistration {
 public:
  MappingRegistration() = default;
  explicit MappingRegistration(const MappedRange& m);
  MappingRegistration(MappingRegistration&& o) noexcept;
  MappingRegistration& operator=(MappingRegistration&& o) noexcept;
  MappingRegistration(const MappingRegistration&) = delete;
  MappingRegistration& operator=(const MappingRegistration&) = delete;
  ~MappingRegistration();

 private:
  const std::byte* base_ = nullptr;
};

// Copies `rows` rows of `width` bytes (row i: src + i*src_pitch -> dst + i*dst_pitch). When src
// lies in a registered mapping the copy is checked and guarded as CopyFromMapping; any other
// memory is copied plainly.
Status GuardedCopy(void* dst, std::uint64_t dst_pitch, const void* src, std::uint64_t src_pitch,
                   std::uint64_t width, std::uint64_t rows);

}  // namespace hoist::transport
