#include "rank/worker.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include "planner/plan_set.h"
#include "rank/exchange.h"
#include "rank/load_watch.h"
#include "rank/verify.h"
#include "transport/staging/pipeline.h"
#include "transport/timing/phase.h"

namespace hoist::rank {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Phase;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Every phase is reported, so reports of all modes aggregate alike; a phase a mode does not
// have (e.g. staging in pageable mode) is zero seconds at `fallback_start_s`.
void RecordTiming(const transport::PhaseRecorder& rec, Phase phase, const transport::PhaseTiming& t,
                  double fallback_start_s) {
  rec.Record(phase, t.ran ? t.start_s : fallback_start_s, t.seconds, t.busy_s, t.bytes);
}

void SetStage(const LoadOptions& o, LoadStage s) {
  if (o.wiring.stage != nullptr) o.wiring.stage->store(s);
}

Status Cancelled(const LoadOptions& o) {
  if (o.wiring.cancel != nullptr && o.wiring.cancel->load())
    return Status::Aborted("load cancelled");
  return Status::Ok();
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

Result<std::unique_ptr<transport::Device>> OpenOrdinal(int ordinal) {
  if (ordinal < 0) return transport::OpenHostDevice();
  return transport::OpenCudaDevice(ordinal);
}

// The device: the prepared one when it is the one the plan asks for (then, if it was not ready
// yet, `total` starts once it is: *t_start moves), else opened here.
Result<std::unique_ptr<transport::Device>> TakeDevice(const LoadOptions& o,
                                                      const proto::RankPlan& rp,
                                                      proto::RankReport* rep,
                                                      Clock::time_point* t_start,
                                                      transport::PhaseTiming* staging) {
  const int want = WantedGpu(o.settings, rp);
  const int ordinal = RankOrdinal(o.settings, rp);
  if (o.wiring.prepared != nullptr && o.wiring.prepared->valid()) {
    const bool waits =
        o.wiring.prepared->wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    Result<PreparedDevice> prepared = o.wiring.prepared->get();
    if (!prepared.ok()) return std::move(prepared).status();
    if (prepared->ordinal == ordinal) {
      transport::PhaseRecorder(rep, o.wiring.origin)
          .Record(Phase::kDeviceInit, prepared->start_s, prepared->seconds, prepared->seconds);
      *staging = prepared->staging;
      if (waits) *t_start = Clock::now();  // what ran before this ran while the device opened
      return std::move(prepared->device);
    }
    spdlog::info("rank {}: plan asks for gpu {}, not the prepared device; reopening", rp.rank(),
                 want);
  }
  const int count = o.settings.device == DeviceKind::kHost ? 0 : transport::CudaDeviceCount();
  if (ordinal >= 0 && count > 0 && ordinal != want) {
    spdlog::warn("plan gpu {} is not visible ({} GPUs); using cuda:{}", want, count, ordinal);
  }
  return OpenOrdinal(ordinal);
}

// This rank among the ranks of its node, with their GPUs' PCI bus ids (rank/placement.h).
NodeRanks NodeOf(const proto::LoadPlan& plan, const proto::RankPlan& rp, const LoadOptions& o,
                 const transport::Device& dev) {
  NodeRanks node;
  for (const proto::RankPlan& r : plan.ranks()) {
    if (r.node() != rp.node()) continue;
    if (r.rank() == rp.rank()) {
      node.self = static_cast<int>(node.pci_bus_ids.size());
      node.pci_bus_ids.push_back(dev.Caps().pci_bus_id);
      continue;
    }
    const int ordinal = ResolveOrdinal(o.settings.device, static_cast<int>(r.gpu()));
    Result<std::string> id = ordinal >= 0 ? transport::CudaPciBusId(ordinal) : std::string();
    node.pci_bus_ids.push_back(id.ok() ? *id : std::string());
  }
  return node;
}

struct Files {
  std::vector<std::string> paths;
  std::vector<std::uint64_t> sizes;
  std::vector<bool> used;
};

// The plan's files, which of them this rank reads, and the checks that they are what was planned.
Result<Files> CheckRankFiles(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                             bool exchange) {
  Files f;
  for (const proto::File& file : plan.files()) {
    f.paths.push_back(file.path());
    f.sizes.push_back(file.packed() ? file.logical_size() : file.size());  // what copies address
  }
  f.used.assign(f.paths.size(), false);
  HOIST_RETURN_IF_ERROR(transport::ValidateRankPlan(rp, f.sizes, f.paths, rp.arena_bytes()));
  for (const proto::Copy* c : StorageReads(rp, exchange)) {
    if (c->width() > 0 && c->rows() > 0) f.used[c->file()] = true;
  }
  for (const proto::TensorOut& t : rp.tensors()) {
    if (t.arena_offset() > rp.arena_bytes() || t.bytes() > rp.arena_bytes() - t.arena_offset()) {
      return Status::Corrupt("tensor " + t.name() + " at arena offset " +
                             std::to_string(t.arena_offset()) + " (+" + std::to_string(t.bytes()) +
                             ") lies outside the arena of " + std::to_string(rp.arena_bytes()) +
                             " bytes");
    }
  }
  HOIST_RETURN_IF_ERROR(CheckFiles(plan, f.used));
  return f;
}

// The share of this rank's storage reads the page cache held when the load began, for the
// report. Auto mode needs no probe: each chunk asks the page cache just before it is read (the
// pipeline counts what it found). Other modes measure the files on a helper thread, beside the
// load, without delaying it.
class ResidencyProbe {
 public:
  ResidencyProbe(const Files& files, int threads, bool needed) : residency_(files.paths.size()) {
    start_ = end_ = Clock::now();
    if (!needed) return;
    done_ = std::async(std::launch::async, [this, &files, threads]() -> Status {
      for (std::size_t f = 0; f < files.paths.size(); ++f) {
        if (!files.used[f]) continue;
        HOIST_ASSIGN_OR_RETURN(residency_[f],
                               transport::Residency::Measure(files.paths[f], threads));
      }
      end_ = Clock::now();
      return Status::Ok();
    });
  }
  ~ResidencyProbe() {
    if (done_.valid()) done_.wait();
  }
  // Waits for the measurement and adds the `residency` phase; `live` is what the pipeline found
  // when it asked per chunk (auto mode).
  Status Finish(const proto::RankPlan& rp, bool exchange, const LoadOptions& o, std::uint64_t live,
                proto::RankReport* rep) {
    if (!done_.valid()) {
      rep->set_bytes_resident_at_start(live);
      transport::PhaseRecorder(rep, o.wiring.origin)
          .Record(Phase::kResidency, start_, start_, live);
      return Status::Ok();
    }
    HOIST_RETURN_IF_ERROR(done_.get());
    std::uint64_t resident = 0;
    for (const proto::Copy* c : StorageReads(rp, exchange)) {
      if (c->width() == 0 || c->rows() == 0) continue;
      resident += residency_[c->file()].ResidentBytes(c->src_offset(), c->src_pitch(), c->width(),
                                                      c->rows());
    }
    rep->set_bytes_resident_at_start(resident);
    transport::PhaseRecorder(rep, o.wiring.origin)
        .Record(Phase::kResidency, start_, end_, resident);
    return Status::Ok();
  }

 private:
  std::vector<transport::Residency> residency_;
  Clock::time_point start_, end_;
  std::future<Status> done_;
};

// Places the fill threads and binds the calling thread (threads it starts inherit). Sets the
// report's cpus and cpu_bind, *threads (when the caller left it to the placement) and *cores, the
// CPUs they run on (the cpuset, narrowed by a cgroup quota).
Result<std::unique_ptr<ThreadBinding>> Place(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                                             const LoadOptions& o, const transport::Device& dev,
                                             proto::RankReport* rep, int* threads, int* cores) {
  HOIST_ASSIGN_OR_RETURN(CpuPlan cpus, PlanCpus(o.settings.cpu_bind, NodeOf(plan, rp, o, dev)));
  rep->set_cpus(cpus.list);
  rep->set_cpu_bind(std::string(CpuBindName(cpus.mode)));
  int available = std::max<int>(1, static_cast<int>(cpus.cpus.size()));
  const int quota = CgroupCpuQuota();  // a container's cpu.max, narrower than its cpuset
  std::string quota_note;
  if (quota > 0 && quota < available) {
    available = quota;
    quota_note = ", a CPU quota of " + std::to_string(quota) + " (cgroup)";
  }
  *cores = available;
  *threads =
      o.settings.pipeline.threads > 0 ? o.settings.pipeline.threads : std::clamp(available, 1, 16);
  const int run = std::min(*threads, available);  // the pipeline runs no more (options.cores)
  spdlog::info("rank {}: {}{}; {} fill thread{}", rp.rank(), cpus.how, quota_note, run,
               run == 1 ? "" : "s");
  if (*threads > available) {
    spdlog::warn(
        "rank {}: --threads {} on {} cpu{} ({}{}): one fill thread per cpu runs (more would only "
        "slice the cores; a wholly cold load still reads with a thread per slot); leave threads "
        "unset or set --threads {}",
        rp.rank(), *threads, available, available == 1 ? "" : "s", cpus.list, quota_note,
        available);
  }
  return ThreadBinding::Bind(cpus, o.settings.bind_numa);
}

// The run's options: the settings as config/ resolved them, the fill threads this rank placed,
// and the wiring.
transport::PipelineOptions PipelineFor(const LoadOptions& o, int threads, int ranks_on_node) {
  transport::PipelineOptions po;
  static_cast<transport::PipelineSettings&>(po) = o.settings.pipeline;
  po.threads = threads;
  po.ranks_on_node = ranks_on_node;
  po.origin = o.wiring.origin;
  po.progress = o.wiring.progress;
  po.cancel = o.wiring.cancel;
  return po;
}

// Runs the reads: the plain pipeline, or the pipeline with the exchange stage (handed to the
// ExchangeHost's driver, which this waits for).
Status Read(transport::Device& dev, const transport::DeviceBuffer& arena,
            const proto::LoadPlan& plan, const proto::RankPlan& rp, const LoadOptions& o,
            const std::vector<transport::FileSources>& sources, transport::PipelineOptions po,
            transport::PipelineReport* pr, ExchangeReport* xr) {
  if (!ExchangeActive(plan, o.wiring))
    return transport::RunPipeline(dev, arena, rp, sources, po, pr);
  Result<std::unique_ptr<Exchange>> x = Exchange::Create(
      dev, arena, plan, rp, *o.wiring.exchange->peer(), o.wiring.exchange->exchange_options());
  if (!x.ok()) return o.wiring.exchange->Finish(x.status());
  (*x)->AttachTo(&po);
  o.wiring.exchange->Start(x->get());
  const Status reads = transport::RunPipeline(dev, arena, (*x)->read_plan(), sources, po, pr);
  HOIST_RETURN_IF_ERROR(o.wiring.exchange->Finish(reads));
  *xr = (*x)->Report(o.wiring.origin);
  return Status::Ok();
}

// The ring made while the device opened (PrepareDevice) and the pipeline's own staging set-up
// (taking the kept slots, or making them) are one phase; it then starts before `total`.
transport::PhaseTiming StagingPhase(const transport::PhaseTiming& ahead,
                                    const transport::PhaseTiming& load) {
  if (!ahead.ran) return load;
  transport::PhaseTiming t = ahead;
  t.seconds += load.seconds;
  t.busy_s += load.busy_s;
  t.bytes = std::max(t.bytes, load.bytes);
  return t;
}

void AddPipelineReport(const transport::PipelineReport& pr, const transport::PhaseTiming& ahead,
                       const LoadOptions& o, proto::RankReport* rep) {
  const double after_pipeline = Seconds(o.wiring.origin, Clock::now());
  const double read_start = pr.read.ran ? pr.read.start_s : after_pipeline;
  const transport::PhaseRecorder rec(rep, o.wiring.origin);
  RecordTiming(rec, Phase::kSetup, pr.setup, read_start);
  RecordTiming(rec, Phase::kStagingAlloc, StagingPhase(ahead, pr.staging_alloc), read_start);
  RecordTiming(rec, Phase::kRead, pr.read, read_start);
  RecordTiming(rec, Phase::kH2d, pr.h2d, read_start);
  if (pr.decode.ran) RecordTiming(rec, Phase::kDecode, pr.decode, read_start);
  RecordTiming(rec, Phase::kDrain, pr.drain, after_pipeline);
  RecordTiming(rec, Phase::kStagingFree, pr.staging_free, after_pipeline);
  rep->set_bytes_read(pr.bytes_read);
  rep->set_bytes_h2d(pr.bytes_h2d);
  rep->set_fill_threads(static_cast<std::uint32_t>(pr.threads));
  rep->set_staging_slots(static_cast<std::uint32_t>(pr.slots));
  rep->set_staging_slot_bytes(pr.slots > 0 ? pr.slot_bytes : 0);
  rep->set_deep_read(pr.deep);
  pr.spans.AppendTo(rep->mutable_spans());
}

// Runs fn on a helper thread, or, when no thread can start, on the future's first get().
template <class F>
auto OnHelper(const F& fn) -> std::future<decltype(fn())> {
  try {
    return std::async(std::launch::async, fn);
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, fn);
  }
}

// The sources' opening (O_DIRECT descriptors and their AIO contexts; mappings come on first use),
// on a helper thread started before the device is taken, so that it runs while the device opens
// (when it is still opening) and while the calling thread binds itself and allocates the arena
// (0.3-0.5 ms each of a hot load on the H200 box; none needs the others). Host-memory loads
// (RankOrdinal < 0: asked on the helper, as it may wait for the CUDA driver) release the mapped
// pages they copied. When no thread can start, Take opens the sources itself. Take is called at
// most once, by the thread that made the object; the destructor waits for the helper (it owns
// what it opened).
class SourceOpening {
 public:
  SourceOpening(const Files& files, const LoadOptions& o, const proto::RankPlan& rp) {
    auto open = [this, &files, &o, &rp] {
      a_ = Clock::now();
      Result<transport::SourceSet> r =
          transport::OpenSources(files.paths, files.used, o.settings.pipeline.mode,
                                 o.settings.direct, o.wiring.wrap_source,
                                 /*release_mapped_pages=*/RankOrdinal(o.settings, rp) < 0);
      z_ = Clock::now();
      return r;
    };
    opened_ = OnHelper(open);
  }
  ~SourceOpening() {
    if (opened_.valid()) opened_.wait();
  }

