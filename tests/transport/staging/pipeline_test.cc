// The staging pipeline on the host backend against a plain-pread reference: tiny slots so the
// ring wraps many times, copies larger than a slot, rows wider than a slot, strided 2-D gathers,
// fills, every read mode the machine supports, injected faults (clear error, no hang), and plan
// validation.
#include "transport/staging/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "tests/transport/synth.h"
#include "tests/transport/test_util.h"

namespace hoist::transport {
namespace {

using testtransport::MakeSynth;
using testtransport::Mapped;
using testtransport::Pattern;
using testtransport::Residence;
using testtransport::RunResult;
using testtransport::RunSynth;
using testtransport::ScratchDir;
using testtransport::Synth;
using testtransport::WithWatchdog;

PipelineOptions Tiny(ReadMode mode, std::uint64_t chunk = 1000) {
  PipelineOptions o;
  o.mode = mode;
  o.slots = 3;
  o.slot_bytes = 4096;
  o.threads = 3;
  o.chunk_bytes = chunk;
  return o;
}

bool DirectSupported(const std::string& path) {
  auto d = OpenDirectSource(path);
  return d.ok() || d.status().code() != Code::kUnsupported;
}

struct ModeCase {
  const char* name;
  ReadMode mode;
  Residence residence;
};

void PrintTo(const ModeCase& m, std::ostream* os) { *os << m.name; }

class PipelineModeTest : public ::testing::TestWithParam<ModeCase> {};

TEST_P(PipelineModeTest, MatchesPreadReferenceAcrossSlotShapes) {
  const ModeCase& mc = GetParam();
  Synth s = MakeSynth(42);
  if ((mc.mode == ReadMode::kDirect || mc.mode == ReadMode::kAuto) &&
      !DirectSupported(s.paths[0]) && mc.residence != Residence::kMeasured) {
    GTEST_SKIP() << "O_DIRECT unsupported on " << s.dir->path();
  }
  if (mc.mode == ReadMode::kDirect && !DirectSupported(s.paths[0])) {
    GTEST_SKIP() << "O_DIRECT unsupported on " << s.dir->path() << " (EINVAL)";
  }
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  struct Shape {
    int slots;
    std::uint64_t slot_bytes;
    int threads;
    std::uint64_t chunk;
  };
  const Shape shapes[] = {
      {3, 4096, 3, 1000}, {3, 4096, 3, 0}, {2, 65536, 2, 0}, {1, 4096, 1, 0}, {4, 5000, 4, 777}};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE("slots " + std::to_string(sh.slots) + " x " + std::to_string(sh.slot_bytes) +
                 ", threads " + std::to_string(sh.threads) + ", chunk " + std::to_string(sh.chunk));
    PipelineOptions o;
    o.mode = mc.mode;
    o.slots = sh.slots;
    o.slot_bytes = sh.slot_bytes;
    o.threads = sh.threads;
    o.chunk_bytes = sh.chunk;
    RunResult r = RunSynth(s, o, mc.residence);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    const std::int64_t bad = testtransport::FirstMismatch(ref, r.arena.data());
    ASSERT_EQ(bad, -1) << "first wrong arena byte " << bad;
    EXPECT_EQ(r.report.bytes_read, s.copy_bytes);
    EXPECT_EQ(r.report.bytes_h2d, s.copy_bytes);
    EXPECT_EQ(r.report.bytes_filled, 1000u + 1333u + 1666u);
    if (mc.mode != ReadMode::kPageable && mc.mode != ReadMode::kRegistered) {
      EXPECT_EQ(r.report.slot_seqs, (s.copy_bytes + sh.slot_bytes - 1) / sh.slot_bytes)
          << "slots are packed full";
      EXPECT_TRUE(r.report.staging_alloc.ran);
      EXPECT_EQ(r.report.staging_free.bytes,
                static_cast<std::uint64_t>(r.report.slots) * sh.slot_bytes);
    }
    if (mc.mode == ReadMode::kAuto && mc.residence == Residence::kAllCold) {
      EXPECT_EQ(r.report.bytes_cold, s.copy_bytes);
    }
    if (mc.mode == ReadMode::kAuto && mc.residence == Residence::kHalf) {
      EXPECT_GT(r.report.bytes_cold, 0u);
      EXPECT_LT(r.report.bytes_cold, s.copy_bytes);
    }
    EXPECT_TRUE(r.report.read.ran);
    EXPECT_TRUE(r.report.h2d.ran);
    EXPECT_EQ(r.report.h2d.bytes, s.copy_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, PipelineModeTest,
    ::testing::Values(ModeCase{"buffered", ReadMode::kBuffered, Residence::kMeasured},
                      ModeCase{"mmap", ReadMode::kMmap, Residence::kMeasured},
                      ModeCase{"direct", ReadMode::kDirect, Residence::kMeasured},
                      ModeCase{"auto_measured", ReadMode::kAuto, Residence::kMeasured},
                      ModeCase{"auto_all_cold", ReadMode::kAuto, Residence::kAllCold},
                      ModeCase{"auto_half_cold", ReadMode::kAuto, Residence::kHalf},
                      ModeCase{"pageable", ReadMode::kPageable, Residence::kMeasured},
                      ModeCase{"registered", ReadMode::kRegistered, Residence::kMeasured}),
    [](const auto& info) { return std::string(info.param.name); });

// Auto mode asking per chunk (no precomputed residency): a load whose files are all out of the
// page cache reads every byte through O_DIRECT and never maps a file; once the files are back in
// the cache, the same load reads them through the mapping. Both match the pread reference.
TEST(PipelineTest, AutoMapsAFileOnlyWhenItFindsPiecesResident) {
  Synth s = MakeSynth(7);
  if (!DirectSupported(s.paths[0])) GTEST_SKIP() << "O_DIRECT unsupported here";
  {
    auto probe = OpenDirectSource(s.paths[0]);
    ASSERT_TRUE(probe.ok());
    if (!(*probe)->ResidentNow(RowsRead{0, 0, 1, 1}).has_value()) {
      GTEST_SKIP() << "no cachestat(2) on this kernel: auto asks the mapping";
    }
  }
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  auto run = [&](std::uint64_t want_cold) {
    std::unique_ptr<Device> dev = OpenHostDevice();
    auto arena = dev->Allocate(s.rp().arena_bytes());
    ASSERT_TRUE(arena.ok());
    auto sources = OpenSources(s.paths, std::vector<bool>(s.paths.size(), true), ReadMode::kAuto);
    ASSERT_TRUE(sources.ok()) << sources.status().ToString();
    PipelineReport rep;
    Status st = WithWatchdog([&] {
      return RunPipeline(*dev, *arena, s.rp(), sources->files, Tiny(ReadMode::kAuto), &rep);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (const std::string& p : s.paths) EXPECT_EQ(Mapped(p), want_cold == 0) << p;
    EXPECT_EQ(rep.bytes_cold, want_cold);
    std::vector<std::uint8_t> got(s.rp().arena_bytes());
    ASSERT_TRUE(dev->CopyToHost(got.data(), arena->ptr, got.size()).ok());
    EXPECT_EQ(testtransport::FirstMismatch(ref, got.data()), -1);
    ASSERT_TRUE(dev->Free(*arena).ok());
  };
  for (const std::string& p : s.paths) {
    if (!testtransport::Evict(p, 0, 0)) GTEST_SKIP() << "no fadvise";
    auto r = Residency::Measure(p);
    ASSERT_TRUE(r.ok());
    if (r->TotalResident() != 0) GTEST_SKIP() << "this filesystem keeps pages after DONTNEED";
  }
  {
    SCOPED_TRACE("cold");
    run(s.copy_bytes);
  }
  for (const std::string& p : s.paths) testtransport::Warm(p);
  SCOPED_TRACE("hot");
  run(0);
}

// A load read wholly through O_DIRECT widens its ring to the read depth, a fill thread and one
// whole-slot read per slot; a depth of 0, a mapped mode and a hot auto load keep the ring as
// given. Every shape loads the pread reference's bytes.
TEST(PipelineTest, AWhollyColdLoadWidensItsRingToTheReadDepth) {
  Synth s = MakeSynth(11);
  if (!DirectSupported(s.paths[0])) GTEST_SKIP() << "O_DIRECT unsupported here";
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  const std::uint64_t seqs = (s.copy_bytes + 4095) / 4096;
  ASSERT_GT(seqs, 16u);
  auto run = [&](ReadMode mode, std::uint64_t depth, bool deep) {
    SCOPED_TRACE(std::string(ReadModeName(mode)) + ", depth " + std::to_string(depth));
    PipelineOptions o = Tiny(mode, 0);
    o.threads = 2;
    o.cores = 1;  // the ring as given runs one thread per core; the deep ring one per slot
    o.read_depth_bytes = depth;
    std::unique_ptr<Device> dev = OpenHostDevice();
    auto arena = dev->Allocate(s.rp().arena_bytes());
    ASSERT_TRUE(arena.ok());
    auto sources = OpenSources(s.paths, std::vector<bool>(s.paths.size(), true), mode);
    ASSERT_TRUE(sources.ok()) << sources.status().ToString();
    PipelineReport rep;
    Status st =
        WithWatchdog([&] { return RunPipeline(*dev, *arena, s.rp(), sources->files, o, &rep); });
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<std::uint8_t> got(s.rp().arena_bytes());
    ASSERT_TRUE(dev->CopyToHost(got.data(), arena->ptr, got.size()).ok());
    EXPECT_EQ(testtransport::FirstMismatch(ref, got.data()), -1);
    EXPECT_EQ(rep.deep, deep);
    EXPECT_EQ(rep.slots, deep ? 16 : 3);
    EXPECT_EQ(rep.threads, deep ? 16 : 1);
    EXPECT_EQ(rep.chunk_bytes, 4096u);  // a whole slot (deep), or the 64 KiB floor capped by it
    EXPECT_EQ(rep.staging_free.bytes, static_cast<std::uint64_t>(rep.slots) * 4096u);
    ASSERT_TRUE(dev->Free(*arena).ok());
  };
  run(ReadMode::kDirect, 16 * 4096, true);
  run(ReadMode::kDirect, 16 * 4096 + 4095, true);  // whole slots only
  run(ReadMode::kDirect, 0, false);
  run(ReadMode::kDirect, 3 * 4096, false);  // the ring is that deep already
  run(ReadMode::kMmap, 16 * 4096, false);
  {
    auto probe = OpenDirectSource(s.paths[0]);
    ASSERT_TRUE(probe.ok());
    if (!(*probe)->ResidentNow(RowsRead{0, 0, 1, 1}).has_value()) {
      GTEST_SKIP() << "no cachestat(2) on this kernel: auto cannot judge whole files";
    }
  }
  for (const std::string& p : s.paths) {
    if (!testtransport::Evict(p, 0, 0)) GTEST_SKIP() << "no fadvise";
    auto r = Residency::Measure(p);
    ASSERT_TRUE(r.ok());
    if (r->TotalResident() != 0) GTEST_SKIP() << "this filesystem keeps pages after DONTNEED";
  }
  run(ReadMode::kAuto, 16 * 4096, true);  // O_DIRECT reads leave the files uncached
  for (const std::string& p : s.paths) testtransport::Warm(p);
  run(ReadMode::kAuto, 16 * 4096, false);
}

// A source whose page-cache answers come from a script (the reads are the real file's), counting
// the ranges it is asked about: auto's judgement of whole files, seen from the source.
class ScriptedResidency final : public Source {
 public:
  ScriptedResidency(std::unique_ptr<Source> inner, std::uint64_t hole_lo, std::uint64_t hole_hi)
      : inner_(std::move(inner)), hole_lo_(hole_lo), hole_hi_(hole_hi) {}
  const std::string& path() const override { return inner_->path(); }
  std::uint64_t size() const override { return inner_->size(); }
  std::string_view kind() const override { return inner_->kind(); }
  Status ReadAt(std::uint64_t offset, void* dst, std::uint64_t n) override {
    return inner_->ReadAt(offset, dst, n);
  }
  // Every byte outside [hole_lo, hole_hi) is resident; a strided block counts its extent.
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    const std::uint64_t lo = b.offset, hi = b.offset + (b.rows - 1) * b.src_pitch + b.width;
    asked.push_back(hi - lo);
    const std::uint64_t overlap = std::max(hole_lo_, lo) < std::min(hole_hi_, hi)
                                      ? std::min(hole_hi_, hi) - std::max(hole_lo_, lo)
                                      : 0;
    return hi - lo - overlap;
  }
  mutable std::vector<std::uint64_t> asked;  // the extent of every question, in order

 private:
  std::unique_ptr<Source> inner_;
  std::uint64_t hole_lo_, hole_hi_;
};

// Auto judges a large extent by 64 windows of 1 MiB first: all resident, the file is read
// through its mapping without asking the whole extent, even with a hole between windows; a window
// short, the whole extent is asked (here: under 1% resident, so it is read cold); a small extent is
// asked whole at once. Each run loads the pread reference's bytes (two 64 KiB copies 700 MiB apart
// in a sparse file).
TEST(PipelineTest, AutoSamplesALargeExtentBeforeAskingAllOfIt) {
  ScratchDir dir;
  const std::string path = dir.Sub("sparse.bin");
  const std::uint64_t far = 700ull << 20, n = 64u << 10;
  {
    testtransport::WriteFile(path, Pattern(n, 3));
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    const std::vector<std::uint8_t> tail = Pattern(n, 4);
    ASSERT_EQ(::fseeko(f, static_cast<off_t>(far), SEEK_SET), 0);
    ASSERT_EQ(std::fwrite(tail.data(), 1, n, f), n);
    std::fclose(f);
  }
  proto::LoadPlan plan;
  *plan.add_files() = testtransport::StatFile(path);
  proto::RankPlan& rp = *plan.add_ranks();
  for (std::uint64_t at : {std::uint64_t{0}, far}) {
    proto::Copy* c = rp.add_copies();
    c->set_file(0);
    c->set_src_offset(at);
    c->set_dst_offset(at == 0 ? 0 : n);
    c->set_width(n);
    c->set_rows(1);
    c->set_src_pitch(n);
    c->set_dst_pitch(n);
  }
  rp.set_arena_bytes(2 * n);
  auto run = [&](const proto::RankPlan& plan_run, std::uint64_t hole_lo, std::uint64_t hole_hi,
                 std::uint64_t want_cold, std::vector<std::uint64_t>* asked) {
    asked->clear();
    auto primary = OpenMmapSource(path);
    auto cold = OpenBufferedSource(path);
    ASSERT_TRUE(primary.ok() && cold.ok());
    ScriptedResidency scripted(std::move(*cold), hole_lo, hole_hi);
    std::vector<FileSources> files(1);
    files[0].primary = primary->get();
    files[0].cold = &scripted;
    std::unique_ptr<Device> dev = OpenHostDevice();
    auto arena = dev->Allocate(plan_run.arena_bytes());
    ASSERT_TRUE(arena.ok());
    PipelineReport rep;
    PipelineOptions o = Tiny(ReadMode::kAuto, 4096);
    o.read_depth_bytes = 0;
    Status st = WithWatchdog([&] { return RunPipeline(*dev, *arena, plan_run, files, o, &rep); });
    *asked = scripted.asked;
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<std::uint8_t> got(plan_run.arena_bytes());
    ASSERT_TRUE(dev->CopyToHost(got.data(), arena->ptr, got.size()).ok());
    EXPECT_EQ(
        testtransport::FirstMismatch(testtransport::ReferenceArena(plan, plan_run), got.data()),
        -1);
    EXPECT_EQ(rep.bytes_cold, want_cold);
    ASSERT_TRUE(dev->Free(*arena).ok());
  };
  const std::uint64_t extent = far + n;
  std::vector<std::uint64_t> asked;
  {
    SCOPED_TRACE("every window resident, a hole between them");
    const std::uint64_t gap = (extent - (1u << 20)) / 63;  // windows start gap bytes apart
    run(rp, 10 * gap + (2u << 20), 11 * gap - (1u << 20), 0, &asked);
    EXPECT_EQ(asked, std::vector<std::uint64_t>(64, 1u << 20));
  }
  {
    SCOPED_TRACE("the first window short: the whole extent asked, under 1% resident: cold");
    run(rp, 4096, extent, 2 * n, &asked);
    EXPECT_EQ(asked, (std::vector<std::uint64_t>{1u << 20, extent}));
  }
  proto::RankPlan near = rp;
  near.mutable_copies()->RemoveLast();
  near.set_arena_bytes(n);
  SCOPED_TRACE("a small extent: asked whole, once");
  run(near, 0, 0, 0, &asked);
  EXPECT_EQ(asked, std::vector<std::uint64_t>{n});
}

// A load smaller than a slot, on a device that keeps no staging, makes a slot of its own bytes
// rounded up to 64 KiB; a device keeping a ring uses the slots as given. Both load the bytes.
TEST(PipelineTest, ALoadSmallerThanASlotMakesASlotItsSize) {
  Synth s = MakeSynth(5, 0);
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  const std::uint64_t rounded = (s.copy_bytes + (64u << 10) - 1) / (64u << 10) * (64u << 10);
  ASSERT_LT(rounded, 16u << 20);
  for (std::uint64_t kept : {std::uint64_t{0}, std::uint64_t{32} << 20}) {
    SCOPED_TRACE("kept staging " + std::to_string(kept));
    std::unique_ptr<Device> dev = OpenHostDevice(kept);
    PipelineOptions o = Tiny(ReadMode::kBuffered, 0);
    o.slots = 2;
    o.slot_bytes = 16u << 20;
    RunResult r = RunSynth(s, o, Residence::kMeasured, nullptr, dev.get());
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
    EXPECT_EQ(r.report.slot_bytes, kept == 0 ? rounded : o.slot_bytes);
    EXPECT_EQ(r.report.slots, 1) << "one sequence of slots";
  }
}

TEST(PipelineTest, RandomPlansAcrossSeeds) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Synth s = MakeSynth(seed, 60);
    const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
    PipelineOptions o = Tiny(seed % 2 ? ReadMode::kMmap : ReadMode::kBuffered, 200 + seed * 300);
    o.slots = 2 + static_cast<int>(seed % 3);
    o.slot_bytes = 3000 + seed * 997;
    o.threads = 1 + static_cast<int>(seed % 4);
    RunResult r = RunSynth(s, o);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
  }
}

// Fill threads beyond the cores (options.cores) are not run: the same bytes in every staged mode
// with as many threads as cores, the report says how many were asked (a wholly cold load's deep
// ring still runs a thread per slot: AWhollyColdLoadWidensItsRingToTheReadDepth).
TEST(PipelineTest, ThreadsBeyondTheCoresAreNotRun) {
  const struct {
    ReadMode mode;
    Residence residence;
  } kModes[] = {{ReadMode::kBuffered, Residence::kMeasured},
                {ReadMode::kMmap, Residence::kMeasured},
                {ReadMode::kAuto, Residence::kMeasured},
                {ReadMode::kAuto, Residence::kHalf},
                {ReadMode::kPageable, Residence::kMeasured}};
  for (std::uint64_t seed = 21; seed <= 23; ++seed) {
    Synth s = MakeSynth(seed, 80);
    const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
    for (const auto& m : kModes) {
      for (int cores : {1, 2, 3, 8}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + ", mode " +
                     std::to_string(static_cast<int>(m.mode)) + ", cores " + std::to_string(cores));
        PipelineOptions o = Tiny(m.mode, 500);
        o.threads = 6;
        o.cores = cores;
        RunResult r = RunSynth(s, o, m.residence);
        ASSERT_TRUE(r.status.ok()) << r.status.ToString();
        ASSERT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
        EXPECT_EQ(r.report.threads, std::min(6, cores));
        EXPECT_EQ(r.report.threads_asked, cores < 6 ? 6 : 0);
      }
    }
  }
}

TEST(PipelineTest, EagerStagingAndMallocHostKindWork) {
  Synth s = MakeSynth(5);
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  PipelineOptions o = Tiny(ReadMode::kMmap);
  o.lazy_staging = false;
  o.staging = StagingKind::kMallocHost;
  RunResult r = RunSynth(s, o);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
  EXPECT_EQ(r.report.staging_alloc.bytes, 3u * 4096u);
}

// Every read, every slot's copies and every slot's submit is a span on its lane (fill-T, h2d-0,
// submit), each lane's bytes the load's; a small max_spans coalesces them per lane and keeps
// every byte.
TEST(PipelineTest, SpansHaveLanesAndAreCapped) {
  Synth s = MakeSynth(6);
  PipelineOptions o = Tiny(ReadMode::kMmap, 500);
  RunResult r = RunSynth(s, o);
  ASSERT_TRUE(r.status.ok());
  std::set<std::string> lanes;
  std::uint64_t fill_bytes = 0, h2d_bytes = 0, submit_bytes = 0, submits = 0;
  for (const auto& sp : r.report.spans.Named()) {
    lanes.insert(sp.lane);
    EXPECT_GE(sp.seconds, 0.0);
    if (sp.lane.rfind("fill-", 0) == 0) fill_bytes += sp.bytes;
    if (sp.lane == "h2d-0") h2d_bytes += sp.bytes;
    if (sp.lane == "submit") submit_bytes += sp.bytes, ++submits;
  }
  EXPECT_TRUE(lanes.count("h2d-0"));
  EXPECT_GE(lanes.size(), 3u) << "at least one fill lane";  // a thread may get no task at all
  for (const auto& l : lanes) {
    EXPECT_TRUE(l == "h2d-0" || l == "setup" || l == "teardown" || l == "submit" ||
                l.rfind("fill-", 0) == 0)
        << l;
  }
  EXPECT_EQ(fill_bytes, s.copy_bytes);
  EXPECT_EQ(h2d_bytes, s.copy_bytes);
  EXPECT_EQ(submit_bytes, s.copy_bytes);
  EXPECT_EQ(submits, r.report.slot_seqs);
  const std::size_t uncapped = r.report.spans.size();
  EXPECT_GT(uncapped, 60u);

  o.max_spans = 20;
  RunResult capped = RunSynth(s, o);
  ASSERT_TRUE(capped.status.ok());
  std::size_t set_up = 0;  // the set-up's steps, never coalesced
  for (const auto& sp : capped.report.spans.Named())
    set_up += sp.lane == "setup" || sp.lane == "teardown";
  EXPECT_LE(capped.report.spans.size() - set_up, 20u + 5u);  // one partial group per lane at most
  std::uint64_t total = 0;
  for (const auto& sp : capped.report.spans.Named()) total += sp.bytes;
  EXPECT_EQ(total, 3 * s.copy_bytes) << "coalescing keeps every byte";
}

// The set-up's steps are spans on the "setup" lane, inside the setup phase: auto judges the
// files' residency first; every mode cuts the slots and starts the copy stream. The tear-down is
// one span on lane "teardown", after the staging is freed.
TEST(PipelineTest, SetUpStepsAreSpansInsideTheSetupPhase) {
  for (ReadMode mode : {ReadMode::kAuto, ReadMode::kMmap}) {
    SCOPED_TRACE(ReadModeName(mode));
    Synth s = MakeSynth(11);
    RunResult r = RunSynth(s, Tiny(mode));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    const PhaseTiming& setup = r.report.setup;
    std::vector<std::string> steps;
    double sum = 0;
    for (const auto& sp : r.report.spans.Named()) {
      if (sp.lane != "setup") continue;
      steps.push_back(sp.what);
      sum += sp.seconds;
      EXPECT_GE(sp.start_s, setup.start_s - 1e-6) << sp.what;
      EXPECT_LE(sp.start_s + sp.seconds, setup.start_s + setup.seconds + 1e-6) << sp.what;
    }
    std::vector<std::string> want = {"slot cut", "copy stream started"};
    if (mode == ReadMode::kAuto) want.insert(want.begin(), "residency judged");
    EXPECT_EQ(steps, want);
    EXPECT_LE(sum, setup.seconds + 1e-6);
    int teardowns = 0;  // and the tear-down, one span after the staging is freed
    for (const auto& sp : r.report.spans.Named()) {
      if (sp.lane != "teardown") continue;
      ++teardowns;
      EXPECT_GE(sp.start_s, r.report.staging_free.start_s - 1e-6);
      EXPECT_GE(sp.seconds, 0);
    }
    EXPECT_EQ(teardowns, 1);
  }
}

// A plain plan's cut made ahead (CutPlanAhead, while the device opens) is taken by a run of its
// geometry, and a run of another slot size cuts again; both load the reference bytes.
TEST(PipelineTest, APlanCutMadeAheadIsTakenOnlyByARunOfItsGeometry) {
  Synth s = MakeSynth(14);
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  const PipelineOptions o = Tiny(ReadMode::kBuffered);
  for (std::uint64_t made_for : {o.slot_bytes, o.slot_bytes * 2}) {
    SCOPED_TRACE(made_for);
    PipelineOptions ahead_options = o;
    ahead_options.slot_bytes = made_for;
    CutAhead ahead = CutPlanAhead(s.rp(), ahead_options);
    const std::uint64_t ahead_seqs = ahead.cut.seqs();
    ASSERT_GT(ahead_seqs, 0u);
    PipelineOptions run_options = o;
    run_options.cut_ahead = &ahead;
    RunResult r = RunSynth(s, run_options);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
    std::set<std::string> steps;
    for (const auto& sp : r.report.spans.Named()) {
      if (sp.lane == "setup") steps.insert(sp.what);
    }
    if (made_for == o.slot_bytes) {
      EXPECT_EQ(r.report.slot_seqs, ahead_seqs);
      EXPECT_EQ(ahead.cut.seqs(), 0u) << "the run took the cut made ahead";
      EXPECT_TRUE(steps.count("slot cut made ahead, taken"));
    } else {
      EXPECT_EQ(ahead.cut.seqs(), ahead_seqs) << "a cut of another geometry is left alone";
      EXPECT_TRUE(steps.count("slot cut made again (the ahead one does not fit)"));
    }
  }
}

// PipelineOptions::arena_ready: the arena is made by another thread while the run sets up; the
// run waits for it once, after the set-up, and writes the right bytes into it.
TEST(PipelineTest, AnArenaMadeBesideTheSetUpIsWaitedForOnce) {
  Synth s = MakeSynth(12);
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  std::unique_ptr<Device> dev = OpenHostDevice();
  std::vector<bool> used(s.paths.size(), true);
  auto sources = OpenSources(s.paths, used, ReadMode::kAuto);
  ASSERT_TRUE(sources.ok()) << sources.status().ToString();
  std::future<Result<DeviceBuffer>> making = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return dev->Allocate(s.rp().arena_bytes());
  });
  DeviceBuffer arena;  // null until arena_ready
  PipelineOptions o = Tiny(ReadMode::kAuto);
  int calls = 0;
  std::chrono::steady_clock::time_point called;
  o.arena_ready = [&]() -> Status {
    ++calls;
    called = std::chrono::steady_clock::now();
    HOIST_ASSIGN_OR_RETURN(arena, making.get());
    return Status::Ok();
  };
  PipelineReport rep;
  const Status st =
      WithWatchdog([&] { return RunPipeline(*dev, arena, s.rp(), sources->files, o, &rep); });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(calls, 1);
  EXPECT_GE(std::chrono::duration<double>(called - o.origin).count(),
            rep.setup.start_s + rep.setup.seconds - 1e-6)
      << "asked for the arena before the set-up ended";
  ASSERT_NE(arena.ptr, nullptr);
  std::vector<std::uint8_t> got(s.rp().arena_bytes());
  ASSERT_TRUE(dev->CopyToHost(got.data(), arena.ptr, got.size()).ok());
  EXPECT_EQ(testtransport::FirstMismatch(ref, got.data()), -1);
  EXPECT_EQ(rep.bytes_h2d, s.copy_bytes);
  ASSERT_TRUE(dev->Free(arena).ok());
}

