// Replica-striped job dedup (planner/job_dedup.h): the chunk cutter moves exactly a copy's bytes;
// fully expanded job plans pair every transfer between every two ranks, tile each arena, read
// each needed byte once over the job, spread the reads over a class's replicas, and with one
// replica per class equal the job dedup of the whole world; a rank's view expands to its plan.
#include "planner/job_dedup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "planner/checkpoint.h"
#include "planner/dedup.h"
#include "planner/plan_builder.h"
#include "planner/plan_set.h"
#include "rank/exchange.h"
#include "tests/planner/preset_fixture.h"

namespace hoist::planner {
namespace {

// Arena byte -> (file, source byte) a copy writes.
using ByteMap = std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>>;

void MapCopy(const proto::Copy& c, ByteMap* m, int* overlaps) {
  for (std::uint64_t r = 0; r < c.rows(); ++r) {
    for (std::uint64_t x = 0; x < c.width(); ++x) {
      const std::uint64_t d = c.dst_offset() + r * (c.rows() > 1 ? c.dst_pitch() : 0) + x;
      const std::uint64_t s = c.src_offset() + r * (c.rows() > 1 ? c.src_pitch() : 0) + x;
      *overlaps += !m->emplace(d, std::make_pair(c.file(), s)).second;
    }
  }
}

TEST(JobDedupCutTest, PiecesTileTheCopyByteForByte) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 400; ++trial) {
    proto::Copy c;
    c.set_file(static_cast<std::uint32_t>(rng() % 3));
    c.set_width(1 + rng() % 97);
    c.set_rows(trial % 3 == 0 ? 1 : 1 + rng() % 23);
    c.set_src_pitch(c.rows() > 1 ? c.width() + rng() % 50 : 0);
    c.set_dst_pitch(c.rows() > 1 ? c.width() : 0);
    c.set_src_offset(rng() % 10000);
    c.set_dst_offset(rng() % 10000);
    const std::uint64_t k = trial % 7 == 0 ? 0 : 1 + rng() % 300;
    SCOPED_TRACE("trial " + std::to_string(trial) + " k " + std::to_string(k));
    ByteMap want, got;
    int overlaps = 0;
    MapCopy(c, &want, &overlaps);
    const std::vector<ChunkCopy> pieces = CutCopyAtChunks(c, k);
    std::uint64_t last_end = c.dst_offset();
    for (const ChunkCopy& p : pieces) {
      ASSERT_TRUE(ContiguousInArena(p.copy));
      const std::uint64_t lo = p.copy.dst_offset(), hi = lo + p.copy.width() * p.copy.rows();
      EXPECT_EQ(lo, last_end) << "pieces in arena order";
      last_end = hi;
      if (k > 0) {
        EXPECT_EQ(p.chunk, lo / k);
        EXPECT_EQ(p.chunk, (hi - 1) / k) << "a piece within one chunk";
      }
      MapCopy(p.copy, &got, &overlaps);
    }
    EXPECT_EQ(overlaps, 0);
    EXPECT_TRUE(got == want);
    if (k > 0) {
      const std::uint64_t total = c.width() * c.rows();
      const std::uint64_t chunks = (c.dst_offset() + total - 1) / k - c.dst_offset() / k + 1;
      // At most three copies per chunk (a cut row's two parts and the rows between).
      EXPECT_LE(pieces.size(), 3 * chunks);
    }
  }
}