  // The opened sources; their opening is a span on lane "sources".
  Result<transport::SourceSet> Take(Clock::time_point origin, proto::RankReport* rep) {
    Result<transport::SourceSet> r = opened_.get();
    transport::SpanLog log;
    log.Add("sources", "sources opened", Seconds(origin, a_), Seconds(a_, z_));
    log.AppendTo(rep->mutable_spans());
    return r;
  }

 private:
  Clock::time_point a_, z_;  // written by the helper, read after get()
  std::future<Result<transport::SourceSet>> opened_;
};

// The rank's arena. A load that neither exchanges (dedup hands the arena to its peers before the
// pipeline starts) nor takes an engine's allocator (called on the load's own thread) allocates it
// on a helper thread while the pipeline sets up (each about 0.5 ms of a hot load on the H200
// box); the pipeline waits for it before it touches the arena (PipelineOptions::arena_ready).
// Otherwise Start allocates it. Either way it lands in *arena, so the caller frees it whatever
// fails, and the arena_alloc phase says when it was made. One thread (the load's) calls Start and
// Ready, once each; the destructor waits for the helper.
class ArenaAllocation {
 public:
  ArenaAllocation(transport::Device& dev, const LoadOptions& o, std::uint64_t bytes, bool beside,
                  transport::DeviceBuffer* arena)
      : dev_(dev),
        o_(o),
        bytes_(bytes),
        beside_(beside && !o.wiring.allocate_arena),
        arena_(arena) {}
  ~ArenaAllocation() {
    if (made_.valid()) (void)Keep(made_.get());
  }