// An arena that could not be made stops the run with that error before anything is read or
// written (the null arena would fault if anything were).
TEST(PipelineTest, AnArenaThatFailsStopsTheRunBeforeAnyRead) {
  Synth s = MakeSynth(13);
  std::unique_ptr<Device> dev = OpenHostDevice();
  std::vector<bool> used(s.paths.size(), true);
  auto sources = OpenSources(s.paths, used, ReadMode::kBuffered);
  ASSERT_TRUE(sources.ok()) << sources.status().ToString();
  DeviceBuffer arena;
  PipelineOptions o = Tiny(ReadMode::kBuffered);
  o.arena_ready = [] { return Status::ResourceExhausted("test: no arena for you"); };
  PipelineReport rep;
  const Status st =
      WithWatchdog([&] { return RunPipeline(*dev, arena, s.rp(), sources->files, o, &rep); });
  EXPECT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_NE(st.message().find("no arena for you"), std::string::npos) << st.ToString();
  EXPECT_EQ(rep.bytes_read, 0u);
  EXPECT_EQ(rep.bytes_h2d, 0u);
  EXPECT_EQ(rep.bytes_filled, 0u);
}

TEST(PipelineTest, EmptyPlanOnlyFills) {
  Synth s = MakeSynth(7, 0);
  s.rp().clear_copies();
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  RunResult r = RunSynth(s, Tiny(ReadMode::kBuffered));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
  EXPECT_EQ(r.report.bytes_read, 0u);
}

