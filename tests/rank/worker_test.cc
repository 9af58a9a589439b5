// LoadRank on the host device: a hand-made two-rank plan over synthetic files, loaded through the
// real pipeline with tiny slots and several threads, compared with a plain-pread reference; file
// changed since planning; verify (passes, and catches a corrupted byte naming tensor and offset);
// dump round-trips through a safetensors reader written here; faults surface with rank, file and
// offset and never hang; the report carries phases, bytes and spans.
#include "rank/worker.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "rank/verify.h"
#include "tests/transport/test_util.h"
#include "transport/staging/pipeline.h"

namespace hoist::rank {
namespace {

using testtransport::Pattern;
using testtransport::ScratchDir;
using testtransport::WithWatchdog;

constexpr std::uint64_t kRows = 48, kCols = 600;  // a [48, 600] U8 "weight" in file 0

// Two files. Rank r of 2 gets:
//   w.col   rows [r*24, (r+1)*24) of file 0's weight       (contiguous, one 1-D copy)
//   w.row   columns [r*300, (r+1)*300) of the same weight   (strided: one 2-D copy)
//   bias    all of file 1's first 5000 bytes                (replicated, larger than a slot)
//   embed   rows of file 1 then zero-filled padding rows    (copy + fill)
struct Fixture {
  std::unique_ptr<ScratchDir> dir = std::make_unique<ScratchDir>();
  proto::LoadPlan plan;
  std::vector<std::string> paths;
};

Fixture MakeFixture() {
  Fixture fx;
  const std::uint64_t w_start = 128;  // pretend header bytes
  std::vector<std::uint8_t> f0 = Pattern(w_start + kRows * kCols + 77, 100);
  std::vector<std::uint8_t> f1 = Pattern(20011, 101);
  fx.paths = {fx.dir->Sub("model-00001-of-00002.safetensors"),
              fx.dir->Sub("model-00002-of-00002.safetensors")};
  testtransport::WriteFile(fx.paths[0], f0);
  testtransport::WriteFile(fx.paths[1], f1);
  for (const auto& p : fx.paths) *fx.plan.add_files() = testtransport::StatFile(p);
  fx.plan.set_alignment(256);
  for (std::uint32_t r = 0; r < 2; ++r) {
    proto::RankPlan* rp = fx.plan.add_ranks();
    rp->set_rank(r);
    rp->set_tp_rank(r);
    std::uint64_t cursor = 0;
    auto tensor = [&](const std::string& name, std::vector<std::uint64_t> shape) {
      proto::TensorOut* t = rp->add_tensors();
      t->set_name(name);
      t->set_dtype("U8");
      std::uint64_t n = 1;
      for (auto d : shape) {
        t->add_shape(d);
        n *= d;
      }
      t->set_bytes(n);
      t->set_arena_offset(cursor);
      cursor = (cursor + n + 255) / 256 * 256;
      rp->set_payload_bytes(rp->payload_bytes() + n);
      return t->arena_offset();
    };
    auto copy = [&](std::uint32_t file, std::uint64_t src, std::uint64_t sp, std::uint64_t dst,
                    std::uint64_t dp, std::uint64_t width, std::uint64_t rows) {
      proto::Copy* c = rp->add_copies();
      c->set_file(file);
      c->set_src_offset(src);
      c->set_src_pitch(sp);
      c->set_dst_offset(dst);
      c->set_dst_pitch(dp);
      c->set_width(width);
      c->set_rows(rows);
    };
    const std::uint64_t col = tensor("w.col", {kRows / 2, kCols});
    const std::uint64_t row = tensor("w.row", {kRows, kCols / 2});
    const std::uint64_t bias = tensor("bias", {5000});
    const std::uint64_t embed = tensor("embed", {16, 100});
    copy(0, w_start + r * (kRows / 2) * kCols, 0, col, 0, (kRows / 2) * kCols, 1);
    copy(0, w_start + r * (kCols / 2), kCols, row, kCols / 2, kCols / 2, kRows);
    copy(1, 0, 0, bias, 0, 5000, 1);
    copy(1, 6000 + r * 1000, 0, embed, 0, 1000, 1);  // 10 real rows of 100
    proto::Fill* f = rp->add_fills();
    f->set_dst_offset(embed + 1000);
    f->set_bytes(600);  // 6 padding rows
    f->set_value(0);
    rp->set_arena_bytes(cursor);
  }
  return fx;
}

LoadOptions Small(transport::ReadMode mode) {
  LoadOptions o;
  o.settings.pipeline.mode = mode;
  o.settings.device = DeviceKind::kHost;
  o.settings.pipeline.slots = 3;
  o.settings.pipeline.slot_bytes = 4096;
  o.settings.pipeline.threads = 3;
  o.settings.pipeline.chunk_bytes = 1500;
  return o;
}

std::vector<std::uint8_t> ArenaBytes(LoadedRank& lr) {
  std::vector<std::uint8_t> out(lr.arena.bytes);
  EXPECT_TRUE(lr.device->CopyToHost(out.data(), lr.arena.ptr, out.size()).ok());
  return out;
}

std::map<std::string, const proto::Phase*> Phases(const proto::RankReport& r) {
  std::map<std::string, const proto::Phase*> m;
  for (const auto& p : r.phases()) m[p.name()] = &p;
  return m;
}

class LoadRankModeTest : public ::testing::TestWithParam<transport::ReadMode> {};

TEST_P(LoadRankModeTest, EveryRankMatchesThePreadReference) {
  Fixture fx = MakeFixture();
  for (std::uint32_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    LoadOptions o = Small(GetParam());
    Result<LoadedRank> lr = WithWatchdog([&] { return LoadRank(fx.plan, r, o); });
    if (!lr.ok() && GetParam() == transport::ReadMode::kDirect &&
        lr.status().code() == Code::kUnsupported) {
      GTEST_SKIP() << lr.status().ToString();
    }
    ASSERT_TRUE(lr.ok()) << lr.status().ToString();
    const auto ref = testtransport::ReferenceArena(fx.plan, fx.plan.ranks(r));
    const auto got = ArenaBytes(*lr);
    ASSERT_EQ(testtransport::FirstMismatch(ref, got.data()), -1);

    const proto::RankReport& rep = lr->report;
    EXPECT_EQ(rep.rank(), r);
    EXPECT_EQ(rep.device(), "host");
    EXPECT_EQ(rep.read_mode(), transport::ReadModeName(GetParam()));
    const std::uint64_t want = (kRows / 2) * kCols + kRows * (kCols / 2) + 5000 + 1000;
    EXPECT_EQ(rep.bytes_read(), want);
    EXPECT_EQ(rep.bytes_h2d(), want);
    EXPECT_LE(rep.bytes_resident_at_start(), want);
    auto ph = Phases(rep);
    for (const char* name : {"prepare", "bind", "arena_alloc", "residency", "setup",
                             "staging_alloc", "read", "h2d", "drain", "staging_free", "total"}) {
      EXPECT_TRUE(ph.count(name)) << "missing phase " << name;
    }
    EXPECT_EQ(ph["read"]->bytes(), want);
    EXPECT_GE(ph["read"]->busy_s(), 0.0);
    EXPECT_GE(ph["total"]->seconds(), ph["read"]->seconds());
    std::set<std::string> lanes;
    Result<transport::SpanLog> spans = transport::SpanLog::FromProto(rep.spans());
    ASSERT_TRUE(spans.ok()) << spans.status().ToString();
    for (const transport::NamedSpan& s : spans->Named()) {
      lanes.insert(s.lane);
      if (s.lane != "sources") continue;  // opened beside bind and arena_alloc, before setup
      EXPECT_EQ(s.what, "sources opened");
      EXPECT_GE(s.start_s, ph["total"]->start_s() - 1e-6);
      EXPECT_LE(s.start_s + s.seconds, ph["setup"]->start_s() + 1e-6);
    }
    EXPECT_TRUE(lanes.count("sources"));
    if (GetParam() != transport::ReadMode::kPageable) {
      EXPECT_TRUE(lanes.count("h2d-0"));
    }
    bool fill_lane = false;
    for (const auto& l : lanes) fill_lane |= l.rfind("fill-", 0) == 0;
    EXPECT_TRUE(GetParam() == transport::ReadMode::kRegistered || fill_lane);
    EXPECT_FALSE(rep.verified());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, LoadRankModeTest,
    ::testing::Values(transport::ReadMode::kAuto, transport::ReadMode::kBuffered,
                      transport::ReadMode::kDirect, transport::ReadMode::kMmap,
                      transport::ReadMode::kPageable, transport::ReadMode::kRegistered),
    [](const auto& info) { return std::string(transport::ReadModeName(info.param)); });

TEST(LoadRankTest, ResidentBytesAreMeasuredNotGuessed) {
  Fixture fx = MakeFixture();
  auto hot = LoadRank(fx.plan, 0, Small(transport::ReadMode::kAuto));
  ASSERT_TRUE(hot.ok()) << hot.status().ToString();
  EXPECT_EQ(hot->report.bytes_resident_at_start(), hot->report.bytes_read())
      << "files just written are in the page cache";
  for (const auto& p : fx.paths) testtransport::Evict(p, 0, 1 << 30);
  auto cold = LoadRank(fx.plan, 0, Small(transport::ReadMode::kAuto));
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  if (cold->report.bytes_resident_at_start() == cold->report.bytes_read()) {
    GTEST_SKIP() << "the filesystem kept the pages after POSIX_FADV_DONTNEED";
  }
  EXPECT_LT(cold->report.bytes_resident_at_start(), cold->report.bytes_read());
  const auto ref = testtransport::ReferenceArena(fx.plan, fx.plan.ranks(0));
  EXPECT_EQ(testtransport::FirstMismatch(ref, ArenaBytes(*cold).data()), -1);
}

TEST(LoadRankTest, FileChangedSincePlanningIsNamed) {
  Fixture fx = MakeFixture();
  // mtime moved.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1234567, 890}};
  ASSERT_EQ(::utimensat(AT_FDCWD, fx.paths[1].c_str(), times, 0), 0);
  auto r = LoadRank(fx.plan, 1, Small(transport::ReadMode::kMmap));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find(fx.paths[1]), std::string::npos) << m;
  EXPECT_NE(m.find("mtime expected " + std::to_string(fx.plan.files(1).mtime_ns())),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("actual 1234567000000890"), std::string::npos) << m;

  // size changed.
  Fixture fy = MakeFixture();
  {
    std::ofstream out(fy.paths[0], std::ios::app | std::ios::binary);
    out << "x";
  }
  auto s = LoadRank(fy.plan, 0, Small(transport::ReadMode::kBuffered));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kFailedPrecondition);
  const std::uint64_t size = fy.plan.files(0).size();
  EXPECT_NE(s.status().message().find("size expected " + std::to_string(size) + " bytes, actual " +
                                      std::to_string(size + 1)),
            std::string::npos)
      << s.status().ToString();

