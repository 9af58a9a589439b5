// The one vocabulary of load phases: every phase any layer records (coordinator, rank, embed),
// its wire name (the string in proto::Phase, the JSON, the trace, the metrics and the timeline),
// its place in the report's order and how the report draws it; and PhaseRecorder, the one way a
// layer appends a timed phase to a rank's report.
//
// Ownership: the names are static strings; a PhaseRecorder borrows the report it appends to.
// Failure: none; a name that is no phase (e.g. from a newer rank) maps to std::nullopt.
// Threading: the lookups are pure; a PhaseRecorder is used by one thread at a time (like the
// report it writes).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "proto/plan.pb.h"

namespace hoist::transport {

// In report order: the order of the text table, the JSON `phases` list and the aggregate.
enum class Phase : std::uint8_t {
  kInit,          // process start to MPI ready (coordinator)
  kDeviceInit,    // opening the device (rank)
  kPlan,          // hello, planning and the plan on the wire (coordinator)
  kPrepare,       // the rank's work from its plan: packed streams translated, slot cut (rank)
  kBind,          // placing the fill threads (rank)
  kResidency,     // measuring the page cache (rank)
  kArenaAlloc,    // the device arena (rank)
  kSetup,         // the slot cut, streams and events; packed: device slots and decoder (pipeline)
  kStagingAlloc,  // the pinned staging ring (pipeline)
  kRead,          // storage -> staging (pipeline)
  kH2d,           // staging -> device (pipeline)
  kDecode,        // packed blocks -> arena, on the device (pipeline)
  kPeerInit,      // the dedup peer's set-up (rank job)
  kPeer,          // the dedup exchange: first group issued to last completed (exchange)
  kDrain,         // waiting for the last copies (pipeline)
  kTranspose,     // swapping the dims of tensors the fused layout holds transposed (rank)
  kVerify,        // checking the arena against the checkpoint (rank)
  kDump,          // writing the arena to disk (rank)
  kStagingFree,   // freeing the staging ring (pipeline)
  kTotal,         // the rank's whole load (rank)
  // Attaching to a served model (embed/); never in a load report.
  kConnect,
  kMap,
};

inline constexpr std::size_t kPhaseCount = static_cast<std::size_t>(Phase::kMap) + 1;

// Every phase, in report order.
const std::array<Phase, kPhaseCount>& AllPhases();

// Whether a rank's load report has the phase (all but the attach phases).
constexpr bool PhaseInLoadReport(Phase phase) { return phase <= Phase::kTotal; }

// The wire name ("device_init"): non-empty, unique.
std::string_view PhaseName(Phase phase);
// The phase of a wire name; nullopt for any other string.
std::optional<Phase> PhaseFromName(std::string_view name);

// A rank report's entry for `phase` (the first, if the rank repeated it); nullptr when absent.
const proto::Phase* FindPhase(const proto::RankReport& report, Phase phase);

// Whether the phase moves the bytes it reports (the table gives it a rate); allocation and free
// phases carry sizes, not flow.
bool PhaseMovesBytes(Phase phase);

// The timeline's fill colour for the phase ("#7f8c8d"); phases of one kind share a colour. By
// wire name: a name that is no phase gets the colour of the general work phases (bind, drain).
std::string_view PhaseColor(Phase phase);
std::string_view PhaseColor(std::string_view name);

// Appends timed phases to one rank's report; start times are seconds since `origin` (the rank's
// clock origin, its main()).
class PhaseRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  PhaseRecorder(proto::RankReport* report, Clock::time_point origin)
      : report_(report), origin_(origin) {}

  // A phase that ran from `start` to `end`, busy all the while.
  void Record(Phase phase, Clock::time_point start, Clock::time_point end,
              std::uint64_t bytes = 0) const;
  // A phase timed elsewhere: start in seconds since the origin, wall and busy seconds.
  void Record(Phase phase, double start_s, double seconds, double busy_s,
              std::uint64_t bytes = 0) const;

  Clock::time_point origin() const { return origin_; }
  // Seconds from the origin to `t`.
  double SinceOrigin(Clock::time_point t) const;

 private:
  proto::RankReport* report_;
  Clock::time_point origin_;
};

}  // namespace hoist::transport