  // Whether the arena is made beside the pipeline's set-up (then the pipeline calls Ready).
  bool beside() const { return beside_; }

  Status Start() {
    if (!beside_) {
      a_ = Clock::now();
      Result<transport::DeviceBuffer> r =
          o_.wiring.allocate_arena ? o_.wiring.allocate_arena(dev_, bytes_) : dev_.Allocate(bytes_);
      z_ = Clock::now();
      return Keep(std::move(r));
    }
    auto make = [this] {
      a_ = Clock::now();
      Result<transport::DeviceBuffer> r = dev_.Allocate(bytes_);
      z_ = Clock::now();
      return r;
    };
    made_ = OnHelper(make);
    return Status::Ok();
  }

  // The arena is made (waits for the helper); records arena_alloc.
  Status Ready(proto::RankReport* rep) {
    Status s = made_.valid() ? Keep(made_.get()) : Status::Ok();
    transport::PhaseRecorder(rep, o_.wiring.origin).Record(Phase::kArenaAlloc, a_, z_, bytes_);
    HOIST_RETURN_IF_ERROR(s);
    return Cancelled(o_);
  }

 private:
  Status Keep(Result<transport::DeviceBuffer> r) {
    if (!r.ok()) return r.status();
    *arena_ = *r;
    return Status::Ok();
  }

