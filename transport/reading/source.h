// The Source seam: read byte ranges of one file into caller memory (leveldb env.h style).
//
// Implementations: buffered pread, mmap (the mapping is exposed for memcpy-based fills), O_DIRECT
// (aligned bounce buffers, unaligned head/tail handled, several requests in flight through Linux
// native AIO), the mmap source made on first use (auto mode's page-cache source), and a
// fault-injecting wrapper for tests. Page-cache residency: a source's ResidentNow (cachestat on its
// descriptor, or mincore on its mapping) backs the `auto` read mode; Residency (a page map of a
// whole file: mincore, or cachestat where mincore may not report) the report's
// bytes_resident_at_start in the other modes.
//
// Opening: only regular files are opened, and never blocking: the path is stat'ed first, opened
// O_NONBLOCK and fstat'ed again (O_NONBLOCK is cleared and O_DIRECT set afterwards), so a FIFO,
// a directory or a device in place of a shard is Corrupt "<path> is a FIFO, not a regular file"
// at once (Residency::Measure opens the same way).
//
// Mapped reads (the mmap source; the host device's copies in pageable/registered modes) go through
// transport/reading/mapped_read.h: the file's size now is checked (fstat) before and after each
// copy and the copy runs under a SIGBUS guard, so a file truncated under the load is an IoError
// naming the file, the range and its size now, never a SIGBUS.
//
// RSS: a MAP_SHARED file page that was read stays in the process's RSS while it is mapped (it is
// page cache, but VmHWM counts it), which made a host-memory load peak at 2x the weights. For
// host-memory loads (release_pages) the mmap source therefore drops its page-table entries for
// every range of 64 KiB or more once that range is copied (MADV_DONTNEED on the read-only mapping:
// the page cache keeps the data, a later read of the same range just faults it in again). Chosen
// over reading such loads with pread so that the `mmap` and `auto` modes still copy from the
// mapping (on the H200 box they match buffered when hot: docs/BENCHMARKS.md, 2026-11-29). The
// pageable and registered modes copy straight from the mapping without releasing it (they exist to
// compare with the naive paths).
//
// Ownership: a Source owns its file descriptor and mapping and releases them when destroyed.
// Failure: every read either fills all requested bytes or returns a Status (IoError, Corrupt for a
// range past the end of the file) naming the file path and the byte offset; partial reads from
// the kernel are retried. Nothing here throws or aborts. Threading: ReadAt/ReadRows may be called
// concurrently from any number of threads on one Source (pread and memcpy are stateless; the
// direct source keeps per-thread bounce buffers and AIO contexts; a context outlives its thread,
// kept for the next: KeptAioContexts).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"

namespace hoist::transport {

// One strided read: `rows` rows of `width` bytes; row i is file bytes
// [offset + i*src_pitch, +width) and lands at dst + i*dst_pitch.
struct RowsRead {
  std::uint64_t offset = 0;
  std::uint64_t src_pitch = 0;
  std::uint64_t width = 0;
  std::uint64_t rows = 1;
  std::byte* dst = nullptr;
  std::uint64_t dst_pitch = 0;
};

class Source {
 public:
  virtual ~Source() = default;

  virtual const std::string& path() const = 0;
  virtual std::uint64_t size() const = 0;
  virtual std::string_view kind() const = 0;  // "buffered", "mmap", "direct", "faulty"

  // Reads exactly n bytes at `offset` into dst. A range past the end of the file is Corrupt.
  virtual Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) = 0;

  // Reads a strided block. The default loops ReadAt per row (one call when the rows are
  // contiguous in both the file and dst); the direct source merges rows into aligned requests.
  virtual Status ReadRows(const RowsRead& r);

  // Several strided reads (in any order; their destinations must not overlap). The default
  // loops ReadRows; the direct source merges nearby rows of all reads into aligned requests.
  virtual Status ReadMany(const RowsRead* reads, std::size_t n);

  // The read-only mapping of the whole file, or nullptr for sources that do not map.
  virtual const std::byte* mapping() const { return nullptr; }

  // Bytes of `block` (its rows; dst is ignored) that are in the page cache now, or nullopt when
  // this source cannot tell. Sources with a descriptor ask cachestat(2) (Linux >= 6.5), which
  // needs no mapping; the mmap source falls back to mincore on its mapping. A strided block is
  // measured over its whole extent, gaps included, and scaled to its own bytes: its rows sit a few
  // KiB apart, and one system call per block replaces one per row. A range whose pages are
  // partly resident counts whole resident pages (exact for all and for none).
  virtual std::optional<std::uint64_t> ResidentNow(const RowsRead& block) const {
    (void)block;
    return std::nullopt;
  }
};

// Buffered reads through the page cache (pread).
Result<std::unique_ptr<Source>> OpenBufferedSource(const std::string& path);

// A read-only shared mapping of the whole file; ReadAt is a guarded memcpy from the mapping,
// after which, with release_pages, the pages read are released from RSS (see above; GPU loads
// leave them: a TLB shootdown per chunk buys nothing when the weights are not in host memory).
// An empty file maps to nothing (every non-empty read is out of range). The descriptor stays
// open for the size checks.
Result<std::unique_ptr<Source>> OpenMmapSource(const std::string& path, bool release_pages = false);

struct DirectOptions {
  std::uint64_t alignment = 4096;          // file offset, length and buffer alignment
  std::uint64_t request_bytes = 1u << 20;  // one AIO request (multiple of alignment)
  int depth = 8;                           // requests in flight per calling thread
  // Rows whose gap is at most this many bytes are read as one span (the gap is read and dropped).
  std::uint64_t max_gap = 256u << 10;
};

// O_DIRECT reads. Unsupported (naming the path and the filesystem's answer) when the filesystem
// refuses O_DIRECT, e.g. tmpfs. Destination chunks that share the file's alignment are read in
// place; everything else goes through aligned per-thread bounce buffers.
Result<std::unique_ptr<Source>> OpenDirectSource(const std::string& path,
                                                 const DirectOptions& options = {});

// AIO contexts kept for reuse: a thread's context, when it exits with nothing in flight, is kept
// for the next thread instead of destroyed (io_destroy waits for an RCU grace period, tens of ms,
// which a load's join of its fill threads would wait for). Bounded by the most threads that read
// O_DIRECT at once; the kernel frees them when the process exits. A forked child never takes its
// parent's (they are not its own): its threads make their own.
std::size_t KeptAioContexts();

// Auto mode's page-cache source: a mapping made on first use (a read, mapping() or ResidentNow),
// so that a load whose pieces are all cold never maps its files and reads exactly as `direct`
// does. A failure to map is returned by every call that needed the mapping. Threading: the first
// use from several threads maps once (the others wait for it).
std::unique_ptr<Source> OpenMmapSourceLazily(const std::string& path, std::uint64_t size,
                                             bool release_pages = false);

// Faults injected by WrapFaulty. Counts are over ReadAt calls (ReadRows counts each row as a
// call); negative means never.
struct FaultSpec {
  std::int64_t eio_after = -1;         // calls after this many succeed fail with EIO
  std::int64_t short_read_after = -1;  // the next call delivers only half its bytes, then fails
  std::int64_t delay_us = 0;           // sleep per call (to provoke races in tests)
};

// Wraps `inner` with injected faults. Threading: the call counter is atomic.
std::unique_ptr<Source> WrapFaulty(std::unique_ptr<Source> inner, const FaultSpec& spec);

}  // namespace hoist::transport
