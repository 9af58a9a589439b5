#include "rank/worker.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "rank/numa.h"
#include "rank/verify.h"
#include "transport/pipeline.h"

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void AddPhase(proto::RankReport* r, const std::string& name, Clock::time_point origin,
              Clock::time_point a, Clock::time_point b, std::uint64_t bytes = 0) {
  proto::Phase* p = r->add_phases();
  p->set_name(name);
  p->set_start_s(Seconds(origin, a));
  p->set_seconds(Seconds(a, b));
  p->set_busy_s(Seconds(a, b));
  p->set_bytes(bytes);
}

// Every phase is reported, so reports of all modes aggregate alike; a phase a mode does not
// have (e.g. staging in pageable mode) is zero seconds at `fallback_start_s`.
void AddPhase(proto::RankReport* r, const std::string& name, const transport::PhaseTiming& t,
              double fallback_start_s) {
  proto::Phase* p = r->add_phases();
  p->set_name(name);
  p->set_start_s(t.ran ? t.start_s : fallback_start_s);
  p->set_seconds(t.seconds);
  p->set_busy_s(t.busy_s);
  p->set_bytes(t.bytes);
}

Status CheckFiles(const proto::LoadPlan& plan, const std::vector<bool>& used) {
  for (int f = 0; f < plan.files_size(); ++f) {
    const proto::File& file = plan.files(f);
    struct stat st;
    if (::stat(file.path().c_str(), &st) != 0) {
      const int err = errno;
      if (!used[f]) continue;  // a file this rank never reads may be absent on its node
      return Status::FailedPrecondition(file.path() +
                                        ": changed since planning: stat: " + std::strerror(err));
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::int64_t mtime =
        static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (size != file.size()) {
      return Status::FailedPrecondition(file.path() + ": changed since planning: size expected " +
                                        std::to_string(file.size()) + " bytes, actual " +
                                        std::to_string(size));
    }
    if (mtime != file.mtime_ns()) {
      return Status::FailedPrecondition(file.path() + ": changed since planning: mtime expected " +
                                        std::to_string(file.mtime_ns()) + " ns, actual " +
                                        std::to_string(mtime));
    }
  }
  return Status::Ok();
}

// The CUDA ordinal for `gpu` (the plan's or an explicit one), -1 for the host backend.
int ResolveOrdinal(DeviceKind kind, int gpu, int* count_out) {
  const int count = (kind == DeviceKind::kHost) ? 0 : transport::CudaDeviceCount();
  *count_out = count;
  if (kind == DeviceKind::kHost || (kind == DeviceKind::kAuto && count == 0)) return -1;
  if (count == 0) return gpu;  // kCuda without a visible GPU: let OpenCudaDevice say why
  return gpu % count;
}

Result<std::unique_ptr<transport::Device>> OpenOrdinal(int ordinal) {
  if (ordinal < 0) return transport::OpenHostDevice();
  return transport::OpenCudaDevice(ordinal);
}

Result<std::unique_ptr<transport::Device>> OpenDevice(const LoadOptions& o,
                                                      const proto::RankPlan& rp) {
  int count = 0;
  const int want = o.gpu >= 0 ? o.gpu : static_cast<int>(rp.gpu());
  const int ordinal = ResolveOrdinal(o.device, want, &count);
  if (ordinal >= 0 && count > 0 && ordinal != want) {
    spdlog::warn("plan gpu {} is not visible ({} GPUs); using cuda:{}", want, count, ordinal);
  }
  return OpenOrdinal(ordinal);
}

// *exchanged: set once the rank entered its dedup exchange (which then tells its peers itself).
Result<LoadedRank> Load(const proto::LoadPlan& plan, std::uint32_t rank, const LoadOptions& o,
                        bool* exchanged) {
  Clock::time_point t_start = Clock::now();
  if (rank >= static_cast<std::uint32_t>(plan.ranks_size())) {
    return Status::InvalidArgument("the plan has " + std::to_string(plan.ranks_size()) + " ranks");
  }
  const proto::RankPlan& rp = plan.ranks(static_cast<int>(rank));
  if (rp.rank() != rank) {
    return Status::Corrupt("plan.ranks(" + std::to_string(rank) + ") says it is rank " +
                           std::to_string(rp.rank()));
  }
  LoadedRank out;
  proto::RankReport& rep = out.report;
  rep.set_rank(rank);
  rep.set_node(rp.node());
  rep.set_gpu(rp.gpu());
  rep.set_read_mode(std::string(transport::ReadModeName(o.read_mode)));
  {
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) == 0) rep.set_host(host);
  }

  // Files: plan sizes bound every copy; the files on disk must still be what was planned.
  std::vector<std::string> paths;
  std::vector<std::uint64_t> sizes;
  for (const proto::File& f : plan.files()) {
    paths.push_back(f.path());
    sizes.push_back(f.size());
  }
  std::vector<bool> used(paths.size(), false);
  HOIST_RETURN_IF_ERROR(transport::ValidateRankPlan(rp, sizes, paths, rp.arena_bytes()));
  const bool exchange = ExchangeActive(plan, o.exchange);  // dedup: read only this rank's share
  for (const proto::Copy* c : StorageReads(rp, exchange)) {
    if (c->width() > 0 && c->rows() > 0) used[c->file()] = true;
  }
  for (const proto::TensorOut& t : rp.tensors()) {
    if (t.arena_offset() > rp.arena_bytes() || t.bytes() > rp.arena_bytes() - t.arena_offset()) {
      return Status::Corrupt("tensor " + t.name() + " at arena offset " +
                             std::to_string(t.arena_offset()) + " (+" + std::to_string(t.bytes()) +
                             ") lies outside the arena of " + std::to_string(rp.arena_bytes()) +
                             " bytes");
    }
  }
  HOIST_RETURN_IF_ERROR(CheckFiles(plan, used));

  // residency: what share of this rank's bytes the page cache held when the load began. It only
  // reads page-cache state, so it runs while the device is still being opened.
  const int residency_threads =
      o.threads > 0 ? o.threads
                    : transport::DefaultFillThreads(o.local_ranks > 0 ? o.local_ranks : 1);
  const Clock::time_point residency_start = Clock::now();
  Clock::time_point residency_end = residency_start;
  std::vector<transport::Residency> residency(paths.size());
  std::future<Status> residency_done = std::async(std::launch::async, [&]() -> Status {
    for (std::size_t f = 0; f < paths.size(); ++f) {
      if (!used[f]) continue;
      HOIST_ASSIGN_OR_RETURN(residency[f],
                             transport::Residency::Measure(paths[f], residency_threads));
    }
    residency_end = Clock::now();
    return Status::Ok();
  });

  // The device: taken from PrepareDevice when the caller started it early (then `total` starts
  // once it is ready), else opened here.
  if (o.prepared != nullptr && o.prepared->valid()) {
    Result<PreparedDevice> prepared = o.prepared->get();
    if (!prepared.ok()) {
      residency_done.wait();
      return std::move(prepared).status();
    }
    int count = 0;
    const int want = o.gpu >= 0 ? o.gpu : static_cast<int>(rp.gpu());
    if (ResolveOrdinal(o.device, want, &count) == prepared->ordinal) {
      out.device = std::move(prepared->device);
      proto::Phase* p = rep.add_phases();
      p->set_name("device_init");
      p->set_start_s(prepared->start_s);
      p->set_seconds(prepared->seconds);
      p->set_busy_s(prepared->seconds);
      t_start = Clock::now();
    } else {
      spdlog::info("rank {}: plan asks for gpu {}, not the prepared device; reopening", rank, want);
    }
  }
  if (out.device == nullptr) {
    Result<std::unique_ptr<transport::Device>> opened = OpenDevice(o, rp);
    if (!opened.ok()) {
      residency_done.wait();
      return std::move(opened).status();
    }
    out.device = std::move(opened).value();
  }
  transport::Device& dev = *out.device;
  rep.set_device(dev.Name());

  // bind
  Clock::time_point a = Clock::now();
  std::unique_ptr<NumaBinding> binding;
  if (o.bind_numa) binding = NumaBinding::BindNear(dev.Caps().pci_bus_id);
  AddPhase(&rep, "bind", o.origin, a, Clock::now());

  // arena_alloc
  a = Clock::now();
  HOIST_ASSIGN_OR_RETURN(out.arena, o.allocate_arena ? o.allocate_arena(dev, rp.arena_bytes())
                                                     : dev.Allocate(rp.arena_bytes()));
  AddPhase(&rep, "arena_alloc", o.origin, a, Clock::now(), rp.arena_bytes());

  // Pipeline parameters.
  int local = o.local_ranks;
  if (local <= 0) {
    local = 0;
    for (const proto::RankPlan& r : plan.ranks()) local += r.node() == rp.node() ? 1 : 0;
  }
  transport::PipelineOptions po;
  po.mode = o.read_mode;
  po.slots = o.slots > 0 ? o.slots : transport::kDefaultSlots;
  po.slot_bytes = o.slot_bytes > 0 ? o.slot_bytes : transport::kDefaultSlotBytes;
  po.threads = o.threads > 0 ? o.threads : transport::DefaultFillThreads(local);
  po.chunk_bytes = o.chunk_bytes;
  po.staging = o.staging;
  po.lazy_staging = o.lazy_staging;
  po.origin = o.origin;
  po.progress = o.progress;

  HOIST_RETURN_IF_ERROR(residency_done.get());
  std::uint64_t resident = 0;
  for (const proto::Copy* c : StorageReads(rp, exchange)) {
    if (c->width() == 0 || c->rows() == 0) continue;
    resident +=
        residency[c->file()].ResidentBytes(c->src_offset(), c->src_pitch(), c->width(), c->rows());
  }
  rep.set_bytes_resident_at_start(resident);
  AddPhase(&rep, "residency", o.origin, residency_start, residency_end, resident);

  transport::PipelineReport pr;
  ExchangeReport xr;
  {
    HOIST_ASSIGN_OR_RETURN(
        transport::SourceSet sources,
        transport::OpenSources(paths, used, o.read_mode, o.direct, o.wrap_source));
    if (!sources.note.empty()) spdlog::warn("{}", sources.note);
    for (std::size_t f = 0; f < paths.size(); ++f) {
      if (used[f]) sources.files[f].residency = &residency[f];
    }
    if (exchange) {
      *exchanged = true;
      HOIST_RETURN_IF_ERROR(
          RunExchange(dev, out.arena, plan, rp, sources.files, po, o.exchange, &pr, &xr));
    } else {
      HOIST_RETURN_IF_ERROR(transport::RunPipeline(dev, out.arena, rp, sources.files, po, &pr));
    }
    if (o.close_in_background) {
      // Unmapping a large, fully faulted-in mapping costs ~3 ms per GiB of page-table teardown;
      // the weights are on the device already, so release the read-only mappings off the path.
      std::thread([s = std::move(sources)]() mutable { s.owned.clear(); }).detach();
    }
  }  // otherwise the sources (mappings, descriptors) close here
  const double after_pipeline = Seconds(o.origin, Clock::now());
  const double read_start = pr.read.ran ? pr.read.start_s : after_pipeline;
  AddPhase(&rep, "staging_alloc", pr.staging_alloc, read_start);
  AddPhase(&rep, "read", pr.read, read_start);
  AddPhase(&rep, "h2d", pr.h2d, read_start);
  AddPhase(&rep, "drain", pr.drain, after_pipeline);
  rep.set_bytes_read(pr.bytes_read);
  rep.set_bytes_h2d(pr.bytes_h2d);
  AddExchangeReport(rp, exchange, xr, &rep);
  for (const transport::SpanRecord& s : pr.spans) {
    proto::Span* p = rep.add_spans();
    p->set_lane(s.lane);
    p->set_what(s.what);
    p->set_start_s(s.start_s);
    p->set_seconds(s.seconds);
    p->set_bytes(s.bytes);
  }
  spdlog::debug(
      "rank {}: {} slots x {} bytes, {} threads, chunk {}, {} slot fills, {} tasks, "
      "{} bytes cold",
      rank, pr.slots, pr.slot_bytes, pr.threads, pr.chunk_bytes, pr.slot_seqs, pr.tasks,
      pr.bytes_cold);

  if (o.verify) {
    a = Clock::now();
    HOIST_RETURN_IF_ERROR(VerifyArena(dev, out.arena, plan, rp));
    AddPhase(&rep, "verify", o.origin, a, Clock::now(), pr.bytes_h2d + pr.bytes_filled);
    rep.set_verified(true);
  }
  if (!o.dump_dir.empty()) {
    a = Clock::now();
    HOIST_ASSIGN_OR_RETURN(std::string path, DumpArena(dev, out.arena, rp, o.dump_dir));
    AddPhase(&rep, "dump", o.origin, a, Clock::now(), rp.payload_bytes());
    spdlog::info("rank {}: dumped {}", rank, path);
  }
  AddPhase(&rep, "staging_free", pr.staging_free, after_pipeline);
  AddPhase(&rep, "total", o.origin, t_start, Clock::now(), pr.bytes_h2d);
  return out;
}

}  // namespace

Result<PreparedDevice> PrepareDevice(DeviceKind kind, int gpu, Clock::time_point origin) {
  const Clock::time_point start = Clock::now();
  int count = 0;
  PreparedDevice p;
  p.ordinal = ResolveOrdinal(kind, gpu < 0 ? 0 : gpu, &count);
  HOIST_ASSIGN_OR_RETURN(p.device, OpenOrdinal(p.ordinal));
  p.start_s = Seconds(origin, start);
  p.seconds = Seconds(start, Clock::now());
  return p;
}

Result<LoadedRank> LoadRank(const proto::LoadPlan& plan, std::uint32_t rank,
                            const LoadOptions& options) {
  bool exchanged = false;
  Result<LoadedRank> r = Load(plan, rank, options, &exchanged);
  if (!r.ok() && !exchanged) AbandonExchange(plan, options.exchange);  // peers must not wait
  if (!r.ok()) return Status(r.status()).Annotate("rank " + std::to_string(rank));
  return r;
}

}  // namespace hoist::rank