  transport::Device& dev_;
  const LoadOptions& o_;
  const std::uint64_t bytes_;
  const bool beside_;
  transport::DeviceBuffer* arena_;
  Clock::time_point a_, z_;  // written by whichever thread allocates, read after get()
  std::future<Result<transport::DeviceBuffer>> made_;
};

// After AddPipelineReport. A packed checkpoint's copies address logical bytes: what its rank read
// from storage is what the pipeline read (stored blocks and plain copies), not the copies' sum.
void AddExchangeReport(const proto::LoadPlan& plan, const proto::RankPlan& rp, bool exchange,
                       const ExchangeReport& xr, Clock::time_point origin,
                       proto::RankReport* report) {
  std::uint64_t storage = 0;
  for (const proto::Copy* c : StorageReads(rp, exchange)) storage += c->width() * c->rows();
  report->set_bytes_read_from_storage(plan.packed_size() > 0 ? report->bytes_read() : storage);
  if (!exchange) return;
  report->set_bytes_sent(xr.bytes_sent);
  report->set_bytes_received(xr.bytes_received);
  report->set_peer(xr.peer_name);
  RecordTiming(transport::PhaseRecorder(report, origin), Phase::kPeer, xr.peer, xr.peer.start_s);
}

// The load after the device is open: bind, arena, reads (and exchange), verify, dump.
// What the load makes before its device is ready (none of it needs the device), off the load's
// critical path: a packed checkpoint's streams and, without dedup (which reads another plan),
// the rank's work translated (packed) and cut into staging slots (staged read modes).
struct Ahead {
  transport::PackedStreams streams;
  std::optional<transport::PackedWork> work;
  std::optional<transport::CutAhead> cut;
};

Result<Ahead> PrepareAhead(const proto::LoadPlan& plan, const proto::RankPlan& rp,
                           const LoadOptions& o, bool exchange) {
  Ahead p;
  HOIST_ASSIGN_OR_RETURN(p.streams, transport::PackedStreams::FromPlan(plan));
  if (exchange) return p;
  // The cut ignores the threads and the depth.
  transport::PipelineOptions po = PipelineFor(o, /*threads=*/1, /*ranks_on_node=*/1);
  po.read_depth_bytes = 0;  // the cut of the ring as given
  if (!p.streams.empty()) {
    HOIST_ASSIGN_OR_RETURN(p.work, p.streams.Translate(rp));
    p.cut = transport::CutPackedAhead(*p.work, po);
  } else if (transport::Staged(o.settings.pipeline.mode)) {
    p.cut = transport::CutPlanAhead(rp, po);
  }
  return p;
}

// A watched load (LoadWiring::watch): the arena exists, before any byte moves into it. The
// watch's test hold and injected failure run here.
Status AnnounceArena(const LoadOptions& o, transport::Device& dev,
                     const transport::DeviceBuffer& arena) {
  if (o.wiring.watch == nullptr) return Status::Ok();
  o.wiring.watch->ArenaReady(dev, arena);
  static const std::atomic<bool> kNever{false};
  if (o.wiring.watch->hold)
    o.wiring.watch->hold(o.wiring.cancel != nullptr ? *o.wiring.cancel : kNever);
  HOIST_RETURN_IF_ERROR(o.wiring.watch->inject_failure);
  return Cancelled(o);
}

Status Execute(const proto::LoadPlan& plan, const proto::RankPlan& rp, const LoadOptions& o,
               SourceOpening& opening, ResidencyProbe& residency, Ahead& ahead,
               const transport::PhaseTiming& staged_ahead, LoadedRank* out) {
  transport::Device& dev = *out->device;
  proto::RankReport& rep = out->report;
  const transport::PhaseRecorder rec(&rep, o.wiring.origin);
  const bool exchange = ExchangeActive(plan, o.wiring);
  Clock::time_point a = Clock::now();
  int threads = 1, cores = 0;
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<ThreadBinding> binding,
                         Place(plan, rp, o, dev, &rep, &threads, &cores));
  rec.Record(Phase::kBind, a, Clock::now());

