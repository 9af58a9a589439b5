// ApplyDedup on in-memory checkpoints (no files): the tiny presets' exact tensor lists laid out
// like HF shards with deterministic non-zero bytes, planned at several topologies and dedup
// modes, then executed by plain memcpy in this file: every rank's arena built from its dedup
// reads and transfers, step by step, must equal the arena built from its plain copies. The
// storage accounting is checked against a per-byte count: with dedup each needed source byte is
// read exactly once per node (node) or once per job (job). Also hand-made plans with partial
// overlaps, 2-D row lattices, a strided arena image and a duplicate, and the runtime validator
// (rank::ValidateExchange) on every plan and on corrupted ones.
#include "planner/dedup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/plan_builder.h"
#include "rank/exchange.h"
#include "tests/planner/preset_fixture.h"
#include "tools/mkckpt.h"

namespace hoist::planner {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::uint64_t SplitMix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Bytes FileBytes(std::uint32_t f, std::uint64_t size) {
  Bytes d(size);
  for (std::uint64_t p = 0; p < size; ++p) {
    const auto v =
        static_cast<std::uint8_t>(SplitMix((std::uint64_t{f} << 48) ^ (p >> 3)) >> ((p & 7) * 8));
    d[p] = v == 0 ? 0x5A : v;
  }
  return d;
}

struct Mem {
  Checkpoint ckpt;
  std::vector<Bytes> data;
};

// The preset's tensors (model order), in shards of at most `shard_limit` bytes, name order
// inside a shard, odd data_start per file; contents from FileBytes.
Mem PresetMem(const std::string& preset, std::uint64_t shard_limit) {
  Mem m;
  Result<std::string> json = tools::PresetConfigJson(preset);
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  Result<ModelConfig> cfg = ParseModelConfig(preset + "/config.json", *json);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  Result<std::vector<tools::TensorSpec>> specs = tools::ListTensorSpecs(*json);
  EXPECT_TRUE(specs.ok()) << specs.status().ToString();
  m.ckpt.dir = "/mem/" + preset;
  m.ckpt.config = *cfg;
  std::vector<std::vector<tools::TensorSpec>> files(1);
  std::uint64_t cur = 0;
  for (const tools::TensorSpec& s : *specs) {
    if (cur > 0 && cur + s.Bytes() > shard_limit) {
      files.emplace_back();
      cur = 0;
    }
    cur += s.Bytes();
    files.back().push_back(s);
  }
  for (std::uint32_t f = 0; f < files.size(); ++f) {
    auto& fs = files[f];
    std::sort(fs.begin(), fs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    ShardFile sf;
    sf.rel_path = "model-0000" + std::to_string(f + 1) + ".safetensors";
    sf.abs_path = m.ckpt.dir + "/" + sf.rel_path;
    sf.header.header_len = 1003 + 8 * f;
    sf.header.data_start = 8 + sf.header.header_len;
    std::uint64_t off = 0;
    for (std::uint32_t i = 0; i < fs.size(); ++i) {
      TensorEntry e;
      e.name = fs[i].name;
      e.dtype = *ParseDType(fs[i].dtype);
      e.shape = fs[i].shape;
      e.begin = off;
      off += fs[i].Bytes();
      e.end = off;
      m.ckpt.tensors[e.name] = TensorLocation{f, i};
      m.ckpt.tensor_bytes += e.bytes();
      sf.header.tensors.push_back(std::move(e));
    }
    sf.stat.size = sf.header.data_start + off;
    sf.stat.mtime_ns = 1'700'000'000'000'000'000ll + f;
    m.data.push_back(FileBytes(f, sf.stat.size));
    m.ckpt.files.push_back(std::move(sf));
  }
  return m;
}

void Exec(const proto::Copy& c, const std::vector<Bytes>& files, Bytes* arena) {
  const Bytes& f = files.at(c.file());
  for (std::uint64_t i = 0; i < c.rows(); ++i) {
    const std::uint64_t s = c.src_offset() + (c.rows() > 1 ? i * c.src_pitch() : 0);
    const std::uint64_t d = c.dst_offset() + (c.rows() > 1 ? i * c.dst_pitch() : 0);
    ASSERT_LE(s + c.width(), f.size());
    ASSERT_LE(d + c.width(), arena->size());
    std::memcpy(arena->data() + d, f.data() + s, c.width());
  }
}

// What each rank's arena holds after a plain load (copies + fills), pre-set to 0xEE.
std::vector<Bytes> ExecPlain(const proto::LoadPlan& plan, const std::vector<Bytes>& files) {
  std::vector<Bytes> out;
  for (const auto& rp : plan.ranks()) {
    Bytes a(rp.arena_bytes(), 0xEE);
    for (const auto& c : rp.copies()) Exec(c, files, &a);
    for (const auto& fl : rp.fills()) {
      std::memset(a.data() + fl.dst_offset(), static_cast<int>(fl.value()), fl.bytes());
    }
    out.push_back(std::move(a));
  }
  return out;
}

// A dedup load, step by step: every rank's reads of step b, then every transfer of step b
// (from the sender's arena as it is then), then the own reads and the fills.
std::vector<Bytes> ExecDedup(const proto::LoadPlan& plan, const std::vector<Bytes>& files) {
  std::vector<Bytes> out;
  for (const auto& rp : plan.ranks()) out.emplace_back(rp.arena_bytes(), 0xEE);
  const int steps = plan.ranks(0).steps_size();
  for (int b = 0; b < steps; ++b) {
    for (const auto& rp : plan.ranks()) {
      for (const auto& c : rp.steps(b).reads()) Exec(c, files, &out[rp.rank()]);
    }
    for (const auto& rp : plan.ranks()) {
      for (const auto& t : rp.steps(b).sends()) {
        Bytes& dst = out.at(t.peer());
        const Bytes& src = out[rp.rank()];
        EXPECT_LE(t.peer_offset() + t.bytes(), dst.size());
        EXPECT_LE(t.offset() + t.bytes(), src.size());
        std::memcpy(dst.data() + t.peer_offset(), src.data() + t.offset(), t.bytes());
      }
    }
  }
  for (const auto& rp : plan.ranks()) {
    for (const auto& c : rp.own_reads()) Exec(c, files, &out[rp.rank()]);
    for (const auto& fl : rp.fills()) {
      std::memset(out[rp.rank()].data() + fl.dst_offset(), static_cast<int>(fl.value()),
                  fl.bytes());
    }
  }
  return out;
}

// Per group key, per file: how many times each byte is read. `plain`: from copies.
using Counts = std::map<std::uint32_t, std::vector<std::vector<std::uint32_t>>>;
void Count(const proto::Copy& c, std::vector<std::vector<std::uint32_t>>* per_file) {
  auto& v = per_file->at(c.file());
  for (std::uint64_t i = 0; i < c.rows(); ++i) {
    const std::uint64_t s = c.src_offset() + (c.rows() > 1 ? i * c.src_pitch() : 0);
    for (std::uint64_t k = 0; k < c.width(); ++k) ++v.at(s + k);
  }
}
Counts CountReads(const proto::LoadPlan& plan, bool plain, bool per_node) {
  Counts counts;
  for (const auto& rp : plan.ranks()) {
    auto& per_file = counts[per_node ? rp.node() : 0];
    if (per_file.empty()) {
      for (const auto& f : plan.files()) per_file.emplace_back(f.size(), 0);
    }
    if (plain) {
      for (const auto& c : rp.copies()) Count(c, &per_file);
      continue;
    }
    for (const auto& st : rp.steps()) {
      for (const auto& c : st.reads()) Count(c, &per_file);
    }
    for (const auto& c : rp.own_reads()) Count(c, &per_file);
  }
  return counts;
}

struct Case {
  const char* preset;
  int tp, ep, dp;
  std::vector<RankLocation> where;
};

using testing::Nodes;

proto::LoadPlan Plan(const Mem& m, const Case& c, proto::Dedup mode, std::uint64_t step,
                     proto::Layout layout = proto::LAYOUT_FUSED) {
  PlanOptions o;
  o.tp = c.tp;
  o.ep = c.ep;
  o.dp = c.dp;
  o.layout = layout;
  o.locations = c.where;
  o.dedup = mode;
  o.dedup_step_bytes = step;
  Result<proto::LoadPlan> p = BuildLoadPlan(m.ckpt, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : proto::LoadPlan();
}

// Everything a dedup plan must satisfy, against the plain plan of the same options.
void CheckDedup(const Mem& m, const proto::LoadPlan& plain, const proto::LoadPlan& dd,
                proto::Dedup mode) {
  ASSERT_EQ(dd.ranks_size(), plain.ranks_size());
  EXPECT_EQ(dd.dedup(), mode);
  // The copies (the arena's contract) are untouched.
  for (int r = 0; r < dd.ranks_size(); ++r) {
    ASSERT_EQ(dd.ranks(r).copies_size(), plain.ranks(r).copies_size());
    for (int i = 0; i < dd.ranks(r).copies_size(); ++i) {
      ASSERT_EQ(dd.ranks(r).copies(i).SerializeAsString(),
                plain.ranks(r).copies(i).SerializeAsString());
    }
    EXPECT_EQ(dd.ranks(r).steps_size(), dd.ranks(0).steps_size());
    EXPECT_EQ(dd.ranks(r).peer_group(), mode == proto::DEDUP_NODE ? dd.ranks(r).node() : 0u);
  }
  // Same bytes in every arena.
  const std::vector<Bytes> want = ExecPlain(plain, m.data);
  const std::vector<Bytes> got = ExecDedup(dd, m.data);
  for (int r = 0; r < dd.ranks_size(); ++r) {
    EXPECT_TRUE(got[r] == want[r]) << "rank " << r << " arena differs";
  }
  // Each needed byte read exactly once per group; storage_bytes agree with the reads.
  const bool per_node = mode == proto::DEDUP_NODE;
  const Counts need = CountReads(plain, true, per_node);
  const Counts read = CountReads(dd, false, per_node);
  std::map<std::uint32_t, std::uint64_t> union_bytes, storage;
  for (const auto& [g, files] : need) {
    for (std::size_t f = 0; f < files.size(); ++f) {
      for (std::size_t p = 0; p < files[f].size(); ++p) {
        const std::uint32_t n = files[f][p], k = read.at(g)[f][p];
        if (n > 0) ++union_bytes[g];
        ASSERT_EQ(k, n > 0 ? 1u : 0u) << "group " << g << " file " << f << " byte " << p
                                      << " needed by " << n << " ranks, read " << k << " times";
      }
    }
  }
  std::uint64_t total = 0;
  for (const auto& rp : dd.ranks()) {
    std::uint64_t s = 0;
    for (const auto& st : rp.steps()) {
      for (const auto& c : st.reads()) s += c.width() * c.rows();
    }
    for (const auto& c : rp.own_reads()) s += c.width() * c.rows();
    EXPECT_EQ(s, rp.storage_bytes()) << "rank " << rp.rank();
    storage[per_node ? rp.node() : 0] += s;
    total += s;
  }
  EXPECT_EQ(storage, union_bytes);
  EXPECT_EQ(dd.storage_bytes(), total);
  EXPECT_LE(total, plain.storage_bytes());
  // Transfers pair up in order, stay inside their group, and every rank accepts its part.
  for (const auto& rp : dd.ranks()) {
    const transport::PeerGroup group = rank::GroupOf(dd, static_cast<int>(rp.rank()));
    Status s = rank::ValidateExchange(dd, rp, group);
    EXPECT_TRUE(s.ok()) << "rank " << rp.rank() << ": " << s.ToString();
    for (int b = 0; b < rp.steps_size(); ++b) {
      for (const auto& t : rp.steps(b).sends()) {
        EXPECT_EQ(dd.ranks(t.peer()).peer_group(), rp.peer_group());
        EXPECT_NE(t.peer(), rp.rank());
      }
    }
    for (const auto& other : dd.ranks()) {
      std::vector<std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>> sends, recvs;
      for (int b = 0; b < rp.steps_size(); ++b) {
        for (const auto& t : rp.steps(b).sends()) {
          if (t.peer() == other.rank())
            sends.emplace_back(b, t.offset(), t.peer_offset(), t.bytes());
        }
        for (const auto& t : other.steps(b).recvs()) {
          if (t.peer() == rp.rank()) recvs.emplace_back(b, t.peer_offset(), t.offset(), t.bytes());
        }
      }
      EXPECT_EQ(sends, recvs) << rp.rank() << " -> " << other.rank();
    }
  }
}

TEST(DedupTest, NoneRecordsStorageBytesAndNothingElse) {
  const Mem m = PresetMem("qwen3-moe-tiny", 300000);
  const proto::LoadPlan p =
      Plan(m, {"qwen3-moe-tiny", 2, 4, 1, Nodes(2, 2)}, proto::DEDUP_NONE, 1 << 20);
  EXPECT_EQ(p.dedup(), proto::DEDUP_NONE);
  std::uint64_t total = 0;
  for (const auto& rp : p.ranks()) {
    std::uint64_t s = 0;
    for (const auto& c : rp.copies()) s += c.width() * c.rows();
    EXPECT_GT(s, 0u);
    EXPECT_EQ(rp.storage_bytes(), s);
    EXPECT_EQ(rp.steps_size(), 0);
    EXPECT_EQ(rp.own_reads_size(), 0);
    total += s;
  }
  EXPECT_EQ(p.storage_bytes(), total);
}

class PresetDedupTest : public ::testing::TestWithParam<std::tuple<int, proto::Dedup, int>> {};

const std::vector<Case>& Cases() {
  static const std::vector<Case> kCases = {
      {"qwen3-moe-tiny", 2, 4, 1, Nodes(2, 2)},  // tp 2 x dp 2, experts over 4 ranks
      {"qwen3-moe-tiny", 1, 4, 1, Nodes(2, 2)},  // ep 4: all dense weights replicated
      {"deepseek-v3-tiny", 1, 4, 1, Nodes(2, 2)}, {"deepseek-v3-tiny", 2, 4, 1, Nodes(2, 2)},
      {"qwen3-tiny", 8, 0, 1, Nodes(2, 4)},      // tp 8 > 4 kv heads: kv heads replicated
      {"qwen3-tiny", 2, 0, 3, Nodes(3, 2)},      // dp 3: every tp slice on three nodes
      {"qwen3-moe-tiny", 2, 0, 2, Nodes(1, 4)},  // experts tp-sharded, 2-D rows shared over dp
  };
  return kCases;
}

TEST_P(PresetDedupTest, SameArenasAndEachByteReadOncePerGroup) {
  const auto [index, mode, step_kib] = GetParam();
  const Case& c = Cases()[static_cast<std::size_t>(index)];
  SCOPED_TRACE(std::string(c.preset) + " tp " + std::to_string(c.tp) + " ep " +
               std::to_string(c.ep) + " dp " + std::to_string(c.dp) + " " + DedupName(mode) +
               " step " + std::to_string(step_kib) + " KiB");
  const Mem m = PresetMem(c.preset, 400000);
  const std::uint64_t step = static_cast<std::uint64_t>(step_kib) << 10;
  for (proto::Layout layout : {proto::LAYOUT_FUSED, proto::LAYOUT_HF}) {
    const proto::LoadPlan plain = Plan(m, c, proto::DEDUP_NONE, step, layout);
    const proto::LoadPlan dd = Plan(m, c, mode, step, layout);
    CheckDedup(m, plain, dd, mode);
    // Something is shared in every case here, and forwarded.
    std::uint64_t sent = 0;
    for (const auto& rp : dd.ranks()) {
      for (const auto& st : rp.steps()) {
        for (const auto& t : st.sends()) sent += t.bytes();
      }
    }
    EXPECT_GT(sent, 0u);
    EXPECT_LT(dd.storage_bytes(), plain.storage_bytes());
    // Steps hold about `step` shared bytes per group (pieces never straddle a step).
    std::map<std::uint32_t, std::uint64_t> shared;
    for (const auto& rp : dd.ranks()) {
      for (const auto& st : rp.steps()) {
        for (const auto& r : st.reads()) shared[rp.peer_group()] += r.width() * r.rows();
      }
    }
    std::uint64_t most = 0;
    for (const auto& [g, bytes] : shared) most = std::max(most, bytes);
    const auto steps = static_cast<std::uint64_t>(dd.ranks(0).steps_size());
    if (mode == proto::DEDUP_JOB && c.ep == 0 && c.dp > 1) {
      // Replica-striped (planner/job_dedup.h): after the class template's steps, each class
      // forwards its own bytes among its replicas in extra steps, the classes side by side: a
      // class's reads fit the steps, and there is at most one more than the job's reads need.
      std::map<std::uint32_t, std::uint64_t> per_class;
      for (const auto& rp : dd.ranks()) {
        for (const auto& st : rp.steps()) {
          for (const auto& r : st.reads()) per_class[rp.rank() % c.tp] += r.width() * r.rows();
        }
      }
      std::uint64_t most_class = 0;
      for (const auto& [k, bytes] : per_class) most_class = std::max(most_class, bytes);
      EXPECT_GE(steps, most_class / step);
      EXPECT_LE(steps, (most + step - 1) / step + 1);
      continue;
    }
    EXPECT_GE(steps, most / step);
    EXPECT_LE(steps, (most + step - 1) / step);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetDedupTest,
                         ::testing::Combine(::testing::Range(0, 7),
                                            ::testing::Values(proto::DEDUP_NODE, proto::DEDUP_JOB),
                                            ::testing::Values(16, 1 << 20)));

TEST(DedupTest, JobReadsLessThanNodeAndCrossesNodes) {
  const Mem m = PresetMem("qwen3-moe-tiny", 400000);
  const Case c{"qwen3-moe-tiny", 2, 4, 1, Nodes(2, 2)};
  const proto::LoadPlan none = Plan(m, c, proto::DEDUP_NONE, 1 << 20);
  const proto::LoadPlan node = Plan(m, c, proto::DEDUP_NODE, 1 << 20);
  const proto::LoadPlan job = Plan(m, c, proto::DEDUP_JOB, 1 << 20);
  EXPECT_LT(node.storage_bytes(), none.storage_bytes());
  EXPECT_LT(job.storage_bytes(), node.storage_bytes());
  bool crosses = false;
  for (const auto& rp : node.ranks()) {
    for (const auto& st : rp.steps()) {
      for (const auto& t : st.sends()) EXPECT_EQ(node.ranks(t.peer()).node(), rp.node());
    }
  }
  for (const auto& rp : job.ranks()) {
    for (const auto& st : rp.steps()) {
      for (const auto& t : st.sends()) crosses |= job.ranks(t.peer()).node() != rp.node();
    }
  }
  EXPECT_TRUE(crosses) << "tp 2 x dp 2 on two nodes: rank 0 and rank 2 share the t=0 slices";
}

TEST(DedupTest, ReadsAreBalancedAcrossTheGroup) {
  // ep 4, tp 1: all dense weights are needed by every rank; experts by one each.
  const Mem m = PresetMem("deepseek-v3-tiny", 400000);
  const proto::LoadPlan job =
      Plan(m, {"deepseek-v3-tiny", 1, 4, 1, Nodes(1, 4)}, proto::DEDUP_JOB, 64 << 10);
  std::uint64_t lo = ~0ull, hi = 0;
  for (const auto& rp : job.ranks()) {
    lo = std::min(lo, rp.storage_bytes());
    hi = std::max(hi, rp.storage_bytes());
  }
  EXPECT_GT(lo, 0u);
  // Greedy by bytes read so far over pieces of at most 64 KiB: within one piece of even.
  EXPECT_LE(hi - lo, std::uint64_t{64} << 10) << "lo " << lo << " hi " << hi;
}

// ---- Hand-made plans: partial overlaps, row lattices, strided images, duplicates ----------

proto::Copy C1(std::uint64_t src, std::uint64_t dst, std::uint64_t width) {
  proto::Copy c;
  c.set_src_offset(src);
  c.set_dst_offset(dst);
  c.set_width(width);
  c.set_rows(1);
  return c;
}
proto::Copy C2(std::uint64_t src, std::uint64_t pitch, std::uint64_t dst, std::uint64_t dpitch,
               std::uint64_t width, std::uint64_t rows) {
  proto::Copy c;
  c.set_src_offset(src);
  c.set_src_pitch(pitch);
  c.set_dst_offset(dst);
  c.set_dst_pitch(dpitch);
  c.set_width(width);
  c.set_rows(rows);
  return c;
}

proto::LoadPlan HandPlan(const std::vector<std::vector<proto::Copy>>& copies,
                         std::uint64_t file_size) {
  proto::LoadPlan p;
  proto::File* f = p.add_files();
  f->set_path("/mem/hand.safetensors");
  f->set_size(file_size);
  for (std::size_t r = 0; r < copies.size(); ++r) {
    proto::RankPlan* rp = p.add_ranks();
    rp->set_rank(static_cast<std::uint32_t>(r));
    std::uint64_t end = 0;
    for (const auto& c : copies[r]) {
      *rp->add_copies() = c;
      end = std::max(end, c.dst_offset() + (c.rows() - 1) * c.dst_pitch() + c.width());
    }
    rp->set_arena_bytes(end);
    proto::TensorOut* t = rp->add_tensors();
    t->set_name("all");
    t->set_dtype("U8");
    t->add_shape(end);
    t->set_bytes(end);
  }
  return p;
}

TEST(DedupTest, PartialOverlapsAndRowLattices) {
  // Rank 0: one long range; rank 1: two pieces overlapping it and beyond; rank 2: a middle
  // piece. Ranks 0 and 2: the same 2-D block (pitch 100, width 40, 6 rows) packed; rank 1: its
  // middle rows only, as a separate 2-D copy.
  const std::vector<std::vector<proto::Copy>> copies = {
      {C1(0, 0, 1000), C2(2000, 100, 1000, 40, 40, 6)},
      {C1(500, 0, 700), C1(1500, 700, 100), C2(2200, 100, 800, 40, 40, 2)},
      {C1(300, 64, 200), C2(2000, 100, 264, 40, 40, 6)},
  };
  proto::LoadPlan plain = HandPlan(copies, 4000);
  proto::LoadPlan dd = plain;
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_JOB, 128}, &dd).ok());
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_NONE, 128}, &plain).ok());
  const std::vector<Bytes> files = {FileBytes(0, 4000)};
  const Mem m{Checkpoint(), files};
  CheckDedup(m, plain, dd, proto::DEDUP_JOB);
  // Union: [0, 1200) + [1500, 1600) + 6 rows of 40 = 1540 bytes.
  EXPECT_EQ(dd.storage_bytes(), 1200u + 100u + 240u);
}