  // gone.
  Fixture fz = MakeFixture();
  ASSERT_EQ(::unlink(fz.paths[0].c_str()), 0);
  auto g = LoadRank(fz.plan, 0, Small(transport::ReadMode::kBuffered));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kFailedPrecondition);
}

TEST(LoadRankTest, VerifyPassesAndCatchesACorruptedByte) {
  Fixture fx = MakeFixture();
  LoadOptions o = Small(transport::ReadMode::kMmap);
  o.settings.verify = true;
  auto lr = LoadRank(fx.plan, 1, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  EXPECT_TRUE(lr->report.verified());
  EXPECT_TRUE(Phases(lr->report).count("verify"));

  const proto::RankPlan& rp = fx.plan.ranks(1);
  auto* arena = static_cast<std::uint8_t*>(lr->arena.ptr);  // host device: plain memory
  // A byte of w.row (the strided tensor): row 7, column 13.
  const proto::TensorOut& wrow = rp.tensors(1);
  ASSERT_EQ(wrow.name(), "w.row");
  const std::uint64_t at = wrow.arena_offset() + 7 * (kCols / 2) + 13;
  arena[at] ^= 0x40;
  Status s = VerifyArena(*lr->device, lr->arena, fx.plan, rp);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("tensor w.row byte " + std::to_string(7 * (kCols / 2) + 13)),
            std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find(fx.paths[0]), std::string::npos) << s.ToString();
  // File offset of that byte: header 128 + row 7 * 600 + rank 1's column base 300 + 13.
  EXPECT_NE(s.message().find("offset " + std::to_string(128 + 7 * kCols + 300 + 13)),
            std::string::npos)
      << s.ToString();
  arena[at] ^= 0x40;
  ASSERT_TRUE(VerifyArena(*lr->device, lr->arena, fx.plan, rp).ok());

  // A padding byte of embed (a fill).
  const proto::TensorOut& embed = rp.tensors(3);
  arena[embed.arena_offset() + 1000 + 599] = 1;
  s = VerifyArena(*lr->device, lr->arena, fx.plan, rp);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor embed byte 1599"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("fill value 0x00"), std::string::npos) << s.ToString();
}