  SetStage(o, LoadStage::kArena);
  ArenaAllocation arena(dev, o, rp.arena_bytes(), /*beside=*/!exchange, &out->arena);
  HOIST_RETURN_IF_ERROR(arena.Start());
  if (!arena.beside()) {
    HOIST_RETURN_IF_ERROR(arena.Ready(&rep));
    HOIST_RETURN_IF_ERROR(AnnounceArena(o, dev, out->arena));
  }

  // Beside the read, the stage stays "allocating the arena" until the first copy into it can go.
  if (!arena.beside()) SetStage(o, LoadStage::kReading);
  transport::PipelineReport pr;
  ExchangeReport xr;
  {
    HOIST_ASSIGN_OR_RETURN(transport::SourceSet sources, opening.Take(o.wiring.origin, &rep));
    if (!sources.note.empty()) spdlog::warn("{}", sources.note);
    transport::PipelineOptions po = PipelineFor(o, threads, RanksOnNode(plan, rp));
    po.cores = cores;
    po.packed = &ahead.streams;
    po.packed_work = ahead.work ? &*ahead.work : nullptr;
    po.cut_ahead = ahead.cut ? &*ahead.cut : nullptr;
    if (arena.beside()) {
      po.arena_ready = [&] {
        Status ready = arena.Ready(&rep);
        if (ready.ok()) ready = AnnounceArena(o, dev, out->arena);
        SetStage(o, LoadStage::kReading);
        return ready;
      };
    }
    LandingWatcher landing(dev, exchange ? nullptr : o.wiring.watch);
    HOIST_RETURN_IF_ERROR(landing.Attach(rp, &po));
    const Status read = Read(dev, out->arena, plan, rp, o, sources.files, po, &pr, &xr);
    landing.Stop();
    HOIST_RETURN_IF_ERROR(read);
    if (o.settings.close_in_background) {
      // Unmapping a large, fully faulted-in mapping costs ~3 ms per GiB of page-table teardown;
      // the weights are on the device already, so release the read-only mappings off the path.
      std::thread([s = std::move(sources)]() mutable { s.owned.clear(); }).detach();
    }
  }  // otherwise the sources (mappings, descriptors) close here
  binding.reset();
  HOIST_RETURN_IF_ERROR(residency.Finish(rp, exchange, o, pr.bytes_resident, &rep));
  AddPipelineReport(pr, staged_ahead, o, &rep);
  AddExchangeReport(plan, rp, exchange, xr, o.wiring.origin, &rep);

