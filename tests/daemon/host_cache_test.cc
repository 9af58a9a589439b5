// The daemon's host cache (daemon/host_cache.h) on the host backend (blocks decoded by its CPU
// decoder through the Device seam), against the obviously-correct reference: the same rank plan
// applied with pread to a plain file holding the original tensors back to back
// (testtransport::ReferenceArena). A packed plan's cache holds exactly the compressed stream of
// its staged cut (fewer bytes than the arena's payload) and restores match the reference again
// and again, with slots small enough that the device-slot ring wraps and with the default slot;
// a rank with stored tensors only needs no decoder; a damaged block is a Corrupt naming the shard,
// the tensor and the block at restore; a truncated shard is an IoError naming it at capture; a
// plain plan keeps the arena copy. Then the daemon in-process: `release` / `restore` of a packed
// cache twice, attach after each restore, the generation growing.
#include "daemon/host_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <span>
#include <thread>

#include "codec/codec.h"
#include "daemon/serve.h"
#include "daemon/serve_wire.h"
#include "tests/transport/packed_synth.h"
#include "tests/transport/test_util.h"
#include "transport/packed/packed.h"
#include "transport/staging/slot_plan.h"

namespace hoist::rank {
namespace {

using testtransport::Expected;
using testtransport::MakePacked;
using testtransport::Packed;
using testtransport::PlanWriter;
using testtransport::ReferenceArena;
using testtransport::Specs;
using testtransport::TensorSpec;

// The synthetic packed checkpoint plus its logical image as a plain file 1 of both plans.
Packed MakeCheckpoint() {
  Packed p = MakePacked(Specs(), 2048);
  *p.plan.add_files() = p.ref_plan.files(0);
  *p.ref_plan.add_files() = p.ref_plan.files(0);
  return p;
}

proto::RankPlan MixedPlan(const Packed& p) {
  PlanWriter w(p);
  w.Range(0, p.logical.size());     // everything, across tensors
  w.Rect(0, 37, 61, 0, 700);        // rows from mid-block
  w.Rect(1, 0, 50, 111, 222, 64);   // columns, strided destination
  w.Rect(2, 3, 40, 5, 100);         // stored F32: a 2-D copy of the payload
  w.Rect(3, 10, 33, 100, 300);      // columns across two stripes
  w.Fill(1000, 0x5A);               // vocab padding
  w.Rect(4, 0, 1, 4000, 4100);      // a piece of a 1-row tensor
  w.Rect(0, 2, 9, 100, 300, 0, 1);  // from the plain file
  w.Rect(2, 0, 40, 0, 129, 16, 1);  // a whole stored tensor, from the plain file
  return w.Done();
}

std::uint64_t WrittenBytes(const proto::RankPlan& rp) {
  std::uint64_t n = 0;
  for (const proto::Copy& c : rp.copies()) n += c.width() * c.rows();
  for (const proto::Fill& f : rp.fills()) n += f.bytes();
  return n;
}

// What the pipeline would move for `rp`: every block of its units and every stored byte.
// The bytes the cut reads (every unit and stored copy once) and the most the cut's stream can
// add to them: runs of blocks start 16-byte aligned in their slot (a gap of at most 15 bytes
// before each unit, or each unit's part in a new slot).
struct StreamSize {
  std::uint64_t read = 0, max_gaps = 0;
};
StreamSize StreamBytes(const Packed& p, const proto::RankPlan& rp, std::uint64_t slots) {
  auto streams = transport::PackedStreams::FromPlan(p.plan);
  EXPECT_TRUE(streams.ok()) << streams.status().ToString();
  auto work = streams->Translate(rp);
  EXPECT_TRUE(work.ok()) << work.status().ToString();
  StreamSize n;
  for (const transport::DecodeUnit& u : work->units) n.read += u.bytes;
  for (const proto::Copy& c : work->plan.copies()) n.read += c.width() * c.rows();
  n.max_gaps = 15 * (work->units.size() + slots);
  return n;
}

void ExpectStreamSize(std::uint64_t bytes, const Packed& p, const proto::RankPlan& rp,
                      std::uint64_t slots) {
  const StreamSize n = StreamBytes(p, rp, slots);
  EXPECT_GE(bytes, n.read) << "the cache holds every byte the cut reads";
  EXPECT_LE(bytes, n.read + n.max_gaps) << "slots back to back, no gap but alignment";
}

std::uint64_t MaxBlockBytes(const Packed& p, const proto::RankPlan& rp) {
  auto streams = transport::PackedStreams::FromPlan(p.plan);
  auto work = streams->Translate(rp);
  return work.ok() ? work->decode.max_block_bytes : 0;
}

std::vector<std::uint8_t> ArenaBytes(transport::Device& dev, const transport::DeviceBuffer& a) {
  std::vector<std::uint8_t> out(a.bytes);
  EXPECT_TRUE(dev.CopyToHost(out.data(), a.ptr, a.bytes).ok());
  return out;
}

// One restore, checked against the reference; the arena is freed.
void RestoreMatches(transport::Device& dev, HostCache& cache, const Expected& want,
                    const proto::RankPlan& rp) {
  RestoreTiming t;
  Result<transport::DeviceBuffer> a =
      testtransport::WithWatchdog([&] { return cache.Restore(&t); });
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->bytes, rp.arena_bytes());
  const std::vector<std::uint8_t> got = ArenaBytes(dev, *a);
  EXPECT_EQ(testtransport::FirstMismatch(want, got.data()), -1);
  EXPECT_EQ(t.bytes, WrittenBytes(rp));
  EXPECT_EQ(t.moved_bytes, cache.bytes());
  EXPECT_GT(t.seconds, 0);
  EXPECT_GT(t.dma_seconds, 0);
  EXPECT_GT(t.decode_seconds, 0);
  EXPECT_TRUE(dev.Free(*a).ok());
}

TEST(PackedHostCache, HoldsTheCompressedStreamAndRestoresMatchTheReference) {
  Packed p = MakeCheckpoint();
  const proto::RankPlan rp = MixedPlan(p);
  const Expected want = ReferenceArena(p.ref_plan, rp);
  const std::uint64_t block = MaxBlockBytes(p, rp);
  ASSERT_GT(block, 0u);
  auto dev = transport::OpenHostDevice();
  // The capture reads the files, not the arena: an arena never written (0xCD) will do.
  auto arena = dev->Allocate(rp.arena_bytes());
  ASSERT_TRUE(arena.ok());
  for (std::uint64_t slot : {block, 3 * block + 7, std::uint64_t{64} << 20}) {
    SCOPED_TRACE("slot " + std::to_string(slot));
    HostCacheOptions o;
    o.slot_bytes = slot;
    o.read_threads = 3;
    auto cache = HostCache::Capture(*dev, *arena, p.plan, rp, o);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    ASSERT_TRUE((*cache)->packed());
    ExpectStreamSize((*cache)->bytes(), p, rp, (*cache)->slots());
    EXPECT_LT((*cache)->bytes(), WrittenBytes(rp)) << "coded tensors are smaller";
    if (slot < (1u << 20)) {
      EXPECT_GT((*cache)->slots(), 8u) << "the 4 device slots are reused";
    }
    RestoreMatches(*dev, **cache, want, rp);
    RestoreMatches(*dev, **cache, want, rp);
  }
}

// A restore copies the first device slots' blocks while its decoder is made and decodes them
// once it is (then, the slots reused, in turn): with a decoder that takes 200 ms to make, the
// arena still equals the reference, restore after restore, and the restore's time includes the
// making.
TEST(PackedHostCache, RestoresMatchTheReferenceWhenTheDecoderIsSlowToMake) {
  Packed p = MakeCheckpoint();
  const proto::RankPlan rp = MixedPlan(p);
  const Expected want = ReferenceArena(p.ref_plan, rp);
  const std::uint64_t block = MaxBlockBytes(p, rp);
  testtransport::SlowDecoderDevice dev(transport::OpenHostDevice(), std::chrono::milliseconds(200));
  for (std::uint64_t slot : {block, std::uint64_t{64} << 20}) {  // many slots, and one
    SCOPED_TRACE("slot " + std::to_string(slot));
    HostCacheOptions o;
    o.slot_bytes = slot;
    auto cache = HostCache::Capture(dev, {}, p.plan, rp, o);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    ASSERT_TRUE((*cache)->packed());
    RestoreMatches(dev, **cache, want, rp);
    RestoreTiming t;
    auto a = testtransport::WithWatchdog([&] { return (*cache)->Restore(&t); });
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(testtransport::FirstMismatch(want, ArenaBytes(dev, *a).data()), -1);
    EXPECT_GE(t.seconds, 0.2) << "the decoder's making is part of the restore";
    EXPECT_TRUE(dev.Free(*a).ok());
  }
}

// A stored stream's bytes are whole blocks that the decoder checks: the cache holds the blocks
// the copies touch, and a restore runs the decoder.
TEST(PackedHostCache, StoredTensorsAreCheckedBlocksOnTheHost) {
  Packed p = MakeCheckpoint();
  PlanWriter w(p);
  w.Rect(2, 0, 40, 0, 129);        // the stored F32 tensor of the shard
  w.Rect(2, 1, 30, 7, 77, 8);      // a 2-D piece of it
  w.Rect(1, 0, 50, 0, 333, 0, 1);  // a coded tensor's original bytes, from the plain file
  const proto::RankPlan rp = w.Done();
  auto dev = transport::OpenHostDevice();
  auto cache = HostCache::Capture(*dev, {}, p.plan, rp);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_GT((*cache)->bytes(), WrittenBytes(rp));  // whole blocks and their neighbours' rows
  RestoreTiming t;
  auto a = testtransport::WithWatchdog([&] { return (*cache)->Restore(&t); });
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::vector<std::uint8_t> got = ArenaBytes(*dev, *a);
  EXPECT_EQ(testtransport::FirstMismatch(ReferenceArena(p.ref_plan, rp), got.data()), -1);
}

// Flips a byte inside block 1 of tensor a.bf16's stream (only its checksum sees it).
void DamageBlock(const Packed& p) {
  const proto::PackedStream& s = p.plan.packed(0).streams(0);
  auto info = codec::ParseHeader(
      std::span(reinterpret_cast<const std::uint8_t*>(s.header().data()), s.header().size()),
      s.bytes(), "a");
  ASSERT_TRUE(info.ok());
  std::FILE* f = std::fopen(p.plan.files(0).path().c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  const long at = static_cast<long>(s.offset() + info->header_bytes + info->block_offsets[1] + 3);
  std::fseek(f, at, SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(c ^ 0x40, f);
  std::fclose(f);
}

TEST(PackedHostCache, ADamagedBlockIsACorruptNamingTheTensorAtRestore) {
  Packed p = MakeCheckpoint();
  const proto::RankPlan rp = MixedPlan(p);
  DamageBlock(p);
  auto dev = transport::OpenHostDevice();
  auto cache = HostCache::Capture(*dev, {}, p.plan, rp);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();  // capture reads, it does not decode
  for (int round = 0; round < 2; ++round) {
    RestoreTiming t;
    auto a = testtransport::WithWatchdog([&] { return (*cache)->Restore(&t); });
    ASSERT_FALSE(a.ok());
    const Status& s = a.status();
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_NE(s.message().find("a.bf16"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("block 1"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(p.plan.files(0).path()), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("host cache: restoring"), std::string::npos) << s.ToString();
  }
}

TEST(PackedHostCache, ATruncatedShardIsAnIoErrorNamingItAtCapture) {
  Packed p = MakeCheckpoint();
  const proto::RankPlan rp = MixedPlan(p);
  const std::string path = p.plan.files(0).path();
  std::filesystem::resize_file(path, p.plan.files(0).size() / 2);
  auto dev = transport::OpenHostDevice();
  auto cache = HostCache::Capture(*dev, {}, p.plan, rp);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), Code::kIoError) << cache.status().ToString();
  EXPECT_NE(cache.status().message().find(path), std::string::npos) << cache.status().ToString();
  EXPECT_NE(cache.status().message().find("end of file"), std::string::npos);
}

TEST(PlainHostCache, APlanWithoutPackedTensorsKeepsTheArena) {
  auto dev = transport::OpenHostDevice();
  const std::uint64_t n = (3u << 20) + 123;
  auto arena = dev->Allocate(n);
  ASSERT_TRUE(arena.ok());
  const std::vector<std::uint8_t> bytes = testtransport::Pattern(n, 41);
  transport::Copy2D c;
  c.dst = arena->ptr;
  c.src = bytes.data();
  c.width = n;
  ASSERT_TRUE(dev->CopySync(c).ok());
  proto::LoadPlan plan;
  proto::RankPlan* rp = plan.add_ranks();
  rp->set_arena_bytes(n);
  auto cache = HostCache::Capture(*dev, *arena, plan, *rp);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  EXPECT_FALSE((*cache)->packed());
  EXPECT_EQ((*cache)->bytes(), n);
  ASSERT_TRUE(dev->Free(*arena).ok());
  for (int round = 0; round < 2; ++round) {
    RestoreTiming t;
    auto a = (*cache)->Restore(&t);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(ArenaBytes(*dev, *a), bytes);
    EXPECT_EQ(t.bytes, n);
    EXPECT_EQ(t.moved_bytes, n);
    EXPECT_TRUE(dev->Free(*a).ok());
  }
}

// ----- the daemon in-process with a packed host cache

proto::DaemonResponse Call(const std::string& socket, proto::DaemonRequest req,
                           std::vector<int>* fds = nullptr) {
  Result<std::unique_ptr<DaemonConnection>> c = DaemonConnection::Connect(socket);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  Result<proto::DaemonResponse> r = (*c)->Call(req, fds);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : proto::DaemonResponse{};
}

// Attaches, reads the arena through the received memfd and checks it against the reference.
void AttachMatches(const std::string& socket, const Expected& want, std::uint64_t generation) {
  proto::DaemonRequest req;
  req.mutable_attach();
  std::vector<int> fds;
  const proto::DaemonResponse r = Call(socket, req, &fds);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(r.attach().generation(), generation);
  std::vector<std::uint8_t> got(r.attach().arena_bytes());
  EXPECT_EQ(::pread(fds[0], got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  ::close(fds[0]);
  ASSERT_EQ(got.size(), want.bytes.size());
  EXPECT_EQ(testtransport::FirstMismatch(want, got.data()), -1);
}

// Asks for the status until no client is attached (a closed connection is noticed by the serving
// loop in its own time); false after 10 s.
bool WaitDetached(const std::string& socket) {
  for (int i = 0; i < 1000; ++i) {
    proto::DaemonRequest req;
    req.mutable_status();
    const proto::DaemonResponse r = Call(socket, req);
    if (r.ok() && r.status().clients_attached() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(PackedHostCache, DaemonReleasesAndRestoresTwice) {
  Packed p = MakeCheckpoint();
  const proto::RankPlan rp = MixedPlan(p);
  *p.plan.add_ranks() = rp;
  const Expected want = ReferenceArena(p.ref_plan, rp);
  LoadedRank lr;  // as a load leaves it: the reference in the arena
  lr.device = transport::OpenHostDevice();
  lr.arena = *lr.device->Allocate(rp.arena_bytes());
  transport::Copy2D c;
  c.dst = lr.arena.ptr;
  c.src = want.bytes.data();
  c.width = want.bytes.size();
  ASSERT_TRUE(lr.device->CopySync(c).ok());
  testtransport::ScratchDir dir;
  ServeOptions o;
  o.socket_path = dir.Sub("rank-0.sock");
  o.host_cache = true;
  Result<std::unique_ptr<Daemon>> d = Daemon::Start(std::move(lr), p.plan, 0, o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::thread serve([&] { EXPECT_TRUE((*d)->Serve().ok()); });
  const proto::StatusReply s = (*d)->GetStatus();
  ExpectStreamSize(s.host_cache_bytes(), p, rp, s.host_cache_bytes() / 4096 + 1);
  EXPECT_LT(s.host_cache_bytes(), WrittenBytes(rp)) << "coded tensors are smaller";
  for (std::uint64_t generation : {2u, 3u}) {
    ASSERT_TRUE(WaitDetached(o.socket_path));
    proto::DaemonRequest req;
    req.mutable_release();
    proto::DaemonResponse r = Call(o.socket_path, req);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.release().freed_bytes(), rp.arena_bytes());
    req.mutable_restore()->set_verify(generation == 3);  // the second restore proves itself
    r = Call(o.socket_path, req);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.restore().verified(), generation == 3);
    EXPECT_TRUE(r.restore().packed());
    EXPECT_EQ(r.restore().bytes(), WrittenBytes(rp));
    EXPECT_EQ(r.restore().moved_bytes(), s.host_cache_bytes()) << "the whole cache moves";
    EXPECT_GT(r.restore().decode_seconds(), 0);
    AttachMatches(o.socket_path, want, generation);
  }
  {  // Asked to restore while resident, the daemon restores nothing but still verifies.
    ASSERT_TRUE(WaitDetached(o.socket_path));
    proto::DaemonRequest req;
    req.mutable_restore()->set_verify(true);
    const proto::DaemonResponse r = Call(o.socket_path, req);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r.restore().bytes(), 0u);
    EXPECT_TRUE(r.restore().verified());
  }
  // The checkpoint changed on disk after the cache was taken: a verified restore says where.
  DamageBlock(p);
  ASSERT_TRUE(WaitDetached(o.socket_path));
  proto::DaemonRequest req;
  req.mutable_release();
  ASSERT_TRUE(Call(o.socket_path, req).ok());
  req.mutable_restore()->set_verify(true);
  Result<std::unique_ptr<DaemonConnection>> conn = DaemonConnection::Connect(o.socket_path);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  const Result<proto::DaemonResponse> bad = (*conn)->Call(req);
  ASSERT_FALSE(bad.ok());
  const std::string e = bad.status().ToString();
  EXPECT_EQ(bad.status().code(), Code::kCorrupt) << e;
  EXPECT_NE(e.find("restored arena"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor a.bf16"), std::string::npos) << e;
  EXPECT_NE(e.find(p.plan.files(0).path()), std::string::npos) << e;
  (*d)->RequestStop();
  serve.join();
}

}  // namespace
}  // namespace hoist::rank
