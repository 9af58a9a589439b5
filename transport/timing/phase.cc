#include "transport/timing/phase.h"

namespace hoist::transport {
namespace {

// Timeline colours, one per kind of phase.
constexpr std::string_view kSetUpColor = "#7f8c8d";   // init, plan
constexpr std::string_view kDeviceColor = "#c0392b";  // device_init
constexpr std::string_view kMemoryColor = "#9b59b6";  // allocations and frees
constexpr std::string_view kCheckColor = "#27ae60";   // verify, dump
constexpr std::string_view kPeerColor = "#16a085";    // the exchange
constexpr std::string_view kWorkColor = "#d35400";    // everything else

struct PhaseInfo {
  Phase phase;
  std::string_view name;
  bool moves_bytes;
  std::string_view color;
};

// Indexed by the enum's value; the order is the report's.
constexpr std::array<PhaseInfo, kPhaseCount> kPhases = {{
    {Phase::kInit, "init", false, kSetUpColor},
    {Phase::kDeviceInit, "device_init", false, kDeviceColor},
    {Phase::kPlan, "plan", false, kSetUpColor},
    {Phase::kPrepare, "prepare", false, kWorkColor},
    {Phase::kBind, "bind", false, kWorkColor},
    {Phase::kResidency, "residency", false, kWorkColor},
    {Phase::kArenaAlloc, "arena_alloc", false, kMemoryColor},
    {Phase::kSetup, "setup", false, kWorkColor},
    {Phase::kStagingAlloc, "staging_alloc", false, kMemoryColor},
    {Phase::kRead, "read", true, kWorkColor},
    {Phase::kH2d, "h2d", true, kWorkColor},
    {Phase::kDecode, "decode", true, kWorkColor},
    {Phase::kPeerInit, "peer_init", false, kWorkColor},
    {Phase::kPeer, "peer", true, kPeerColor},
    {Phase::kDrain, "drain", false, kWorkColor},
    {Phase::kTranspose, "transpose", true, kWorkColor},
    {Phase::kVerify, "verify", true, kCheckColor},
    {Phase::kDump, "dump", true, kCheckColor},
    {Phase::kStagingFree, "staging_free", false, kMemoryColor},
    {Phase::kTotal, "total", true, kWorkColor},
    {Phase::kConnect, "connect", false, kWorkColor},
    {Phase::kMap, "map", false, kWorkColor},
}};

constexpr bool TableMatchesEnum() {
  for (std::size_t i = 0; i < kPhases.size(); ++i) {
    if (static_cast<std::size_t>(kPhases[i].phase) != i || kPhases[i].name.empty()) return false;
  }
  return true;
}
static_assert(TableMatchesEnum(), "kPhases must list every Phase once, in enum order");

const PhaseInfo& Info(Phase phase) { return kPhases[static_cast<std::size_t>(phase)]; }

double Seconds(PhaseRecorder::Clock::time_point a, PhaseRecorder::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const std::array<Phase, kPhaseCount>& AllPhases() {
  static const std::array<Phase, kPhaseCount> kAll = [] {
    std::array<Phase, kPhaseCount> all{};
    for (std::size_t i = 0; i < kPhaseCount; ++i) all[i] = kPhases[i].phase;
    return all;
  }();
  return kAll;
}

std::string_view PhaseName(Phase phase) { return Info(phase).name; }

std::optional<Phase> PhaseFromName(std::string_view name) {
  for (const PhaseInfo& info : kPhases) {
    if (info.name == name) return info.phase;
  }
  return std::nullopt;
}

const proto::Phase* FindPhase(const proto::RankReport& report, Phase phase) {
  for (const proto::Phase& p : report.phases()) {
    if (p.name() == PhaseName(phase)) return &p;
  }
  return nullptr;
}

bool PhaseMovesBytes(Phase phase) { return Info(phase).moves_bytes; }

std::string_view PhaseColor(Phase phase) { return Info(phase).color; }

std::string_view PhaseColor(std::string_view name) {
  const std::optional<Phase> phase = PhaseFromName(name);
  return phase ? PhaseColor(*phase) : kWorkColor;
}

void PhaseRecorder::Record(Phase phase, Clock::time_point start, Clock::time_point end,
                           std::uint64_t bytes) const {
  Record(phase, SinceOrigin(start), Seconds(start, end), Seconds(start, end), bytes);
}

void PhaseRecorder::Record(Phase phase, double start_s, double seconds, double busy_s,
                           std::uint64_t bytes) const {
  proto::Phase* p = report_->add_phases();
  p->set_name(std::string(PhaseName(phase)));
  p->set_start_s(start_s);
  p->set_seconds(seconds);
  p->set_busy_s(busy_s);
  p->set_bytes(bytes);
}

double PhaseRecorder::SinceOrigin(Clock::time_point t) const { return Seconds(origin_, t); }

}  // namespace hoist::transport
