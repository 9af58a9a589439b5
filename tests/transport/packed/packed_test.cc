// Loads of a packed checkpoint through the real pipeline on the host backend (decode jobs run by
// the CPU decoder) against the obviously-correct reference: the same plan applied with pread to
// a plain file holding the original tensors back to back (the logical bytes). Tensors: BF16 and
// F16 (coded), F32 (stored), a BF16 tensor in four column stripes; copies: ranges across
// tensors, row slices starting mid-block, column slices, stripe-aligned and unaligned column
// ranges, strided destinations. Plus the cut's invariants for packed work, damaged blocks and
// bad copies refused with named errors, and the host-side logical reader used by --verify.
#include "transport/packed/packed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "codec/codec.h"
#include "codec/huffman.h"
#include "tests/transport/packed_synth.h"
#include "tests/transport/test_util.h"
#include "transport/staging/pipeline.h"
#include "transport/staging/slot_plan.h"

namespace hoist::transport {
namespace {

using testtransport::ReferenceArena;
using testtransport::ScratchDir;

using testtransport::MakePacked;
using testtransport::Packed;
using testtransport::PlanWriter;
using testtransport::Specs;
using testtransport::TensorSpec;

proto::RankPlan MixedPlan(Packed& p) {
  PlanWriter w(p);
  w.Range(0, p.logical.size());    // everything, across tensors
  w.Rect(0, 37, 61, 0, 700);       // rows from mid-block
  w.Rect(0, 0, 96, 350, 700);      // a column half (tp 2 row-parallel)
  w.Rect(1, 0, 50, 111, 222, 64);  // columns, strided destination
  w.Rect(2, 3, 40, 5, 100);        // stored: a 2-D copy of the payload
  w.Rect(3, 0, 64, 256, 512);      // stripe-aligned columns
  w.Rect(3, 10, 33, 100, 300);     // columns across two stripes
  w.Range(p.offsets[3] + 512 * 2 * 8, p.offsets[3] + 512 * 2 * 24);  // whole rows, striped
  w.Rect(4, 0, 1, 4000, 4100);                                       // a piece of a 1-row tensor
  return w.Done();
}

struct LoadRun {
  Status status;
  std::vector<std::uint8_t> arena;
  PipelineReport report;
};

// `arena_out`, when given, points at the arena while the run lasts (for a milestone callback).
LoadRun Load(Packed& p, const proto::RankPlan& rp, PipelineOptions o,
             std::unique_ptr<Device> dev = OpenHostDevice(),
             const DeviceBuffer** arena_out = nullptr) {
  LoadRun out;
  auto streams = PackedStreams::FromPlan(p.plan);
  if (!streams.ok()) {
    out.status = streams.status();
    return out;
  }
  o.packed = &*streams;
  auto arena = dev->Allocate(rp.arena_bytes());
  auto sources = OpenSources({p.plan.files(0).path()}, {true}, o.mode);
  if (!arena.ok() || !sources.ok()) {
    out.status = !arena.ok() ? arena.status() : sources.status();
    return out;
  }
  if (arena_out != nullptr) *arena_out = &*arena;
  out.status = testtransport::WithWatchdog(
      [&] { return RunPipeline(*dev, *arena, rp, sources->files, o, &out.report); });
  out.arena.resize(rp.arena_bytes());
  EXPECT_TRUE(dev->CopyToHost(out.arena.data(), arena->ptr, out.arena.size()).ok());
  return out;
}

void ExpectMatchesReference(Packed& p, const proto::RankPlan& rp, const LoadRun& run) {
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  const auto want = ReferenceArena(p.ref_plan, rp);
  const std::int64_t bad = testtransport::FirstMismatch(want, run.arena.data());
  EXPECT_EQ(bad, -1) << "arena byte " << bad;
}

PipelineOptions Small(ReadMode mode, std::uint64_t slot_bytes) {
  PipelineOptions o;
  o.mode = mode;
  o.slots = 3;
  o.slot_bytes = slot_bytes;
  o.threads = 3;
  return o;
}

// A deep ring (pipeline.h, read_depth_bytes): wider than the configured 3 slots, at most the
// depth's 8 and the stream's slots, a fill thread and a whole-slot read per slot.
void ExpectDeep(const PipelineReport& r, const PipelineOptions& o, bool deep) {
  EXPECT_EQ(r.deep, deep);
  if (!deep) {
    EXPECT_EQ(r.slots, o.slots);
    EXPECT_EQ(r.threads, o.threads);
    return;
  }
  EXPECT_GT(r.slots, o.slots);
  EXPECT_LE(static_cast<std::uint64_t>(r.slots), std::min<std::uint64_t>(8, r.slot_seqs));
  EXPECT_EQ(r.threads, r.slots);
  EXPECT_EQ(r.chunk_bytes, o.slot_bytes);
}

// Every staged mode; direct reads wholly cold, so its ring widens to the read depth of its
// stored bytes, while its device decode slots stay two per configured slot.
TEST(PackedLoad, EveryModeMatchesTheReference) {
  Packed p = MakePacked(Specs(), 4096);
  const proto::RankPlan rp = MixedPlan(p);
  std::vector<ReadMode> modes = {ReadMode::kBuffered, ReadMode::kMmap, ReadMode::kAuto};
  auto direct = OpenDirectSource(p.plan.files(0).path());
  if (direct.ok()) modes.push_back(ReadMode::kDirect);
  for (ReadMode mode : modes) {
    SCOPED_TRACE(std::string(ReadModeName(mode)));
    PipelineOptions o = Small(mode, 16 << 10);
    o.read_depth_bytes = 8 * o.slot_bytes;
    const LoadRun run = Load(p, rp, o);
    ExpectMatchesReference(p, rp, run);
    EXPECT_GT(run.report.bytes_decoded, 0u);
    EXPECT_TRUE(run.report.decode.ran);
    EXPECT_LT(run.report.bytes_h2d, rp.arena_bytes()) << "compressed bytes cross the link";
    ExpectDeep(run.report, o, mode == ReadMode::kDirect);
  }
}

// Auto judges a packed shard by the extent of its stored blocks (a load of coded tensors alone
// has no plain copy to judge it by): evicted, the load is read as direct reads it (deep); back in
// the page cache, through the mapping.
TEST(PackedLoad, AutoReadsAnEvictedShardDeepAndACachedOneMapped) {
  Packed p = MakePacked(Specs(), 4096);
  PlanWriter w(p);  // coded tensors only: every byte read is a stored block
  w.Rect(0, 0, 96, 0, 700);
  w.Rect(3, 0, 64, 128, 384);
  w.Rect(4, 0, 1, 0, 5000);
  const proto::RankPlan rp = w.Done();
  const std::string& path = p.plan.files(0).path();
  auto probe = OpenDirectSource(path);
  if (!probe.ok()) GTEST_SKIP() << "O_DIRECT unsupported here";
  if (!(*probe)->ResidentNow(RowsRead{0, 0, 1, 1}).has_value()) {
    GTEST_SKIP() << "no cachestat(2) on this kernel: auto cannot judge whole files";
  }
  if (!testtransport::Evict(path, 0, 0)) GTEST_SKIP() << "no fadvise";
  if (Residency::Measure(path)->TotalResident() != 0) {
    GTEST_SKIP() << "this filesystem keeps pages after DONTNEED";
  }
  PipelineOptions o = Small(ReadMode::kAuto, 16 << 10);
  o.read_depth_bytes = 8 * o.slot_bytes;
  const LoadRun cold = Load(p, rp, o);
  ExpectMatchesReference(p, rp, cold);
  ExpectDeep(cold.report, o, true);
  testtransport::Warm(path);
  const LoadRun hot = Load(p, rp, o);
  ExpectMatchesReference(p, rp, hot);
  ExpectDeep(hot.report, o, false);
}

TEST(PackedLoad, SlotSizesFromOneBlockUpMatchTheReference) {
  Packed p = MakePacked(Specs(), 2048);
  const proto::RankPlan rp = MixedPlan(p);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  auto work = streams->Translate(rp);
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  const std::uint64_t biggest = work->decode.max_block_bytes;
  for (std::uint64_t slot : {biggest, biggest + 1000, 3 * biggest + 7, std::uint64_t{1} << 20}) {
    SCOPED_TRACE(slot);
    ExpectMatchesReference(p, rp, Load(p, rp, Small(ReadMode::kBuffered, slot)));
  }
  const LoadRun small = Load(p, rp, Small(ReadMode::kBuffered, biggest - 1));
  EXPECT_EQ(small.status.code(), Code::kInvalidArgument) << small.status.ToString();
  EXPECT_NE(small.status.message().find("--slot-mib"), std::string::npos);
}

// A cut made ahead (while the device opens, CutPackedAhead) is taken by a run of its geometry,
// and a run of another slot size cuts again; both load the same bytes. The small slots make many
// more sequences than device slots (two per staging slot), so device slots are reused.
TEST(PackedLoad, ACutMadeAheadIsTakenOnlyByARunOfItsGeometry) {
  Packed p = MakePacked(Specs(), 2048);
  const proto::RankPlan rp = MixedPlan(p);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  PipelineOptions o = Small(ReadMode::kMmap, 48 << 10);
  for (std::uint64_t made_for : {o.slot_bytes, o.slot_bytes * 2}) {
    SCOPED_TRACE(made_for);
    auto work = streams->Translate(rp);
    ASSERT_TRUE(work.ok()) << work.status().ToString();
    PipelineOptions ahead_options = o;
    ahead_options.slot_bytes = made_for;
    CutAhead ahead = CutPackedAhead(*work, ahead_options);
    const std::uint64_t ahead_seqs = ahead.cut.seqs();
    ASSERT_GT(ahead_seqs, 0u);
    PipelineOptions run_options = o;
    run_options.packed_work = &*work;
    run_options.cut_ahead = &ahead;
    const LoadRun run = Load(p, rp, run_options);
    ExpectMatchesReference(p, rp, run);
    EXPECT_GT(run.report.slot_seqs, 2u * static_cast<std::uint64_t>(o.slots));
    std::set<std::string> steps;  // the set-up's spans say which it was
    int made = 0;                 // and the decoder's making is a span of its own
    for (const NamedSpan& sp : run.report.spans.Named()) {
      if (sp.lane == "setup") steps.insert(sp.what);
      if (sp.lane == "decoder" && sp.what == "decoder made" && sp.seconds >= 0) ++made;
    }
    EXPECT_TRUE(steps.count("decoder started"));
    EXPECT_EQ(made, 1);
    if (made_for == o.slot_bytes) {
      EXPECT_EQ(run.report.slot_seqs, ahead_seqs);
      EXPECT_EQ(ahead.cut.seqs(), 0u) << "the run took the cut made ahead";
      EXPECT_TRUE(steps.count("slot cut made ahead, taken"));
    } else {
      EXPECT_EQ(ahead.cut.seqs(), ahead_seqs) << "a cut of another geometry is left alone";
      EXPECT_TRUE(steps.count("slot cut made again (the ahead one does not fit)"));
    }
  }
}

// Until the decoder is made, the copies go on and the decodes wait (the first copies no longer
// wait for the decoder's upload): with a decoder that takes 300 ms to make, several slots are
// copied before it is, then every decode runs, in order, and the arena equals the reference. A
// milestone is recorded after its slots' decodes: when its event completes, its copies' bytes
// are in the arena. Loads of more sequences than device slots (the copies then wait for the
// decoder to free one) and of fewer (all decodes wait until the drain).
TEST(PackedLoad, CopiesRunAheadOfASlowDecoderAndMilestonesWaitForTheirDecodes) {
  Packed p = MakePacked(Specs(), 2048);
  const proto::RankPlan rp = MixedPlan(p);
  const auto want = ReferenceArena(p.ref_plan, rp);
  const proto::Copy& first = rp.copies(0);  // everything, across tensors: many slots
  for (std::uint64_t slot_bytes : {std::uint64_t{16} << 10, std::uint64_t{1} << 20}) {
    SCOPED_TRACE(slot_bytes);
    PipelineOptions o = Small(ReadMode::kMmap, slot_bytes);
    auto dev = std::make_unique<testtransport::SlowDecoderDevice>(OpenHostDevice(),
                                                                  std::chrono::milliseconds(300));
    Device* d = dev.get();
    std::vector<EventId> events;
    for (int i = 0; i < 2; ++i) events.push_back(*d->CreateEvent(false));
    o.milestone_copies = {1, rp.copies_size()};
    o.milestone_events = events;
    std::vector<std::int64_t> mismatch(2, -2);
    const DeviceBuffer* arena = nullptr;  // known once the run allocated it: read through `d`
    o.on_milestone = [&](int i) {
      if (i != 0 || arena == nullptr) return;
      EXPECT_TRUE(d->Wait(events[0]).ok());
      std::vector<std::uint8_t> got(first.width());
      EXPECT_TRUE(d->CopyToHost(got.data(),
                                static_cast<std::byte*>(arena->ptr) + first.dst_offset(),
                                got.size())
                      .ok());
      mismatch[0] = -1;
      for (std::size_t b = 0; b < got.size() && mismatch[0] < 0; ++b) {
        if (got[b] != want.bytes[first.dst_offset() + b]) mismatch[0] = static_cast<int>(b);
      }
    };
    const LoadRun run = Load(p, rp, o, std::move(dev), &arena);
    ExpectMatchesReference(p, rp, run);
    EXPECT_EQ(mismatch[0], -1) << "milestone 0 completed before its bytes were decoded";
    double made_start = -1, made_end = -1, first_decode = 1e300;
    int copies_before = 0;
    std::vector<NamedSpan> spans = run.report.spans.Named();
    for (const NamedSpan& sp : spans) {
      if (sp.lane == "decoder" && sp.what == "decoder made") {
        made_start = sp.start_s;
        made_end = sp.start_s + sp.seconds;
      }
      if (sp.lane == "decode-0") first_decode = std::min(first_decode, sp.start_s);
    }
    ASSERT_GT(made_end, 0);
    // The device's steps of the making (here its one step, the delay) are spans inside it.
    int delayed = 0;
    for (const NamedSpan& sp : spans) {
      if (sp.lane != "decoder" || sp.what != "making delayed") continue;
      ++delayed;
      EXPECT_GE(sp.seconds, 0.3 - 1e-3);
      EXPECT_GE(sp.start_s, made_start - 1e-6);
      EXPECT_LE(sp.start_s + sp.seconds, made_end + 1e-6);
    }
    EXPECT_EQ(delayed, 1);
    for (const NamedSpan& sp : spans) {
      copies_before += sp.lane == "h2d-0" && sp.start_s + sp.seconds < made_end;
    }
    EXPECT_GE(first_decode, made_end - 1e-3) << "no decode before the decoder";
    // (Up to the 6 device slots' copies can; a load that waited for the decoder had 1.)
    EXPECT_GE(copies_before, std::min<int>(3, static_cast<int>(run.report.slot_seqs)))
        << "the copies went ahead of the decoder";
  }
}

TEST(PackedLoad, RandomRowAndColumnSlicesMatchTheReference) {
  Packed p = MakePacked(Specs(), 3000);
  std::mt19937_64 rng(7);
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 6; ++round) {
    PlanWriter w(p);
    for (int k = 0; k < 12; ++k) {
      const int i = static_cast<int>(pick(0, 3));
      const TensorSpec& t = p.specs[i];
      const std::uint64_t r0 = pick(0, t.rows - 1), r1 = pick(r0 + 1, t.rows);
      const std::uint64_t c0 = pick(0, t.cols - 1), c1 = pick(c0 + 1, t.cols);
      w.Rect(i, r0, r1, c0, c1, pick(0, 1) * 32);
    }
    const proto::RankPlan rp = w.Done();
    ExpectMatchesReference(p, rp, Load(p, rp, Small(ReadMode::kMmap, 40 << 10)));
  }
}

TEST(PackedLoad, CutKeepsBlocksWholeInsideTheirSlots) {
  Packed p = MakePacked(Specs(), 2048);
  const proto::RankPlan rp = MixedPlan(p);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  auto work = streams->Translate(rp);
  ASSERT_TRUE(work.ok());
  const std::uint64_t slot = 3 * work->decode.max_block_bytes + 5;
  const SlotPlan cut = CutStaged(*work, slot, 1000);
  ASSERT_EQ(cut.jobs.size(), work->decode.jobs.size());
  ASSERT_EQ(cut.seq_jobs.size(), cut.seqs() + 1);
  std::uint64_t piece_bytes = 0;
  for (const SlotPiece& x : cut.pieces) piece_bytes += x.bytes();
  std::uint64_t want = 0;
  for (const DecodeUnit& u : work->units) want += u.bytes;
  for (const proto::Copy& c : work->plan.copies()) want += c.width() * c.rows();
  EXPECT_EQ(piece_bytes, want) << "pieces read every block and stored byte once";
  for (std::uint64_t q = 0; q < cut.seqs(); ++q) {
    for (std::size_t j = cut.seq_jobs[q]; j < cut.seq_jobs[q + 1]; ++j) {
      EXPECT_LE(cut.jobs[j].src + cut.jobs[j].bytes, cut.seq_bytes[q]) << "job " << j;
      EXPECT_EQ(cut.jobs[j].block, work->decode.jobs[j].block);
    }
  }
  ASSERT_EQ(cut.copy_last_seq.size(), static_cast<std::size_t>(rp.copies_size()));
  for (std::size_t i = 1; i < cut.copy_last_seq.size(); ++i) {
    EXPECT_LE(cut.copy_last_seq[i - 1], cut.copy_last_seq[i]);
  }
  EXPECT_EQ(cut.copy_last_seq.back(), static_cast<std::int64_t>(cut.seqs()) - 1);
}

TEST(PackedLoad, TheDecodeSetKeepsEachStreamsCodeLengthsInStreamOrder) {
  Packed p = MakePacked(Specs(), 2048);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  auto work = streams->Translate(MixedPlan(p));
  ASSERT_TRUE(work.ok());
  const DecodeSet& set = work->decode;
  ASSERT_GE(set.streams.size(), 2u);
  ASSERT_EQ(set.code_lengths.size(), set.streams.size());
  std::uint64_t max_words = 0;
  int coded = 0;
  for (std::size_t s = 0; s < set.streams.size(); ++s) {
    // The lengths the stream's own header holds, parsed again independently of the set.
    const auto& header = set.streams[s];
    EXPECT_EQ(set.code_lengths[s], header.code_lengths)
        << "stream " << s << " (" << set.names[s] << ")";
    const bool any = std::any_of(header.code_lengths.begin(), header.code_lengths.end(),
                                 [](std::uint8_t l) { return l != 0; });
    EXPECT_EQ(any, header.method == codec::Method::kHuffman) << set.names[s];
    coded += any ? 1 : 0;
    max_words = std::max(max_words, set.streams[s].max_block_bit_words);
  }
  EXPECT_GE(coded, 1) << "no coded stream: the test would not see a table";
  EXPECT_EQ(set.max_block_bit_words, max_words);

  // A cut's set: the same streams, names, tables and maxima with the cut's jobs; a copy leaves
  // the work's set whole, a move leaves its jobs.
  const std::vector<DecodeJob> cut_jobs(set.jobs.rbegin(), set.jobs.rend());
  const auto expect_tables = [&](const DecodeSet& got, const DecodeSet& want) {
    ASSERT_EQ(got.streams.size(), want.streams.size());
    EXPECT_EQ(got.names, want.names);
    EXPECT_EQ(got.code_lengths, want.code_lengths);
    EXPECT_EQ(got.max_block_bytes, want.max_block_bytes);
    EXPECT_EQ(got.max_block_bit_words, want.max_block_bit_words);
    ASSERT_EQ(got.jobs.size(), cut_jobs.size());
    for (std::size_t j = 0; j < cut_jobs.size(); ++j) EXPECT_EQ(got.jobs[j].src, cut_jobs[j].src);
  };
  const DecodeSet before = set.CopyTablesWith(set.jobs);
  expect_tables(set.CopyTablesWith(cut_jobs), before);
  EXPECT_EQ(set.code_lengths, before.code_lengths) << "a copy leaves the set whole";
  const DecodeSet moved = work->decode.MoveTablesWith(cut_jobs);
  expect_tables(moved, before);
  EXPECT_EQ(work->decode.jobs.size(), before.jobs.size()) << "a move leaves the work's jobs";
}

TEST(PackedLoad, ADamagedBlockIsANamedError) {
  Packed p = MakePacked(Specs(), 4096);
  const proto::RankPlan rp = MixedPlan(p);
  // Flip a raw byte in the second block of tensor a's stream: only its checksum sees it.
  const proto::PackedStream& s = p.plan.packed(0).streams(0);
  auto info = codec::ParseHeader(
      std::span(reinterpret_cast<const std::uint8_t*>(s.header().data()), s.header().size()),
      s.bytes(), "a");
  ASSERT_TRUE(info.ok());
  const std::string path = p.plan.files(0).path();
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const long at = static_cast<long>(s.offset() + info->header_bytes + info->block_offsets[1] + 3);
  std::fseek(f, at, SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
  const LoadRun run = Load(p, rp, Small(ReadMode::kBuffered, 64 << 10));
  ASSERT_EQ(run.status.code(), Code::kCorrupt) << run.status.ToString();
  EXPECT_NE(run.status.message().find("a.bf16"), std::string::npos) << run.status.ToString();
  EXPECT_NE(run.status.message().find("block 1"), std::string::npos) << run.status.ToString();
  EXPECT_NE(run.status.message().find(path), std::string::npos) << run.status.ToString();
}

TEST(PackedLoad, BadCopiesAndModesAreRefused) {
  Packed p = MakePacked(Specs(), 4096);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  proto::RankPlan rp;
  proto::Copy* c = rp.add_copies();
  c->set_file(0);
  c->set_src_offset(1);  // cuts a BF16 value
  c->set_width(10);
  c->set_rows(1);
  rp.set_arena_bytes(16);
  auto cut_value = streams->Translate(rp);
  ASSERT_FALSE(cut_value.ok());
  EXPECT_NE(cut_value.status().message().find("cuts a value of tensor a.bf16"), std::string::npos)
      << cut_value.status().ToString();
  c->set_src_offset(p.logical.size());
  EXPECT_EQ(streams->Translate(rp).status().code(), Code::kCorrupt);
  // Part of a row of the striped tensor followed by part of the next: no stripe rectangle.
  c->set_src_offset(p.offsets[3] + 2 * 500);
  c->set_width(2 * 100);
  auto striped = streams->Translate(rp);
  ASSERT_FALSE(striped.ok());
  EXPECT_NE(striped.status().message().find("striped tensor d.striped"), std::string::npos);
  Packed q = MakePacked(Specs(), 4096);
  const proto::RankPlan mixed = MixedPlan(q);
  const LoadRun pageable = Load(q, mixed, Small(ReadMode::kPageable, 64 << 10));
  EXPECT_EQ(pageable.status.code(), Code::kInvalidArgument) << pageable.status.ToString();
}

TEST(PackedLoad, ADamagedHeaderIsRefusedWhenThePlanIsRead) {
  Packed p = MakePacked(Specs(), 4096);
  std::string* h = p.plan.mutable_packed(1)->mutable_streams(0)->mutable_header();
  (*h)[300] = static_cast<char>((*h)[300] ^ 1);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_FALSE(streams.ok());
  EXPECT_EQ(streams.status().code(), Code::kCorrupt);
  EXPECT_NE(streams.status().message().find("b.f16"), std::string::npos);
}

// Stored streams (c.f32): units of whole blocks, each checked by the decoder, so no plain copy
// of a packed file is left, for every backend (the CUDA decoder checks stored blocks too). A
// flipped byte of a stored payload is a named error.
TEST(PackedLoad, StoredBytesAreCheckedBlocks) {
  Packed p = MakePacked(Specs(), 4096);
  const proto::RankPlan rp = MixedPlan(p);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  auto checked = streams->Translate(rp);
  ASSERT_TRUE(checked.ok()) << checked.status().ToString();
  EXPECT_EQ(checked->plan.copies_size(), 0);
  for (const DecodeJob& j : checked->decode.jobs) {  // each job carries its block's checksum
    EXPECT_EQ(j.checksum, checked->decode.streams[j.stream].block_checksums[j.block]);
  }

  const proto::PackedStream& s = p.plan.packed(2).streams(0);  // c.f32
  ASSERT_EQ(p.plan.packed(2).name(), "c.f32");
  const std::string path = p.plan.files(0).path();
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const long at = static_cast<long>(s.offset() + s.header().size() + 4 * 129 * 5 + 2);
  std::fseek(f, at, SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(c ^ 0x04, f);
  std::fclose(f);
  const LoadRun run = Load(p, rp, Small(ReadMode::kBuffered, 64 << 10));
  ASSERT_EQ(run.status.code(), Code::kCorrupt) << run.status.ToString();
  for (const std::string& w : {std::string("c.f32"), std::string("checksum mismatch"), path,
                               "stream at offset " + std::to_string(s.offset())}) {
    EXPECT_NE(run.status.message().find(w), std::string::npos)
        << w << ": " << run.status.ToString();
  }
}

// A stream whose header names another tensor (or another place) is refused when the plan is
// read; the host-side reader (--verify's reference) checks each tensor against the index's
// XXH64 of the original bytes, not only against what the stream says of itself.
TEST(PackedLoad, IdentityAndTheIndexChecksumAreChecked) {
  Packed p = MakePacked(Specs(), 4096);
  proto::LoadPlan other = p.plan;
  other.mutable_packed(1)->set_name_xxh64(other.packed(1).name_xxh64() ^ 1);
  auto refused = PackedStreams::FromPlan(other);
  ASSERT_EQ(refused.status().code(), Code::kCorrupt) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("b.f16"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("identity"), std::string::npos)
      << refused.status().ToString();
  // Stripes 1 and 2 of d.striped trade places (offsets and headers).
  other = p.plan;
  proto::PackedTensor* d = other.mutable_packed(3);
  ASSERT_EQ(d->name(), "d.striped");
  proto::PackedStream* a = d->mutable_streams(1);
  proto::PackedStream* b = d->mutable_streams(2);
  std::swap(*a->mutable_header(), *b->mutable_header());
  const std::uint64_t off = a->offset();
  a->set_offset(b->offset());
  b->set_offset(off);
  EXPECT_EQ(PackedStreams::FromPlan(other).status().code(), Code::kCorrupt);

  other = p.plan;
  other.mutable_packed(0)->set_xxh64(other.packed(0).xxh64() ^ 1);
  auto streams = PackedStreams::FromPlan(other);
  ASSERT_TRUE(streams.ok()) << streams.status().ToString();
  std::vector<std::byte> got(p.logical.size());
  const Status s = streams->ReadLogical(0, 0, 16, got.data());
  ASSERT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  for (const char* w : {"a.bf16", "the index recorded", "logical offset 0"}) {
    EXPECT_NE(s.message().find(w), std::string::npos) << w << ": " << s.ToString();
  }
  EXPECT_TRUE(streams->ReadLogical(0, p.offsets[1], 16, got.data()).ok());
}

TEST(PackedLoad, ReadLogicalReturnsTheOriginalBytes) {
  Packed p = MakePacked(Specs(), 4096);
  auto streams = PackedStreams::FromPlan(p.plan);
  ASSERT_TRUE(streams.ok());
  std::vector<std::byte> got(p.logical.size());
  ASSERT_TRUE(streams->ReadLogical(0, 0, got.size(), got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), p.logical.data(), got.size()), 0);
  const std::uint64_t a = p.offsets[3] + 1234, n = 5000;
  ASSERT_TRUE(streams->ReadLogical(0, a, n, got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), p.logical.data() + a, n), 0);
}

}  // namespace
}  // namespace hoist::transport