TEST(LoadRankTest, DumpRoundTripsThroughASafetensorsReader) {
  Fixture fx = MakeFixture();
  LoadOptions o = Small(transport::ReadMode::kAuto);
  o.settings.dump_dir = fx.dir->Sub("dump");
  auto lr = LoadRank(fx.plan, 1, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  std::ifstream in(fx.dir->Sub("dump/rank-1.safetensors"), std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  ASSERT_GE(file.size(), 8u);
  std::uint64_t hlen = 0;
  for (int b = 7; b >= 0; --b) hlen = (hlen << 8) | static_cast<std::uint8_t>(file[b]);
  EXPECT_EQ(hlen % 8, 0u);
  ASSERT_LE(8 + hlen, file.size());
  nlohmann::json h = nlohmann::json::parse(file.substr(8, hlen));
  const proto::RankPlan& rp = fx.plan.ranks(1);
  ASSERT_EQ(h.size(), static_cast<std::size_t>(rp.tensors_size()));
  const auto ref = testtransport::ReferenceArena(fx.plan, rp);
  std::uint64_t expect_begin = 0;
  for (const proto::TensorOut& t : rp.tensors()) {
    SCOPED_TRACE(t.name());
    ASSERT_TRUE(h.contains(t.name()));
    const auto& e = h[t.name()];
    EXPECT_EQ(e["dtype"], "U8");
    EXPECT_EQ(e["shape"].get<std::vector<std::uint64_t>>(),
              std::vector<std::uint64_t>(t.shape().begin(), t.shape().end()));
    const auto off = e["data_offsets"].get<std::vector<std::uint64_t>>();
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], expect_begin) << "data offsets are contiguous in plan order";
    EXPECT_EQ(off[1] - off[0], t.bytes());
    expect_begin = off[1];
    for (std::uint64_t b = 0; b < t.bytes(); ++b) {
      ASSERT_EQ(static_cast<std::uint8_t>(file[8 + hlen + off[0] + b]),
                ref.bytes[t.arena_offset() + b])
          << "byte " << b;
    }
  }
  EXPECT_EQ(8 + hlen + expect_begin, file.size()) << "no trailing bytes";
}