TEST(DedupTest, StridedArenaImagesAndDuplicatesAreReadByTheirRank) {
  // Rank 0 and 1 need the same rows, but rank 1 lays them out with a gap (dst_pitch > width):
  // not a contiguous transfer, so rank 1 reads them itself. Rank 0 also holds bytes [0, 50)
  // twice; the second copy is its own read.
  const std::vector<std::vector<proto::Copy>> copies = {
      {C1(0, 0, 100), C2(1000, 64, 100, 16, 16, 4), C1(0, 200, 50)},
      {C1(0, 0, 100), C2(1000, 64, 128, 32, 16, 4)},
  };
  proto::LoadPlan plain = HandPlan(copies, 2000);
  proto::LoadPlan dd = plain;
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_JOB, 1 << 20}, &dd).ok());
  ASSERT_TRUE(ApplyDedup({proto::DEDUP_NONE, 1 << 20}, &plain).ok());
  const std::vector<Bytes> files = {FileBytes(0, 2000)};
  const std::vector<Bytes> want = ExecPlain(plain, files);
  const std::vector<Bytes> got = ExecDedup(dd, files);
  EXPECT_TRUE(got == want);
  // [0, 100) once, rank 0's duplicate 50, both ranks' 64 row bytes: 100 + 50 + 64 + 64.
  EXPECT_EQ(dd.storage_bytes(), 278u);
  for (const auto& rp : dd.ranks()) {
    EXPECT_TRUE(
        rank::ValidateExchange(dd, rp, rank::GroupOf(dd, static_cast<int>(rp.rank()))).ok());
  }
}