// ----- faults ----------------------------------------------------------------------------------

void ExpectNamedIoError(const RunResult& r, const Synth& s, const std::string& what) {
  ASSERT_FALSE(r.status.ok()) << what;
  EXPECT_EQ(r.status.code(), Code::kIoError) << r.status.ToString();
  bool names_file = false;
  for (const auto& p : s.paths) names_file |= r.status.message().find(p) != std::string::npos;
  EXPECT_TRUE(names_file) << r.status.ToString();
  EXPECT_NE(r.status.message().find("offset"), std::string::npos) << r.status.ToString();
  EXPECT_NE(r.status.message().find(what), std::string::npos) << r.status.ToString();
}

TEST(PipelineFaultTest, EioAfterNReadsStopsEveryThreadWithANamedError) {
  Synth s = MakeSynth(8);
  for (std::int64_t n : {0, 1, 7, 40, 90}) {
    SCOPED_TRACE("eio after " + std::to_string(n));
    for (ReadMode mode : {ReadMode::kBuffered, ReadMode::kMmap}) {
      FaultSpec spec;
      spec.eio_after = n;
      RunResult r =
          RunSynth(s, Tiny(mode), Residence::kMeasured,
                   [spec](std::unique_ptr<Source> in) { return WrapFaulty(std::move(in), spec); });
      ExpectNamedIoError(r, s, "Input/output error");
    }
  }
}