TEST(LoadRankTest, InjectedFaultsNameRankFileAndOffsetAndNeverHang) {
  Fixture fx = MakeFixture();
  for (std::int64_t n : {0, 2, 9}) {
    for (auto mode : {transport::ReadMode::kBuffered, transport::ReadMode::kAuto}) {
      SCOPED_TRACE("eio after " + std::to_string(n) + " " +
                   std::string(transport::ReadModeName(mode)));
      LoadOptions o = Small(mode);
      transport::FaultSpec spec;
      spec.eio_after = n;
      o.wiring.wrap_source = [spec](std::unique_ptr<transport::Source> in) {
        return transport::WrapFaulty(std::move(in), spec);
      };
      auto r = WithWatchdog([&] { return LoadRank(fx.plan, 1, o); });
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Code::kIoError);
      const std::string& m = r.status().message();
      EXPECT_EQ(m.rfind("rank 1: ", 0), 0u) << m;
      EXPECT_TRUE(m.find(fx.paths[0]) != std::string::npos ||
                  m.find(fx.paths[1]) != std::string::npos)
          << m;
      EXPECT_NE(m.find("at offset"), std::string::npos) << m;
    }
  }
}

TEST(LoadRankTest, BadRequestsFailCleanly) {
  Fixture fx = MakeFixture();
  auto r = LoadRank(fx.plan, 2, Small(transport::ReadMode::kMmap));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  proto::LoadPlan bad = fx.plan;
  bad.mutable_ranks(0)->mutable_tensors(0)->set_arena_offset(bad.ranks(0).arena_bytes());
  auto t = LoadRank(bad, 0, Small(transport::ReadMode::kMmap));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("w.col"), std::string::npos) << t.status().ToString();

  if (transport::CudaDeviceCount() == 0) {
    LoadOptions o = Small(transport::ReadMode::kMmap);
    o.settings.device = DeviceKind::kCuda;
    auto c = LoadRank(fx.plan, 0, o);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("cuda"), std::string::npos) << c.status().ToString();
  }
}