TEST(DedupTest, BadOptions) {
  proto::LoadPlan p = HandPlan({{C1(0, 0, 10)}}, 100);
  EXPECT_EQ(ApplyDedup({proto::DEDUP_NODE, 0}, &p).code(), Code::kInvalidArgument);
  EXPECT_EQ(ApplyDedup({static_cast<proto::Dedup>(7), 1}, &p).code(), Code::kInvalidArgument);
  proto::Dedup d;
  EXPECT_TRUE(ParseDedup("job", &d));
  EXPECT_EQ(d, proto::DEDUP_JOB);
  EXPECT_FALSE(ParseDedup("nodes", &d));
  EXPECT_STREQ(DedupName(proto::DEDUP_NODE), "node");
}

// The runtime check refuses plans that would leave bytes unwritten, write them twice, send
// bytes not read yet, or mispair transfers; each error names what is wrong.
TEST(DedupTest, ValidateExchangeCatchesCorruptPlans) {
  const Mem m = PresetMem("qwen3-moe-tiny", 400000);
  const proto::LoadPlan good =
      Plan(m, {"qwen3-moe-tiny", 1, 4, 1, Nodes(1, 4)}, proto::DEDUP_JOB, 32 << 10);
  // A rank with both a send and a recv in one step.
  int r = -1, b = -1;
  for (const auto& rp : good.ranks()) {
    for (int s = 0; s < rp.steps_size() && r < 0; ++s) {
      if (rp.steps(s).sends_size() > 0 && rp.steps(s).recvs_size() > 0) {
        r = static_cast<int>(rp.rank());
        b = s;
      }
    }
  }
  ASSERT_GE(r, 0);
  auto check = [&](const proto::LoadPlan& p, const std::string& expect) {
    const Status s = rank::ValidateExchange(p, p.ranks(r), rank::GroupOf(p, r));
    EXPECT_FALSE(s.ok()) << expect;
    EXPECT_NE(s.message().find(expect), std::string::npos) << s.ToString();
  };
  {
    proto::LoadPlan p = good;
    p.mutable_ranks(r)->mutable_steps(b)->mutable_recvs()->RemoveLast();
    check(p, "do not cover exactly");
  }
  {
    proto::LoadPlan p = good;
    auto* t = p.mutable_ranks(r)->mutable_steps(b)->mutable_recvs(0);
    *p.mutable_ranks(r)->mutable_steps(b)->add_recvs() = *t;
    check(p, "both land at arena offset");
  }
  {
    proto::LoadPlan p = good;
    auto* t = p.mutable_ranks(r)->mutable_steps(b)->mutable_sends(0);
    t->set_offset(t->offset() + 1);
    check(p, "is not covered by this rank's reads");
  }
  {
    proto::LoadPlan p = good;
    auto* t = p.mutable_ranks(r)->mutable_steps(b)->mutable_sends(0);
    const std::uint32_t peer = t->peer();
    t->set_bytes(t->bytes() - 1);
    check(p, "sends to rank " + std::to_string(peer) + " do not pair");
  }
  {
    proto::LoadPlan p = good;
    p.mutable_ranks(r)->mutable_steps(b)->mutable_sends(0)->set_peer(static_cast<std::uint32_t>(r));
    check(p, "not another rank of its peer group");
  }
  {
    proto::LoadPlan p = good;
    p.mutable_ranks(r)->add_steps();
    check(p, "steps but rank");
  }
}

}  // namespace
}  // namespace hoist::planner
