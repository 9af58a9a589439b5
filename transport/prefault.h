// Makes the page-table entries of a load's mapped reads before the load, while the device opens.
//
// A hot load copies each file's bytes from a read-only mapping. A fresh mapping has no page-table
// entries: the first touch of every 16 pages takes a minor fault, and the faults are about half
// of a fill thread's time (one thread copying a hot 2 GiB file through a fresh mapping: 0.28 s;
// MADV_POPULATE_READ of the mapping alone 0.13 s, and the copy after it 0.14 s; the 2-core CPU
// machine). Opening a CUDA device takes ~200 ms in which the host's cores are idle. A Prefaulter
// spends that time making the entries the load will need, on its own threads, in the order the
// load reads them; the fill threads then find them made.
//
// What it touches: each range is cut into steps of kPrefaultStepBytes; a step is prefaulted only
// when the page cache holds at least half of it now (auto mode's rule for reading a chunk from
// the mapping), so cold bytes are left to O_DIRECT and a file found cold is never mapped.
//
// Ownership: borrows the sources, which must outlive it. Failure: best effort and silent: a
// source that cannot prefault (no mapping, a kernel before 5.14, a file now shorter than planned)
// ends the prefaulting of its file; the load's own reads report every error.
// Threading: the constructor starts the threads (they inherit the caller's CPU binding); Stop,
// from the constructing thread, ends them at their next step and joins them, so a caller waits
// at most one step (~0.5 ms) per thread. The destructor stops.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "transport/pipeline.h"

namespace hoist::transport {

inline constexpr std::uint64_t kPrefaultStepBytes = 8ull << 20;

struct PrefaultRange {
  std::uint32_t file = 0;  // index into the sources
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

struct PrefaultReport {
  std::chrono::steady_clock::time_point start, end;  // start to Stop
  std::uint64_t bytes = 0;                           // bytes whose entries were made
  std::uint64_t skipped = 0;    // bytes left alone: not resident, or their file failed
  std::uint64_t remaining = 0;  // bytes not reached before Stop
};

class Prefaulter {
 public:
  // Prefaults `ranges` (in this order) of `files`' primary sources with `threads` threads.
  Prefaulter(const std::vector<FileSources>& files, std::vector<PrefaultRange> ranges, int threads);
  ~Prefaulter();
  Prefaulter(const Prefaulter&) = delete;
  Prefaulter& operator=(const Prefaulter&) = delete;

  // Ends the threads at their next step, joins them and says what was done. Idempotent.
  PrefaultReport Stop();
  // Lets the threads finish every step, then as Stop.
  PrefaultReport Wait();

 private:
  void Work();
  PrefaultReport Join();
  bool Resident(const FileSources& fs, std::uint64_t offset, std::uint64_t n) const;

  const std::vector<FileSources>& files_;
  std::vector<PrefaultRange> steps_;  // the ranges cut into steps
  std::vector<std::atomic<bool>> file_failed_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> done_bytes_{0}, skipped_bytes_{0};
  std::vector<std::thread> threads_;
  PrefaultReport report_;
  bool stopped_ = false;
};

}  // namespace hoist::transport