TEST(LoadRankTest, ARingMadeAheadIsOnlyMadeWhereTheDeviceKeepsIt) {
  const auto origin = std::chrono::steady_clock::now();
  StagingRing ring;
  ring.slots = 3;
  ring.slot_bytes = 4096;
  ring.cpu_bind = CpuBind::kNone;
  auto keeps = transport::OpenHostDevice(3 * 4096);
  const transport::PhaseTiming made = MakeRingAhead(*keeps, ring, origin);
  EXPECT_TRUE(made.ran);
  EXPECT_EQ(made.bytes, 3u * 4096);
  EXPECT_GE(made.start_s, 0.0);
  EXPECT_FALSE(MakeRingAhead(*transport::OpenHostDevice(), ring, origin).ran);  // keeps none
  ring.slots = 4;  // more than it keeps: the pool would free what does not fit
  EXPECT_FALSE(MakeRingAhead(*keeps, ring, origin).ran);
  ring.slots = 0;
  EXPECT_FALSE(MakeRingAhead(*keeps, ring, origin).ran);
}

TEST(LoadRankTest, ALoadTakesThePreparedDeviceAndReportsItsRing) {
  Fixture fx = MakeFixture();
  LoadOptions o = Small(transport::ReadMode::kAuto);
  o.settings.cpu_bind = CpuBind::kNone;
  PreparedDevice p;
  p.device = transport::OpenHostDevice(o.settings.pipeline.slots * o.settings.pipeline.slot_bytes);
  p.ordinal = -1;
  p.staging = MakeRingAhead(*p.device, RingOf(o.settings), o.wiring.origin);
  ASSERT_TRUE(p.staging.ran);
  std::promise<Result<PreparedDevice>> promise;
  promise.set_value(std::move(p));
  std::future<Result<PreparedDevice>> future = promise.get_future();
  o.wiring.prepared = &future;
  auto lr = WithWatchdog([&] { return LoadRank(fx.plan, 1, o); });
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  const auto ref = testtransport::ReferenceArena(fx.plan, fx.plan.ranks(1));
  EXPECT_EQ(testtransport::FirstMismatch(ref, ArenaBytes(*lr).data()), -1);
  auto ph = Phases(lr->report);
  ASSERT_TRUE(ph.count("staging_alloc") && ph.count("total"));
  // The ring was made before the load's clock started, and the phase says so.
  EXPECT_LT(ph["staging_alloc"]->start_s(), ph["total"]->start_s());
  EXPECT_GE(ph["staging_alloc"]->seconds(), p.staging.seconds);
  EXPECT_EQ(ph["staging_alloc"]->bytes(), 3u * 4096);
}

TEST(LoadRankTest, DefaultsWorkOnTheHostDevice) {
  Fixture fx = MakeFixture();
  LoadOptions o;
  o.settings.device = DeviceKind::kAuto;  // no GPU here: the host backend
  if (transport::CudaDeviceCount() > 0) GTEST_SKIP() << "GPU present";
  auto lr = LoadRank(fx.plan, 0, o);
  ASSERT_TRUE(lr.ok()) << lr.status().ToString();
  EXPECT_EQ(lr->report.device(), "host");
  EXPECT_EQ(lr->report.read_mode(), "auto");
  const auto ref = testtransport::ReferenceArena(fx.plan, fx.plan.ranks(0));
  EXPECT_EQ(testtransport::FirstMismatch(ref, ArenaBytes(*lr).data()), -1);
}

// A wholly cold load's read depth: the options' when given (0 too), else by how many of the
// plan's ranks share this rank's node: 2 GiB alone, 1 GiB each where several share one.
TEST(ReadDepthTest, UnsetDependsOnTheRanksOfTheNode) {
  proto::LoadPlan plan;
  const std::uint32_t nodes[] = {0, 0, 1, 2, 2, 2};
  for (std::uint32_t r = 0; r < 6; ++r) {
    proto::RankPlan* rp = plan.add_ranks();
    rp->set_rank(r);
    rp->set_node(nodes[r]);
  }
  const std::uint64_t kGiB = 1ull << 30;
  const std::uint64_t want[] = {kGiB, kGiB, 2 * kGiB, kGiB, kGiB, kGiB};
  LoadSettings unset;
  for (int r = 0; r < 6; ++r) EXPECT_EQ(ReadDepthFor(unset, plan, plan.ranks(r)), want[r]) << r;
  LoadSettings given;
  for (std::uint64_t depth : {std::uint64_t{0}, std::uint64_t{3} << 20}) {
    given.pipeline.read_depth_bytes = depth;
    for (int r = 0; r < 6; ++r) EXPECT_EQ(ReadDepthFor(given, plan, plan.ranks(r)), depth) << r;
  }
  proto::LoadPlan one;  // a single-rank plan
  *one.add_ranks() = plan.ranks(0);
  EXPECT_EQ(ReadDepthFor(unset, one, one.ranks(0)), 2 * kGiB);
}

}  // namespace
}  // namespace hoist::rank
