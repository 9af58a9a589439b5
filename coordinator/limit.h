// What limited one rank's load, read from its phases alone: the report's answer to "why was it
// not faster", printed under the rank in the table and given in the JSON report.
//
// A staged load is a race between the fill threads (page cache or disk into the pinned ring) and
// the copy engine (ring into the device). The h2d phase's busy time over its extent says how much
// of the read the engine worked; where it idled, the fill threads' busy share and the bytes found
// in the page cache say why:
//   - overhead: the copy engine's extent is under kReadShare of the load's total: set-up, not
//     reading, took the time (a small load); the largest other phase is named;
//   - copy: the engine was busy kCopyBusy or more of its extent: the link is the limit;
//   - storage: less than kStorageResident of the bytes were in the page cache at the start: the
//     engine waited for the disk;
//   - fill: the fill threads were busy kFillBusy or more of their time: the engine waited for
//     copies from the page cache, and more cores per rank (or fewer ranks per node) would help;
//   - handoff: neither side was saturated: slots came back from the device late or were handed
//     over late (a 2026-12-03 measurement saw it in loads run right after 6 GB of checkpoints were
//     written; the cause was not isolated).
// docs/BENCHMARKS.md (2026-12-03) measured the fill case: a tp 2 rank on its node share of 8 cores.
//
// Ownership: plain values. Failure: a report without a read and an h2d phase (a failed rank,
// a load with nothing to copy, a direct mode without fill threads) gets kNone and no line.
// Threading: pure functions.
#pragma once

#include <string>

#include "proto/plan.pb.h"

namespace hoist::coordinator {

enum class Limit { kNone, kOverhead, kCopy, kStorage, kFill, kHandoff };

inline constexpr double kReadShare = 0.5;        // h2d extent / total: below, overhead
inline constexpr double kCopyBusy = 0.95;        // engine busy share: the link is the limit
inline constexpr double kStorageResident = 0.5;  // below: a cold load
inline constexpr double kFillBusy = 0.85;        // fill threads' busy share: saturated

struct LoadLimit {
  Limit limit = Limit::kNone;
  double engine_busy = 0;    // h2d busy / h2d extent, 0..1
  double engine_idle_s = 0;  // h2d extent - busy
  double engine_s = 0;       // h2d extent
  double fill_busy = 0;      // read busy / (read extent x fill threads), 0..1
  double resident = 0;       // bytes resident at the start / bytes read, 0..1
  int fill_threads = 0;
  double total_s = 0;         // the load's total phase
  std::string largest_phase;  // overhead: the longest phase in the load but the read's
  double largest_phase_s = 0;
};

LoadLimit LimitOf(const proto::RankReport& report);

// "overhead" | "copy" | "storage" | "fill" | "handoff" | "none".
const char* LimitName(Limit limit);

// One line for the table: the limit, its figures and what would help; empty for kNone.
std::string LimitText(const LoadLimit& limit);

}  // namespace hoist::coordinator
