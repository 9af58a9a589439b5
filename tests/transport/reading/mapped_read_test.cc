// Guarded reads of file mappings: a file truncated under its mapping is an IoError naming the file
// (never a SIGBUS), on any thread, in every read mode that reads a mapping on the host; a SIGBUS
// the guard does not own still kills the process.
#include "transport/reading/mapped_read.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "proto/plan.pb.h"
#include "tests/transport/test_util.h"
#include "transport/devices/device.h"
#include "transport/reading/source.h"
#include "transport/staging/pipeline.h"

namespace hoist::transport {
namespace {

using testtransport::Pattern;
using testtransport::ScratchDir;
using testtransport::WriteFile;

constexpr std::uint64_t kPage = 4096;

// A file of `pages` pages mapped read-only, then truncated to `keep` pages.
struct TruncatedMapping {
  TruncatedMapping(const ScratchDir& dir, std::uint64_t pages, std::uint64_t keep)
      : path(dir.Sub("shard.safetensors")), data(Pattern(pages * kPage, 31)) {
    WriteFile(path, data);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    map = static_cast<std::byte*>(::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0));
    if (::truncate(path.c_str(), static_cast<off_t>(keep * kPage)) != 0) map = nullptr;
  }
  ~TruncatedMapping() {
    if (map != nullptr && map != MAP_FAILED) ::munmap(map, data.size());
    ::close(fd);
  }
  MappedRange Range() const { return MappedRange{map, data.size(), &path, fd}; }

  std::string path;
  std::vector<std::uint8_t> data;
  int fd = -1;
  std::byte* map = nullptr;
};

RowsRead Rows(std::uint64_t offset, std::uint64_t n, void* dst) {
  return RowsRead{offset, n, n, 1, static_cast<std::byte*>(dst), n};
}

// The guard alone (no size check): the copy really touches the lost pages and faults.
TEST(MappedReadTest, GuardTurnsSigbusIntoIoErrorNamingFileAndOffset) {
  ScratchDir dir;
  TruncatedMapping t(dir, 32, 4);
  ASSERT_NE(t.map, nullptr);
  std::vector<std::uint8_t> buf(16 * kPage, 0);
  Status s = CopyFromMappingGuardOnly(t.Range(), Rows(2 * kPage, 16 * kPage, buf.data()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find(t.path), std::string::npos) << s.ToString();
  // The fault lies in the first lost page: where in it depends on the copy's loads (a streaming
  // copy's 16-byte loads may fault at any of them), not on the guard.
  const std::size_t at = s.message().find("faulted at offset ");
  ASSERT_NE(at, std::string::npos) << s.ToString();
  const std::uint64_t fault = std::stoull(s.message().substr(at + 18));
  EXPECT_GE(fault, 4 * kPage) << s.ToString();
  EXPECT_LT(fault, 5 * kPage) << s.ToString();
  EXPECT_NE(s.message().find("now 16384 bytes"), std::string::npos) << s.ToString();
  // The bytes still in the file read normally afterwards.
  ASSERT_TRUE(CopyFromMappingGuardOnly(t.Range(), Rows(100, 3 * kPage, buf.data())).ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), t.data.data() + 100, 3 * kPage));
  // Twice in a row on the same thread: the guard is re-armed.
  EXPECT_FALSE(CopyFromMappingGuardOnly(t.Range(), Rows(5 * kPage, 10, buf.data())).ok());
}

