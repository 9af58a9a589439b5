#include "coordinator/link_probe.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>

#include "planner/checkpoint.h"
#include "transport/reading/residency.h"
#include "transport/reading/source.h"

namespace hoist::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// GiB/s of one O_DIRECT read of up to kStorageSampleBytes in four pieces spread over the shard
// (the source keeps several requests in flight); 0 when the filesystem refuses O_DIRECT.
double SampleDirectRead(const std::string& path, std::uint64_t size) {
  constexpr std::uint64_t kAlign = 4096, kPieces = 4;
  const std::uint64_t piece = std::min(kStorageSampleBytes, size) / kPieces / kAlign * kAlign;
  if (piece == 0) return 0;
  Result<std::unique_ptr<transport::Source>> src = transport::OpenDirectSource(path);
  if (!src.ok()) return 0;
  auto buf = std::make_unique<std::byte[]>(piece * kPieces);
  std::vector<transport::RowsRead> reads;
  const std::uint64_t stride = (size - piece) / (kPieces - 1) / kAlign * kAlign;
  for (std::uint64_t i = 0; i < kPieces; ++i) {
    reads.push_back({i * stride, piece, piece, 1, buf.get() + i * piece, piece});
  }
  const Clock::time_point a = Clock::now();
  if (!(*src)->ReadMany(reads.data(), reads.size()).ok()) return 0;
  const double s = Seconds(a, Clock::now());
  return s > 0 ? static_cast<double>(piece * kPieces) / kGiB / s : 0;
}

}  // namespace

StorageRate MeasureStorage(const std::string& model_dir) {
#if HOIST_TEST_HOOKS
  if (const char* v = std::getenv("HOIST_TEST_STORAGE_GIB_S"); v != nullptr && *v != '\0') {
    return StorageRate{std::strtod(v, nullptr), false};
  }
#endif
  // The shards a load reads (the index's, or a packed copy's), not every file of the folder.
  Result<planner::Checkpoint> ckpt = planner::OpenCheckpoint(model_dir);
  if (!ckpt.ok()) return {};
  std::uint64_t total = 0, resident = 0;
  for (const planner::ShardFile& f : ckpt->files) {
    Result<transport::Residency> r = transport::Residency::Measure(f.abs_path, 4);
    if (!r.ok()) return {};
    total += f.stat.size;
    resident += r->TotalResident();
  }
  if (total == 0) return {};
  if (resident * 2 >= total) return StorageRate{0, true};
  const auto largest =
      std::max_element(ckpt->files.begin(), ckpt->files.end(),
                       [](const planner::ShardFile& a, const planner::ShardFile& b) {
                         return a.stat.size < b.stat.size;
                       });
  return StorageRate{SampleDirectRead(largest->abs_path, largest->stat.size), false};
}

Result<double> ProbeLink(Comm& comm, int leader, double timeout_s) {
  const std::string payload(kLinkProbeBytes, '\x5a');
  double best = 0;
  for (int round = 0; round < 2; ++round) {
    const Clock::time_point a = Clock::now();
    HOIST_RETURN_IF_ERROR(comm.Send(leader, Channel::kProbe, payload));
    HOIST_RETURN_IF_ERROR(Await(comm, leader, Channel::kProbe, timeout_s,
                                "rank 0 probing the network to rank " + std::to_string(leader))
                              .status());
    const double s = Seconds(a, Clock::now());
    if (s > 0) best = std::max(best, static_cast<double>(kLinkProbeBytes) / kGiB / s);
  }
  return best;
}

Status AnswerLinkProbe(Comm& comm, double timeout_s) {
  for (int round = 0; round < 2; ++round) {
    HOIST_ASSIGN_OR_RETURN(Message m, Await(comm, 0, Channel::kProbe, timeout_s,
                                            "waiting for rank 0's network probe"));
    if (m.data.size() != kLinkProbeBytes) {
      return Status::Corrupt("rank " + std::to_string(comm.rank()) + ": a network probe of " +
                             std::to_string(m.data.size()) + " bytes, not " +
                             std::to_string(kLinkProbeBytes));
    }
    HOIST_RETURN_IF_ERROR(comm.Send(0, Channel::kProbe, "ok"));
  }
  return Status::Ok();
}

Result<planner::HostRates> MeasureHostRates(Comm& comm, const std::vector<proto::Hello>& hellos,
                                            double timeout_s) {
  planner::HostRates rates;
  rates.cached = true;
  double storage = std::numeric_limits<double>::infinity(), net = storage;
  for (std::size_t r = 0; r < hellos.size(); ++r) {
    const proto::Hello& h = hellos[r];
    if (h.local_rank() != 0) continue;
    if (!h.storage_cached()) {
      rates.cached = false;
      storage = std::min(storage, h.storage_gib_s());
    }
    if (r == 0 || h.node() == hellos[0].node()) continue;
    HOIST_ASSIGN_OR_RETURN(double gib_s, ProbeLink(comm, static_cast<int>(r), timeout_s));
    spdlog::info("dedup auto: the network to rank {} on {} measured {:.2f} GiB/s; its storage {}",
                 r, h.host(), gib_s,
                 h.storage_cached() ? std::string("holds the checkpoint in its page cache")
                                    : fmt::format("reads at {:.2f} GiB/s", h.storage_gib_s()));
    net = std::min(net, gib_s);
  }
  rates.net_gib_s = std::isinf(net) ? 0 : net;
  rates.storage_gib_s = rates.cached || std::isinf(storage) ? 0 : storage;
  return rates;
}

}  // namespace hoist::coordinator