TEST(PipelineFaultTest, ShortReadIsAnErrorNotSilentGarbage) {
  Synth s = MakeSynth(9);
  for (std::int64_t n : {0, 5, 33}) {
    FaultSpec spec;
    spec.short_read_after = n;
    spec.delay_us = 50;
    RunResult r =
        RunSynth(s, Tiny(ReadMode::kBuffered), Residence::kMeasured,
                 [spec](std::unique_ptr<Source> in) { return WrapFaulty(std::move(in), spec); });
    ExpectNamedIoError(r, s, "short read");
  }
}

TEST(PipelineFaultTest, FaultOnTheColdPathOfAuto) {
  Synth s = MakeSynth(10);
  FaultSpec spec;
  spec.eio_after = 3;
  // Only the cold (second opened per file) source is faulty.
  auto wrap = [spec, n = std::make_shared<int>(0)](std::unique_ptr<Source> in) {
    return (*n)++ % 2 == 1 ? WrapFaulty(std::move(in), spec) : std::move(in);
  };
  RunResult r = RunSynth(s, Tiny(ReadMode::kAuto), Residence::kAllCold, wrap);
  ExpectNamedIoError(r, s, "Input/output error");
}

TEST(PipelineFaultTest, ManyThreadsWaitingOnSlotsAreReleased) {
  // One slot, eight threads: most threads wait on the slot when the fault hits.
  Synth s = MakeSynth(11, 100);
  FaultSpec spec;
  spec.eio_after = 20;
  spec.delay_us = 100;
  PipelineOptions o = Tiny(ReadMode::kBuffered, 300);
  o.slots = 1;
  o.threads = 8;
  RunResult r = RunSynth(s, o, Residence::kMeasured, [spec](std::unique_ptr<Source> in) {
    return WrapFaulty(std::move(in), spec);
  });
  ExpectNamedIoError(r, s, "Input/output error");
}