  a = Clock::now();
  std::uint64_t transposed = 0;
  HOIST_RETURN_IF_ERROR(TransposeArenaTensors(dev, out->arena, rp, &transposed));
  if (transposed > 0) rec.Record(Phase::kTranspose, a, Clock::now(), transposed);
  if (o.settings.verify) {
    SetStage(o, LoadStage::kVerify);
    a = Clock::now();
    HOIST_RETURN_IF_ERROR(VerifyArena(dev, out->arena, plan, rp));
    rec.Record(Phase::kVerify, a, Clock::now(), pr.bytes_h2d + pr.bytes_filled);
    rep.set_verified(true);
  }
  if (!o.settings.dump_dir.empty()) {
    SetStage(o, LoadStage::kDump);
    a = Clock::now();
    HOIST_ASSIGN_OR_RETURN(std::string path, DumpArena(dev, out->arena, rp, o.settings.dump_dir));
    rec.Record(Phase::kDump, a, Clock::now(), rp.payload_bytes());
    spdlog::info("rank {}: dumped {}", rp.rank(), path);
  }
  return Status::Ok();
}

Status Load(const proto::LoadPlan& plan, std::uint32_t rank, const LoadOptions& o,
            LoadedRank* loaded) {
  Clock::time_point t_start = Clock::now();
  const proto::RankPlan* found = planner::FindRank(plan, rank);
  if (found == nullptr) {
    if (rank < planner::PlanWorld(plan) && !plan.view() && !plan.compact()) {
      return Status::Corrupt("plan.ranks(" + std::to_string(rank) + ") says it is rank " +
                             std::to_string(plan.ranks(static_cast<int>(rank)).rank()));
    }
    return Status::InvalidArgument(
        "the plan has " + std::to_string(planner::PlanWorld(plan)) + " ranks" +
        (plan.view() ? ", rank " + std::to_string(rank) + " not among this view's"
                     : std::string()));
  }
  const proto::RankPlan& rp = *found;
  LoadedRank& out = *loaded;
  proto::RankReport& rep = out.report;
  rep.set_rank(rank);
  rep.set_node(rp.node());
  rep.set_gpu(rp.gpu());
  rep.set_stopped_by(-1);
  rep.set_read_mode(std::string(transport::ReadModeName(o.settings.pipeline.mode)));
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) rep.set_host(host);

  const bool exchange = ExchangeActive(plan, o.wiring);  // dedup: read only this rank's share
  HOIST_ASSIGN_OR_RETURN(Files files, CheckRankFiles(plan, rp, exchange));
  // (A packed plan's copies address logical bytes: no file probe; auto mode counts what it finds.)
  ResidencyProbe residency(
      files,
      o.settings.pipeline.threads > 0 ? o.settings.pipeline.threads
                                      : transport::DefaultFillThreads(),
      o.settings.pipeline.mode != transport::ReadMode::kAuto && plan.packed_size() == 0);
  SetStage(o, LoadStage::kDevice);
  SourceOpening opening(files, o, rp);  // before the binding: the helper may use any core
  const Clock::time_point p = Clock::now();
  HOIST_ASSIGN_OR_RETURN(Ahead ahead, PrepareAhead(plan, rp, o, exchange));
  transport::PhaseRecorder(&rep, o.wiring.origin).Record(Phase::kPrepare, p, Clock::now());
  transport::PhaseTiming staged_ahead;  // the ring made with the device, if it was
  HOIST_ASSIGN_OR_RETURN(out.device, TakeDevice(o, rp, &rep, &t_start, &staged_ahead));
  rep.set_device(out.device->Name());
  HOIST_RETURN_IF_ERROR(Execute(plan, rp, o, opening, residency, ahead, staged_ahead, &out));
  transport::PhaseRecorder(&rep, o.wiring.origin)
      .Record(Phase::kTotal, t_start, Clock::now(), rp.payload_bytes());
  SetStage(o, LoadStage::kDone);
  return Status::Ok();
}

}  // namespace

