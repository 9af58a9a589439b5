#include "rank/early_sources.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "rank/exchange.h"
#include "rank/placement.h"
#include "transport/span_log.h"

namespace hoist::rank {
namespace {

bool Wanted(const proto::LoadPlan& plan, const LoadOptions& o) {
  if (plan.packed_size() > 0) return false;
  if (o.read_mode != transport::ReadMode::kAuto && o.read_mode != transport::ReadMode::kMmap) {
    return false;
  }
  switch (o.prefault) {
    case PrefaultMode::kOff:
      return false;
    case PrefaultMode::kOn:
      return true;
    case PrefaultMode::kAuto:
      break;
  }
  return o.device != DeviceKind::kHost;
}

std::vector<transport::PrefaultRange> Ranges(const proto::RankPlan& rp, bool exchange) {
  std::vector<transport::PrefaultRange> ranges;
  for (const proto::Copy* c : StorageReads(rp, exchange)) {
    if (c->width() == 0 || c->rows() == 0) continue;
    ranges.push_back({c->file(), c->src_offset(), (c->rows() - 1) * c->src_pitch() + c->width()});
  }
  return ranges;
}

// This rank's share of the node's cores, as if its GPU's locality were unknown (the device is
// not open yet): the node's ranks divide the allowed cores evenly.
std::unique_ptr<ThreadBinding> BindShare(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                                         const LoadOptions& o, int* ranks_on_node) {
  NodeRanks node;
  for (const proto::RankPlan& r : plan.ranks()) {
    if (r.node() != rp.node()) continue;
    if (r.rank() == rp.rank()) node.self = static_cast<int>(node.pci_bus_ids.size());
    node.pci_bus_ids.emplace_back();
  }
  *ranks_on_node = static_cast<int>(node.pci_bus_ids.size());
  Result<CpuPlan> cpus = PlanCpus(o.cpu_bind, node);
  if (!cpus.ok()) return nullptr;
  return ThreadBinding::Bind(*cpus, /*bind_memory=*/false);
}

}  // namespace

std::unique_ptr<EarlySources> EarlySources::Start(const proto::LoadPlan& plan,
                                                  const proto::RankPlan& rp, const LoadOptions& o,
                                                  const std::vector<std::string>& paths,
                                                  const std::vector<bool>& used, bool exchange) {
  if (!Wanted(plan, o)) return nullptr;
  Result<transport::SourceSet> set =
      transport::OpenSources(paths, used, o.read_mode, o.direct, o.wrap_source,
                             /*release_mapped_pages=*/o.device == DeviceKind::kHost);
  if (!set.ok()) return nullptr;
  std::unique_ptr<EarlySources> early(new EarlySources());
  early->set_ = std::move(*set);
  int ranks_on_node = 1;
  std::unique_ptr<ThreadBinding> binding = BindShare(plan, rp, o, &ranks_on_node);
  const int threads = o.threads > 0 ? o.threads : transport::DefaultFillThreads(ranks_on_node);
  early->prefault_ =
      std::make_unique<transport::Prefaulter>(early->set_.files, Ranges(rp, exchange), threads);
  return early;  // the binding is undone here; the prefault's threads keep theirs
}

EarlySources::~EarlySources() = default;

std::optional<transport::SourceSet> EarlySources::Take(bool gpu, const LoadOptions& o,
                                                       proto::RankReport* rep) {
  if (prefault_ == nullptr) return std::nullopt;  // taken already
  const transport::PrefaultReport r = prefault_->Stop();
  const auto since = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(t - o.origin).count();
  };
  transport::SpanLog log;
  log.Add("sources", "prefault", since(r.start), since(r.end) - since(r.start), r.bytes);
  log.AppendTo(rep->mutable_spans());
  spdlog::debug("rank {}: prefaulted {} bytes in {:.1f} ms ({} skipped, {} not reached)",
                rep->rank(), r.bytes, 1e3 * (since(r.end) - since(r.start)), r.skipped,
                r.remaining);
  prefault_.reset();
  if (!gpu && o.prefault == PrefaultMode::kAuto) return std::nullopt;
  return std::move(set_);
}

}  // namespace hoist::rank