// ----- validation ------------------------------------------------------------------------------

TEST(ValidateRankPlanTest, RejectsCopiesAndFillsOutOfBounds) {
  Synth s = MakeSynth(12, 0);
  std::vector<std::uint64_t> sizes;
  for (const auto& f : s.plan.files()) sizes.push_back(f.size());
  const std::uint64_t arena = s.rp().arena_bytes();
  ASSERT_TRUE(ValidateRankPlan(s.rp(), sizes, s.paths, arena).ok());

  proto::RankPlan past_file = s.rp();
  past_file.mutable_copies(0)->set_src_offset(sizes[0] - 10);
  Status st = ValidateRankPlan(past_file, sizes, s.paths, arena);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kCorrupt);
  EXPECT_NE(st.message().find(s.paths[0]), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(std::to_string(sizes[0] - 10)), std::string::npos);

  proto::RankPlan past_arena = s.rp();
  past_arena.mutable_copies(1)->set_dst_offset(arena - 5);
  EXPECT_FALSE(ValidateRankPlan(past_arena, sizes, s.paths, arena).ok());

  proto::RankPlan overflow = s.rp();
  overflow.mutable_copies(1)->set_src_pitch(~0ull / 2);
  EXPECT_FALSE(ValidateRankPlan(overflow, sizes, s.paths, arena).ok());

  proto::RankPlan bad_file = s.rp();
  bad_file.mutable_copies(0)->set_file(7);
  EXPECT_FALSE(ValidateRankPlan(bad_file, sizes, s.paths, arena).ok());

  proto::RankPlan overlap = s.rp();
  overlap.mutable_copies(1)->set_dst_pitch(10);  // width 300
  EXPECT_FALSE(ValidateRankPlan(overlap, sizes, s.paths, arena).ok());

  proto::RankPlan fill = s.rp();
  fill.mutable_fills(0)->set_dst_offset(arena);
  EXPECT_FALSE(ValidateRankPlan(fill, sizes, s.paths, arena).ok());
  proto::RankPlan value = s.rp();
  value.mutable_fills(0)->set_value(256);
  EXPECT_FALSE(ValidateRankPlan(value, sizes, s.paths, arena).ok());
}

TEST(PipelineTest, MappedModesRefuseUnmappedSources) {
  Synth s = MakeSynth(13, 0);
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(s.rp().arena_bytes());
  ASSERT_TRUE(arena.ok());
  auto sources = OpenSources(s.paths, {}, ReadMode::kBuffered);
  ASSERT_TRUE(sources.ok());
  PipelineOptions o = Tiny(ReadMode::kPageable);
  Status st = RunPipeline(*dev, *arena, s.rp(), sources->files, o, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace hoist::transport