int RanksOnNode(const proto::LoadPlan& plan, const proto::RankPlan& rank_plan) {
  const auto on_node =
      std::count_if(plan.ranks().begin(), plan.ranks().end(),
                    [&](const proto::RankPlan& r) { return r.node() == rank_plan.node(); });
  return std::max(1, static_cast<int>(on_node));
}

std::uint64_t ReadDepthFor(const LoadSettings& settings, const proto::LoadPlan& plan,
                           const proto::RankPlan& rank_plan) {
  return transport::ReadDepthBytes(settings.pipeline, RanksOnNode(plan, rank_plan));
}

bool ExchangeActive(const proto::LoadPlan& plan, const LoadWiring& wiring) {
  return plan.dedup() != proto::DEDUP_NONE && wiring.exchange != nullptr &&
         wiring.exchange->peer() != nullptr;
}

int WantedGpu(const LoadSettings& s, const proto::RankPlan& rp) {
  return s.gpu >= 0 ? s.gpu : static_cast<int>(rp.gpu());
}

int RankOrdinal(const LoadSettings& s, const proto::RankPlan& rp) {
  return ResolveOrdinal(s.device, WantedGpu(s, rp));
}

int ResolveOrdinal(DeviceKind kind, int gpu) {
  const int count = (kind == DeviceKind::kHost) ? 0 : transport::CudaDeviceCount();
  if (kind == DeviceKind::kHost || (kind == DeviceKind::kAuto && count == 0)) return -1;
  if (count == 0) return gpu;  // kCuda without a visible GPU: let OpenCudaDevice say why
  return gpu % count;
}