// With the size check, a read that ends in the kept last page but past the new end is refused
// too (such bytes would read as zeros, without a fault).
TEST(MappedReadTest, SizeCheckRefusesBytesPastTheNewEndInsideTheLastPage) {
  ScratchDir dir;
  TruncatedMapping t(dir, 8, 8);
  ASSERT_NE(t.map, nullptr);
  ASSERT_EQ(::truncate(t.path.c_str(), 3 * kPage + 10), 0);
  std::vector<std::uint8_t> buf(kPage);
  Status s = CopyFromMapping(t.Range(), Rows(3 * kPage, 100, buf.data()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find("[12288, 12388)"), std::string::npos) << s.ToString();
  EXPECT_TRUE(CopyFromMapping(t.Range(), Rows(3 * kPage, 10, buf.data())).ok());
}

// Several threads fault at once, each in its own copy: each gets its own error, none dies, and
// the threads keep working afterwards.
TEST(MappedReadTest, ConcurrentFaultsAreEachCaughtOnTheirOwnThread) {
  ScratchDir dir;
  TruncatedMapping t(dir, 64, 8);
  ASSERT_NE(t.map, nullptr);
  constexpr int kThreads = 8;
  std::atomic<int> caught{0}, good{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < kThreads; ++i) {
    pool.emplace_back([&, i] {
      std::vector<std::uint8_t> buf(8 * kPage);
      for (int round = 0; round < 20; ++round) {
        const std::uint64_t off = (8 + (i * 7 + round) % 48) * kPage;
        Status s = CopyFromMappingGuardOnly(t.Range(), Rows(off, 8 * kPage, buf.data()));
        if (!s.ok() && s.message().find(t.path) != std::string::npos) caught.fetch_add(1);
        Status ok = CopyFromMappingGuardOnly(t.Range(), Rows(kPage, 4 * kPage, buf.data()));
        if (ok.ok() && std::memcmp(buf.data(), t.data.data() + kPage, 4 * kPage) == 0) {
          good.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(caught.load(), kThreads * 20);
  EXPECT_EQ(good.load(), kThreads * 20);
}

// A SIGBUS outside every guarded copy keeps its default action, even once the guard's handler
// is installed: hoist must not swallow faults it does not own.
TEST(MappedReadDeathTest, UnguardedFaultsStillKill) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  TruncatedMapping t(dir, 8, 2);
  ASSERT_NE(t.map, nullptr);
  std::vector<std::uint8_t> buf(kPage);
  ASSERT_FALSE(CopyFromMappingGuardOnly(t.Range(), Rows(4 * kPage, 10, buf.data())).ok());
  EXPECT_EXIT(
      {
        std::vector<std::uint8_t> b(kPage);
        ASSERT_FALSE(CopyFromMappingGuardOnly(t.Range(), Rows(4 * kPage, 10, b.data())).ok());
        volatile std::uint8_t x = static_cast<std::uint8_t>(t.map[5 * kPage]);  // not guarded
        (void)x;
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  EXPECT_EXIT(
      {
        std::vector<std::uint8_t> b(kPage);
        ASSERT_FALSE(CopyFromMappingGuardOnly(t.Range(), Rows(4 * kPage, 10, b.data())).ok());
        ::raise(SIGBUS);  // sent, not a fault
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

// The host device's copies from a registered mapping (pageable: CopySync; registered:
// CopyAsync, reported by Synchronize) are checked and guarded; other memory copies plainly.
TEST(MappedReadTest, HostDeviceCopiesFromATruncatedMappingFail) {
  ScratchDir dir;
  const std::string path = dir.Sub("shard.safetensors");
  auto data = Pattern(32 * kPage, 32);
  WriteFile(path, data);
  auto src = OpenMmapSource(path);
  ASSERT_TRUE(src.ok());
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(32 * kPage);
  ASSERT_TRUE(arena.ok());
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  Copy2D c;
  c.dst = arena->ptr;
  c.src = (*src)->mapping() + 20 * kPage;
  c.width = 8 * kPage;
  ASSERT_TRUE(dev->CopySync(c).ok());
  ASSERT_EQ(0, std::memcmp(arena->ptr, data.data() + 20 * kPage, 8 * kPage));

  ASSERT_EQ(::truncate(path.c_str(), 4 * kPage), 0);
  Status sync = dev->CopySync(c);
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.code(), Code::kIoError);
  EXPECT_NE(sync.message().find(path), std::string::npos) << sync.ToString();

  ASSERT_TRUE(dev->CopyAsync(c, *stream).ok());  // the fault happens on the stream's thread
  Status async = dev->Synchronize(*stream);
  ASSERT_FALSE(async.ok());
  EXPECT_NE(async.message().find(path), std::string::npos) << async.ToString();

  std::vector<std::uint8_t> plain = Pattern(kPage, 33);  // not a mapping: copied plainly
  Copy2D p;
  p.dst = arena->ptr;
  p.src = plain.data();
  p.width = kPage;
  ASSERT_TRUE(dev->CopySync(p).ok());
  EXPECT_EQ(0, std::memcmp(arena->ptr, plain.data(), kPage));
  ASSERT_TRUE(dev->DestroyStream(*stream).ok());
  ASSERT_TRUE(dev->Free(*arena).ok());
}

// The whole pipeline in every mode that reads a mapping on the host: a shard truncated after its
// sources were opened ends the load with an error naming it; the process lives.
class TruncatedPipelineTest : public ::testing::TestWithParam<ReadMode> {};

TEST_P(TruncatedPipelineTest, LoadFailsNamingTheShard) {
  ScratchDir dir;
  const std::string path = dir.Sub("model-00001-of-00001.safetensors");
  const std::uint64_t size = 4ull << 20;
  WriteFile(path, Pattern(size, 34));
  proto::LoadPlan plan;
  *plan.add_files() = testtransport::StatFile(path);
  proto::RankPlan& rp = *plan.add_ranks();
  rp.set_arena_bytes(size);
  for (std::uint64_t off = 0; off < size; off += 1ull << 20) {
    proto::Copy* c = rp.add_copies();
    c->set_file(0);
    c->set_src_offset(off);
    c->set_dst_offset(off);
    c->set_width(1ull << 20);
    c->set_rows(1);
  }
  auto sources = OpenSources({path}, {true}, GetParam());
  ASSERT_TRUE(sources.ok()) << sources.status().ToString();
  ASSERT_EQ(::truncate(path.c_str(), 1 << 20), 0);
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(size);
  ASSERT_TRUE(arena.ok());
  PipelineOptions o;
  o.mode = GetParam();
  o.threads = 2;
  o.slot_bytes = 1 << 20;
  Status s = testtransport::WithWatchdog(
      [&] { return RunPipeline(*dev, *arena, rp, sources->files, o, nullptr); });
  ASSERT_FALSE(s.ok()) << ReadModeName(GetParam());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  if (GetParam() == ReadMode::kAuto) {
    // Auto asks the page cache per chunk: the truncated pages are not resident, so it reads them
    // with O_DIRECT, which comes up short at the file's new end.
    EXPECT_TRUE(s.message().find("shrank") != std::string::npos ||
                s.message().find("short read") != std::string::npos)
        << s.ToString();
  } else {
    EXPECT_NE(s.message().find("shrank"), std::string::npos) << s.ToString();
  }
  ASSERT_TRUE(dev->Free(*arena).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, TruncatedPipelineTest,
                         ::testing::Values(ReadMode::kAuto, ReadMode::kMmap, ReadMode::kPageable,
                                           ReadMode::kRegistered),
                         [](const auto& info) { return std::string(ReadModeName(info.param)); });

}  // namespace
}  // namespace hoist::transport
