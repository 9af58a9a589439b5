#include "coordinator/limit.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "transport/timing/phase.h"

namespace hoist::coordinator {
namespace {

double Share(double part, double whole) {
  return whole > 0 ? std::clamp(part / whole, 0.0, 1.0) : 0.0;
}

// The longest phase that ran inside the load (from total's start) other than the read's own.
void LargestOther(const proto::RankReport& r, double total_start, LoadLimit* l) {
  using transport::Phase;
  for (const proto::Phase& p : r.phases()) {
    const std::optional<Phase> ph = transport::PhaseFromName(p.name());
    if (!ph || *ph == Phase::kTotal || *ph == Phase::kRead || *ph == Phase::kH2d ||
        *ph == Phase::kDecode || *ph == Phase::kPeer || p.start_s() < total_start) {
      continue;
    }
    if (p.seconds() > l->largest_phase_s) {
      l->largest_phase = p.name();
      l->largest_phase_s = p.seconds();
    }
  }
}

Limit Classify(const LoadLimit& l) {
  if (l.total_s > 0 && l.engine_s < kReadShare * l.total_s) return Limit::kOverhead;
  if (l.engine_busy >= kCopyBusy) return Limit::kCopy;
  if (l.resident < kStorageResident) return Limit::kStorage;
  if (l.fill_busy >= kFillBusy) return Limit::kFill;
  return Limit::kHandoff;
}

}  // namespace

LoadLimit LimitOf(const proto::RankReport& r) {
  LoadLimit l;
  const proto::Phase* read = transport::FindPhase(r, transport::Phase::kRead);
  const proto::Phase* h2d = transport::FindPhase(r, transport::Phase::kH2d);
  if (!r.ok() || read == nullptr || h2d == nullptr || read->seconds() <= 0 || h2d->seconds() <= 0 ||
      r.fill_threads() == 0 || r.bytes_read() == 0) {
    return l;
  }
  l.fill_threads = static_cast<int>(r.fill_threads());
  l.engine_s = h2d->seconds();
  l.engine_busy = Share(h2d->busy_s(), h2d->seconds());
  l.engine_idle_s = std::max(0.0, h2d->seconds() - h2d->busy_s());
  l.fill_busy = Share(read->busy_s(), read->seconds() * l.fill_threads);
  l.resident =
      Share(static_cast<double>(r.bytes_resident_at_start()), static_cast<double>(r.bytes_read()));
  if (const proto::Phase* total = transport::FindPhase(r, transport::Phase::kTotal)) {
    l.total_s = total->seconds();
    LargestOther(r, total->start_s(), &l);
  }
  l.limit = Classify(l);
  return l;
}

const char* LimitName(Limit limit) {
  switch (limit) {
    case Limit::kOverhead:
      return "overhead";
    case Limit::kCopy:
      return "copy";
    case Limit::kStorage:
      return "storage";
    case Limit::kFill:
      return "fill";
    case Limit::kHandoff:
      return "handoff";
    case Limit::kNone:
      break;
  }
  return "none";
}

std::string LimitText(const LoadLimit& l) {
  const double busy = 100 * l.engine_busy, idle_ms = 1e3 * l.engine_idle_s;
  const double fill = 100 * l.fill_busy, resident = 100 * l.resident;
  char line[400];
  switch (l.limit) {
    case Limit::kOverhead:
      std::snprintf(line, sizeof(line),
                    "limit: overhead: the copies took %.1f ms of the load's %.1f ms; the longest "
                    "other phase: %s %.1f ms",
                    1e3 * l.engine_s, 1e3 * l.total_s,
                    l.largest_phase.empty() ? "-" : l.largest_phase.c_str(),
                    1e3 * l.largest_phase_s);
      break;
    case Limit::kCopy:
      std::snprintf(line, sizeof(line),
                    "limit: copy: the copy engine was busy %.0f%% of its %.1f ms (the link)", busy,
                    1e3 * l.engine_s);
      break;
    case Limit::kStorage:
      std::snprintf(line, sizeof(line),
                    "limit: storage: %.0f%% of the bytes were in the page cache; the copy engine "
                    "waited %.1f ms for reads",
                    resident, idle_ms);
      break;
    case Limit::kFill:
      std::snprintf(line, sizeof(line),
                    "limit: fill: the copy engine waited %.1f ms (busy %.0f%%) while %d fill "
                    "thread%s worked %.0f%% of the time: more cores per rank would help "
                    "(--cpu-bind, --threads)",
                    idle_ms, busy, l.fill_threads, l.fill_threads == 1 ? "" : "s", fill);
      break;
    case Limit::kHandoff:
      std::snprintf(line, sizeof(line),
                    "limit: handoff: the copy engine waited %.1f ms (busy %.0f%%) while the fill "
                    "threads worked only %.0f%% of the time: slots came back from the device late "
                    "(the trace's h2d-0 and submit lanes show where)",
                    idle_ms, busy, fill);
      break;
    case Limit::kNone:
      return "";
  }
  return line;
}

}  // namespace hoist::coordinator