TEST(JobDedupCutTest, ChunkBytesAreClampedAndAligned) {
  EXPECT_EQ(ChooseChunkBytes(0, 4, 64ull << 20), 1ull << 20);
  EXPECT_EQ(ChooseChunkBytes(1ull << 40, 2, 64ull << 20), 64ull << 20);
  const std::uint64_t k = ChooseChunkBytes(84'000'000'000ull, 512, 64ull << 20);
  EXPECT_EQ(k % 4096, 0u);
  EXPECT_NEAR(static_cast<double>(k), 84e9 / 4096, 4096);
  EXPECT_EQ(ChooseChunkBytes(1ull << 30, 4, 16 << 10), 16u << 10);  // the step caps it
}

using testing::Nodes;
class JobDedupTest : public testing::PresetSuite {};

using Range = std::pair<std::uint64_t, std::uint64_t>;

// Merged [lo, hi) ranges of one file's source bytes.
void AddSource(const proto::Copy& c, std::map<std::uint32_t, std::vector<Range>>* out) {
  for (std::uint64_t r = 0; r < c.rows(); ++r) {
    const std::uint64_t s = c.src_offset() + r * (c.rows() > 1 ? c.src_pitch() : 0);
    (*out)[c.file()].emplace_back(s, s + c.width());
  }
}
std::uint64_t UnionBytes(std::map<std::uint32_t, std::vector<Range>> m, std::uint64_t* sum) {
  std::uint64_t bytes = 0;
  *sum = 0;
  for (auto& [file, v] : m) {
    std::sort(v.begin(), v.end());
    std::uint64_t end = 0;
    for (const Range& r : v) {
      *sum += r.second - r.first;
      const std::uint64_t lo = std::max(r.first, end);
      if (r.second > lo) bytes += r.second - lo;
      end = std::max(end, r.second);
    }
  }
  return bytes;
}

// The transfers between two ranks, as (step, own offset, peer offset, bytes).
using Key = std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>;
std::vector<Key> With(const proto::RankPlan& rp, std::uint32_t peer, bool sends, bool flip) {
  std::vector<Key> out;
  for (int b = 0; b < rp.steps_size(); ++b) {
    for (const proto::Transfer& t : sends ? rp.steps(b).sends() : rp.steps(b).recvs()) {
      if (t.peer() != peer) continue;
      out.emplace_back(b, flip ? t.peer_offset() : t.offset(), flip ? t.offset() : t.peer_offset(),
                       t.bytes());
    }
  }
  return out;
}

struct Shape {
  std::string preset;
  int tp, dp, ep;
  std::uint64_t chunk;  // 0: chosen
  int nodes;
};

// Every check of an expanded job plan (see the file comment).
void CheckExpanded(const proto::LoadPlan& compact, const proto::LoadPlan& all) {
  const auto world = static_cast<std::uint32_t>(all.ranks_size());
  const std::uint32_t classes = compact.job().classes();
  const std::uint32_t replicas = world / classes;
  // Pairing, in order, step, size and offsets, for every pair of ranks.
  for (std::uint32_t a = 0; a < world; ++a) {
    for (std::uint32_t b = 0; b < world; ++b) {
      if (a == b) continue;
      ASSERT_EQ(With(all.ranks(static_cast<int>(a)), b, true, false),
                With(all.ranks(static_cast<int>(b)), a, false, true))
          << "sends of rank " << a << " to rank " << b;
    }
  }
  // Each rank: sends covered by its reads, reads + recvs + fills tile its arena, equal step
  // counts, and pairing, as the rank checks before it loads.
  for (std::uint32_t r = 0; r < world; ++r) {
    const Status s = rank::ValidateExchange(all, all.ranks(static_cast<int>(r)),
                                            rank::GroupOf(all, static_cast<int>(r)));
    ASSERT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
  }
  // Each byte needed is read once over the job (no strided copies in these plans).
  std::map<std::uint32_t, std::vector<Range>> needed, read;
  std::uint64_t storage = 0, sum = 0;
  for (const proto::RankPlan& rp : all.ranks()) {
    for (const proto::Copy& c : rp.copies()) AddSource(c, &needed);
    for (const proto::ExchangeStep& st : rp.steps()) {
      for (const proto::Copy& c : st.reads()) AddSource(c, &read);
    }
    for (const proto::Copy& c : rp.own_reads()) AddSource(c, &read);
    storage += rp.storage_bytes();
  }
  const std::uint64_t need = UnionBytes(needed, &sum);
  EXPECT_EQ(UnionBytes(read, &sum), need);
  EXPECT_EQ(sum, need) << "a byte read twice";
  EXPECT_EQ(storage, need);
  EXPECT_EQ(compact.storage_bytes(), need);
  // The summary's figures (no expansion) are the expanded ranks'.
  Result<RankDirectory> dir = RankDirectory::Of(compact);
  ASSERT_TRUE(dir.ok());
  const std::vector<JobRankFigures> figures = JobFigures(compact, *dir);
  for (std::uint32_t r = 0; r < world; ++r) {
    const proto::RankPlan& rp = all.ranks(static_cast<int>(r));
    std::uint64_t sends = 0, forwarded = 0;
    for (const proto::ExchangeStep& st : rp.steps()) {
      for (const proto::Transfer& t : st.sends()) {
        ++sends;
        forwarded += t.bytes();
      }
    }
    EXPECT_EQ(figures[r].storage_bytes, rp.storage_bytes()) << "rank " << r;
    EXPECT_EQ(figures[r].sends, sends) << "rank " << r;
    EXPECT_EQ(figures[r].forwarded, forwarded) << "rank " << r;
  }
  // Balance across a class's replicas: these arenas are read densely, so within two chunks of
  // each other (a replica owning one chunk more, the last chunk partial).
  for (std::uint32_t c = 0; c < classes && replicas > 1; ++c) {
    std::uint64_t lo = ~0ull, hi = 0;
    for (std::uint32_t d = 0; d < replicas; ++d) {
      const std::uint64_t b = all.ranks(static_cast<int>(c + classes * d)).storage_bytes();
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    EXPECT_LE(hi - lo, 2 * compact.job().chunk_bytes()) << "class " << c;
  }
}

TEST_F(JobDedupTest, ExpandedPlansPairTileAndReadEachByteOnce) {
  const std::vector<Shape> shapes = {
      {"qwen3-moe-tiny", 2, 4, 0, 0, 2},     // R 4, chosen K (one chunk a class)
      {"qwen3-moe-tiny", 2, 4, 0, 4000, 2},  // many chunks, cut mid-row
      {"qwen3-moe-tiny", 2, 0, 4, 0, 2},     // ep 4 (tp 2 x dp 2): R 1
      {"qwen3-tiny", 2, 3, 0, 3000, 3},      // R 3
      {"qwen3-tiny", 4, 2, 0, 1024, 2},      // tp above the kv heads: replicated across classes
      {"deepseek-v3-tiny", 2, 2, 0, 5000, 1},
  };
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(sh.preset + " tp " + std::to_string(sh.tp) + " dp " + std::to_string(sh.dp) +
                 " ep " + std::to_string(sh.ep) + " K " + std::to_string(sh.chunk));
    const Checkpoint ckpt = Open(sh.preset);
    PlanOptions o;
    o.tp = sh.tp;
    o.dp = sh.ep > 0 ? 1 : sh.dp;
    o.ep = sh.ep;
    const int world = sh.ep > 0 ? sh.ep : sh.tp * sh.dp;
    o.locations = Nodes(sh.nodes, world / sh.nodes);
    o.dedup = proto::DEDUP_JOB;
    o.dedup_step_bytes = 16 << 10;
    o.dedup_chunk_bytes = sh.chunk;
    Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
    ASSERT_TRUE(compact.ok()) << compact.status().ToString();
    ASSERT_EQ(compact->dedup_templates_size(), 1);
    EXPECT_EQ(compact->dedup_templates(0).members_size(), compact->ranks_size());
    Result<proto::LoadPlan> all = ExpandPlan(*compact);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    ASSERT_EQ(all->ranks_size(), world);
    CheckExpanded(*compact, *all);
    if (sh.chunk > 0) {
      std::uint64_t recvs = 0;
      for (const proto::ExchangeStep& st : all->ranks(0).steps()) recvs += st.recvs_size();
      EXPECT_GT(recvs, 8u) << "many chunks";
    }
    // Each rank's view expands to its plan in the expanded plan.
    Result<RankDirectory> dir = RankDirectory::Of(*compact);
    ASSERT_TRUE(dir.ok());
    const ViewWriter writer(*compact, *dir);
    for (std::uint32_t r = 0; r < static_cast<std::uint32_t>(world); ++r) {
      proto::LoadPlan v;
      ASSERT_TRUE(v.ParseFromString(writer.View(r)));
      ASSERT_TRUE(ExpandJobView(&v, r).ok());
      const proto::RankPlan* mine = FindRank(v, r);
      ASSERT_NE(mine, nullptr);
      EXPECT_FALSE(mine->has_job_exchange());
      EXPECT_EQ(mine->SerializeAsString(), all->ranks(static_cast<int>(r)).SerializeAsString())
          << "rank " << r;
      EXPECT_EQ(rank::GroupOf(v, static_cast<int>(r)).ranks.size(),
                static_cast<std::size_t>(world));
      const Status s = rank::ValidateExchange(v, *mine, rank::GroupOf(v, static_cast<int>(r)));
      EXPECT_TRUE(s.ok()) << "rank " << r << ": " << s.ToString();
    }
  }
}

// One replica per class (ep): the exchange is the job dedup of the whole world, as before.
TEST_F(JobDedupTest, OneReplicaPerClassIsTheWholeWorldsJobDedup) {
  const Checkpoint ckpt = Open("qwen3-moe-tiny");
  PlanOptions o;
  o.tp = 2;
  o.ep = 8;
  o.locations = Nodes(2, 4);
  o.dedup = proto::DEDUP_NONE;
  o.dedup_step_bytes = 16 << 10;
  Result<proto::LoadPlan> plain = BuildLoadPlan(ckpt, o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_JOB, o.dedup_step_bytes, false}, &*plain).ok());
  o.dedup = proto::DEDUP_JOB;
  Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  Result<proto::LoadPlan> all = ExpandPlan(*compact);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->ranks_size(), plain->ranks_size());
  EXPECT_EQ(compact->storage_bytes(), plain->storage_bytes());
  for (int r = 0; r < all->ranks_size(); ++r) {
    EXPECT_EQ(all->ranks(r).SerializeAsString(), plain->ranks(r).SerializeAsString())
        << "rank " << r;
  }
}

// A job template of a member per rank (an older hoist's) with replicas is refused, not misread.
TEST_F(JobDedupTest, AnOlderJobPlanWithReplicasIsCorrupt) {
  const Checkpoint ckpt = Open("qwen3-tiny");
  PlanOptions o;
  o.tp = 2;
  o.dp = 2;
  o.dedup = proto::DEDUP_JOB;
  Result<proto::LoadPlan> compact = BuildCompactPlan(ckpt, o);
  ASSERT_TRUE(compact.ok()) << compact.status().ToString();
  proto::LoadPlan old = *compact;
  old.clear_job();
  proto::DedupTemplate& t = *old.mutable_dedup_templates(0);
  for (int i = 0; i < 2; ++i) {
    *t.add_members() = t.members(i);
    t.add_member_class(static_cast<std::uint32_t>(i));
  }
  Result<RankDirectory> d = RankDirectory::Of(old);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kCorrupt);
  EXPECT_NE(d.status().message().find("older hoist"), std::string::npos) << d.status().message();
}

}  // namespace
}  // namespace hoist::planner