StagingRing RingOf(const LoadSettings& s) {
  StagingRing ring;
  ring.slots = s.pipeline.slots;
  ring.slot_bytes = s.pipeline.slot_bytes;
  ring.kind = s.pipeline.staging;
  ring.cpu_bind = s.cpu_bind;
  ring.bind_numa = s.bind_numa;
  return ring;
}

// One thread per slot, bound like the load's fill threads (the GPU's NUMA domain), makes it.
transport::PhaseTiming MakeRingAhead(transport::Device& dev, const StagingRing& ring,
                                     Clock::time_point origin) {
  transport::PhaseTiming t;
  const std::uint64_t bytes = std::uint64_t(std::max(ring.slots, 0)) * ring.slot_bytes;
  if (bytes == 0 || bytes > dev.KeptStagingBytes()) return t;
  const Clock::time_point a = Clock::now();
  std::unique_ptr<ThreadBinding> binding;
  Result<CpuPlan> cpus = PlanCpus(ring.cpu_bind, NodeRanks{{dev.Caps().pci_bus_id}, 0});
  if (cpus.ok()) binding = ThreadBinding::Bind(*cpus, ring.bind_numa);
  std::vector<transport::HostBuffer> slots(ring.slots);
  std::vector<Status> made(ring.slots);
  std::vector<std::thread> threads;  // started while bound: they inherit the binding
  for (int k = 0; k < ring.slots; ++k) {
    threads.emplace_back([&, k] {
      Result<transport::HostBuffer> b = dev.AllocateStaging(ring.slot_bytes, ring.kind);
      if (b.ok()) slots[k] = *b;
      made[k] = b.status();
    });
  }
  for (std::thread& th : threads) th.join();
  binding.reset();
  Status status;
  for (int k = 0; k < ring.slots; ++k) {
    Status s = made[k].ok() ? dev.FreeStaging(slots[k]) : made[k];  // frees into the kept pool
    if (status.ok() && !s.ok()) status = std::move(s);
  }
  const Clock::time_point z = Clock::now();
  if (!status.ok()) {
    spdlog::warn("{}: staging ring not made ahead (the load makes its own): {}", dev.Name(),
                 status.ToString());
    return t;
  }
  t.start_s = Seconds(origin, a);
  t.seconds = t.busy_s = Seconds(a, z);
  t.bytes = bytes;
  t.ran = true;
  return t;
}

Result<PreparedDevice> PrepareDevice(DeviceKind kind, int gpu, Clock::time_point origin,
                                     const StagingRing& ring) {
  const Clock::time_point start = Clock::now();
  PreparedDevice p;
  p.ordinal = ResolveOrdinal(kind, gpu < 0 ? 0 : gpu);
  HOIST_ASSIGN_OR_RETURN(p.device, OpenOrdinal(p.ordinal));
  p.start_s = Seconds(origin, start);
  p.seconds = Seconds(start, Clock::now());
  p.staging = MakeRingAhead(*p.device, ring, origin);
  return p;
}

Result<LoadedRank> LoadRank(const proto::LoadPlan& plan, std::uint32_t rank,
                            const LoadOptions& options) {
  auto out = std::make_unique<LoadedRank>();
  Status s = Load(plan, rank, options, out.get());
  if (!s.ok()) s = s.Annotate("rank " + std::to_string(rank));
  if (options.wiring.watch != nullptr) {
    // Tensors an engine bound while the bytes streamed stay valid memory after a failure.
    if (!s.ok() && out->device != nullptr && out->arena.ptr != nullptr) {
      options.wiring.watch->Orphan(std::move(out));
    }
    options.wiring.watch->Ended(s);
  }
  if (!s.ok()) return s;
  return std::move(*out);
}

}  // namespace hoist::rank
