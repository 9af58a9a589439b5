// Aggregating the ranks' reports and writing them: a human table, JSON, Chrome trace events,
// Prometheus text and a self-drawn SVG timeline. One aggregate feeds every sink.
//
// Ownership: plain values. Failure: writers return Status naming the output file.
// Threading: pure functions; call on rank 0 after the gather.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/timing/phase.h"

namespace hoist::coordinator {

// One phase over all ranks; the aggregate lists the load phases the ranks reported, in report
// order (transport/timing/phase.h).
struct PhaseStats {
  transport::Phase phase = transport::Phase::kInit;
  std::string name;  // its wire name
  int ranks = 0;     // ranks that reported the phase
  double min_s = 0, median_s = 0, max_s = 0;
  std::uint32_t slowest_rank = 0;
  std::uint64_t bytes = 0;  // summed over ranks
};

struct Aggregate {
  std::vector<PhaseStats> phases;
  std::uint64_t payload_bytes = 0;  // sum of the ranks' bytes_h2d
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_resident_at_start = 0;
  double wall_s = 0;  // job wall time on rank 0
  int ranks = 0, failed = 0, nodes = 0;
};

Aggregate AggregateReports(const std::vector<proto::RankReport>& reports, double wall_s);

// Puts every rank on one clock: each report's clock_offset_s becomes its origin (origin_epoch_s,
// the wall clock when the rank started timing) minus the earliest rank's, so the trace and the
// timeline draw a rank that started late where it really ran. Ranks on one host share its clock;
// across hosts the alignment is as good as their clocks agree (NTP: about a millisecond). A
// report without an origin keeps offset 0. Rank 0 calls it once on the gathered reports.
void AlignClocks(std::vector<proto::RankReport>* reports);

std::string FormatTable(const proto::LoadPlan& plan, const std::vector<proto::RankReport>& reports,
                        const Aggregate& agg);
// The job (totals, phases), every rank, and `hosts`: per host in the order of its first rank, its
// ranks and their bytes read from storage, sent and received.
nlohmann::json ReportJson(const proto::LoadPlan& plan,
                          const std::vector<proto::RankReport>& reports, const Aggregate& agg);
// Chrome trace event format (viewable in Perfetto): pid = rank, tid = lane.
nlohmann::json ChromeTrace(const std::vector<proto::RankReport>& reports);
std::string PrometheusText(const std::vector<proto::RankReport>& reports, const Aggregate& agg);
// One row per (rank, lane), spans drawn to scale, phases as a band per rank.
std::string TimelineSvg(const std::vector<proto::RankReport>& reports);

Status WriteFile(const std::string& path, const std::string& contents);

}  // namespace hoist::coordinator
