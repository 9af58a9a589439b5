// Source seam: every implementation returns exactly the file's bytes for 1-D and strided reads,
// errors name the file and the offset, and residency arithmetic matches a page-by-page count.
#include "transport/source.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "tests/transport/test_util.h"

namespace hoist::transport {
namespace {

using testtransport::Pattern;
using testtransport::ScratchDir;
using testtransport::WriteFile;

constexpr std::uint64_t kFileSize = 300'007;  // not a multiple of any block size

class SourceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("data.bin");
    data_ = Pattern(kFileSize, 11);
    WriteFile(path_, data_);
    Result<std::unique_ptr<Source>> s = Status::Internal("unset");
    DirectOptions d;
    d.request_bytes = 16384;  // many requests per read, several in flight
    d.depth = 4;
    d.max_gap = 8192;
    if (GetParam() == "buffered") s = OpenBufferedSource(path_);
    if (GetParam() == "mmap") s = OpenMmapSource(path_);
    if (GetParam() == "direct") s = OpenDirectSource(path_, d);
    if (GetParam() == "faulty-noop") {
      auto inner = OpenBufferedSource(path_);
      ASSERT_TRUE(inner.ok()) << inner.status().ToString();
      s = WrapFaulty(std::move(*inner), FaultSpec{});
    }
    if (!s.ok() && s.status().code() == Code::kUnsupported) {
      GTEST_SKIP() << "O_DIRECT not supported here: " << s.status().ToString();
    }
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    src_ = std::move(*s);
  }

  ScratchDir dir_;
  std::string path_;
  std::vector<std::uint8_t> data_;
  std::unique_ptr<Source> src_;
};

TEST_P(SourceTest, ReadAtMatchesFileBytesAtOddOffsetsAndLengths) {
  EXPECT_EQ(src_->size(), kFileSize);
  EXPECT_EQ(src_->path(), path_);
  const std::uint64_t cases[][2] = {{0, 1},         {0, 4096},          {1, 4095},
                                    {4095, 2},      {12345, 100000},    {4096, 65536},
                                    {0, kFileSize}, {kFileSize - 7, 7}, {kFileSize - 5000, 5000},
                                    {77, 0}};
  for (const auto& c : cases) {
    // Destinations both page-aligned and deliberately misaligned.
    for (std::uint64_t mis : {0ull, 3ull}) {
      std::vector<std::uint8_t> buf(c[1] + 2 * 4096 + 8, 0);
      auto* aligned = reinterpret_cast<std::uint8_t*>(
          (reinterpret_cast<std::uintptr_t>(buf.data()) + 4095) / 4096 * 4096);
      // mis == 0: same alignment as the file offset, so the direct source can read in place.
      std::uint8_t* dst = mis == 0 ? aligned + c[0] % 4096 : aligned + mis;
      ASSERT_TRUE(src_->ReadAt(c[0], dst, c[1]).ok()) << c[0] << "+" << c[1];
      EXPECT_EQ(0, std::memcmp(dst, data_.data() + c[0], c[1])) << c[0] << "+" << c[1];
    }
  }
}

TEST_P(SourceTest, ReadRowsGathersStridedRows) {
  // 40 rows of 700 bytes every 3000 bytes (a column shard), into a destination pitch of 800.
  RowsRead r;
  r.offset = 1234;
  r.src_pitch = 3000;
  r.width = 700;
  r.rows = 40;
  std::vector<std::uint8_t> out(40 * 800, 0);
  r.dst = reinterpret_cast<std::byte*>(out.data());
  r.dst_pitch = 800;
  ASSERT_TRUE(src_->ReadRows(r).ok());
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(0, std::memcmp(out.data() + i * 800, data_.data() + 1234 + i * 3000, 700)) << i;
    for (int b = 700; b < 800; ++b) ASSERT_EQ(out[i * 800 + b], 0) << "gap written, row " << i;
  }
}

TEST_P(SourceTest, ReadManyHandlesUnsortedReadsAndFarGaps) {
  std::vector<std::uint8_t> out(3 * 5000, 0);
  RowsRead reads[3];
  const std::uint64_t offs[3] = {250000, 10, 100000};  // unsorted, far apart
  for (int k = 0; k < 3; ++k) {
    reads[k].offset = offs[k];
    reads[k].width = 1000;
    reads[k].rows = 5;
    reads[k].src_pitch = 1500;
    reads[k].dst = reinterpret_cast<std::byte*>(out.data() + k * 5000);
    reads[k].dst_pitch = 1000;
  }
  ASSERT_TRUE(src_->ReadMany(reads, 3).ok());
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(
          0, std::memcmp(out.data() + k * 5000 + i * 1000, data_.data() + offs[k] + i * 1500, 1000))
          << k << "/" << i;
    }
  }
}

TEST_P(SourceTest, ReadPastEndNamesFileAndOffset) {
  std::vector<std::uint8_t> buf(100);
  Status s = src_->ReadAt(kFileSize - 50, buf.data(), 100);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::to_string(kFileSize - 50)), std::string::npos) << s.ToString();
  RowsRead r;
  r.offset = 1000;
  r.src_pitch = 100000;
  r.width = 10;
  r.rows = 4;  // last row at 301000 > size
  std::vector<std::uint8_t> out(40);
  r.dst = reinterpret_cast<std::byte*>(out.data());
  r.dst_pitch = 10;
  EXPECT_FALSE(src_->ReadRows(r).ok());
}

TEST_P(SourceTest, ConcurrentReadersSeeTheirOwnBytes) {
  std::vector<std::thread> pool;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t] {
      std::vector<std::uint8_t> buf(20000);
      for (int i = 0; i < 20; ++i) {
        std::uint64_t off =
            (static_cast<std::uint64_t>(t) * 7919 + i * 13337) % (kFileSize - 20000);
        if (!src_->ReadAt(off, buf.data(), buf.size()).ok() ||
            std::memcmp(buf.data(), data_.data() + off, buf.size()) != 0) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, SourceTest,
                         ::testing::Values("buffered", "mmap", "direct", "faulty-noop"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

TEST(MmapSourceTest, ExposesTheMapping) {
  ScratchDir dir;
  auto data = Pattern(10000, 3);
  WriteFile(dir.Sub("f"), data);
  auto s = OpenMmapSource(dir.Sub("f"));
  ASSERT_TRUE(s.ok());
  ASSERT_NE((*s)->mapping(), nullptr);
  EXPECT_EQ(0, std::memcmp((*s)->mapping(), data.data(), data.size()));
  auto b = OpenBufferedSource(dir.Sub("f"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->mapping(), nullptr);
}

TEST(SourceOpenTest, MissingFileIsNotFoundNamingThePath) {
  ScratchDir dir;
  for (auto open : {OpenBufferedSource, OpenMmapSource}) {
    auto s = open(dir.Sub("nope.safetensors"));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kNotFound);
    EXPECT_NE(s.status().message().find("nope.safetensors"), std::string::npos);
  }
  auto d = OpenDirectSource(dir.Sub("nope.safetensors"));
  EXPECT_FALSE(d.ok());
}

TEST(DirectSourceTest, TmpfsIsUnsupportedOrWorks) {
  // /dev/shm is tmpfs on Linux: O_DIRECT is refused there on older kernels and accepted on
  // newer ones. Either answer is fine; a refusal must be Unsupported naming the path.
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  char tmpl[] = "/dev/shm/hoist-direct-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  auto data = Pattern(8192, 5);
  ASSERT_EQ(::write(fd, data.data(), data.size()), 8192);
  ::close(fd);
  auto s = OpenDirectSource(tmpl);
  if (!s.ok()) {
    EXPECT_EQ(s.status().code(), Code::kUnsupported) << s.status().ToString();
    EXPECT_NE(s.status().message().find(tmpl), std::string::npos);
  } else {
    std::vector<std::uint8_t> out(5000);
    EXPECT_TRUE((*s)->ReadAt(100, out.data(), 5000).ok());
    EXPECT_EQ(0, std::memcmp(out.data(), data.data() + 100, 5000));
  }
  ::unlink(tmpl);
}

TEST(FaultySourceTest, EioAfterNReadsNamesFileAndOffset) {
  ScratchDir dir;
  auto data = Pattern(50000, 9);
  WriteFile(dir.Sub("f"), data);
  auto inner = OpenBufferedSource(dir.Sub("f"));
  ASSERT_TRUE(inner.ok());
  FaultSpec spec;
  spec.eio_after = 3;
  auto s = WrapFaulty(std::move(*inner), spec);
  std::vector<std::uint8_t> buf(100);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s->ReadAt(i * 100, buf.data(), 100).ok());
    EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + i * 100, 100));
  }
  Status st = s->ReadAt(4321, buf.data(), 100);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_NE(st.message().find(dir.Sub("f")), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("offset 4321"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("Input/output error"), std::string::npos) << st.ToString();
  EXPECT_FALSE(s->ReadAt(0, buf.data(), 1).ok()) << "stays failed";
}

TEST(FaultySourceTest, ShortReadDeliversHalfAndFails) {
  ScratchDir dir;
  auto data = Pattern(50000, 10);
  WriteFile(dir.Sub("f"), data);
  auto inner = OpenMmapSource(dir.Sub("f"));
  ASSERT_TRUE(inner.ok());
  FaultSpec spec;
  spec.short_read_after = 1;
  auto s = WrapFaulty(std::move(*inner), spec);
  std::vector<std::uint8_t> buf(1000, 0);
  ASSERT_TRUE(s->ReadAt(0, buf.data(), 1000).ok());
  std::fill(buf.begin(), buf.end(), 0);
  Status st = s->ReadAt(2000, buf.data(), 1000);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("short read"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("offset 2000"), std::string::npos) << st.ToString();
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 2000, 500));
  EXPECT_EQ(buf[500], 0);
  EXPECT_TRUE(s->ReadAt(0, buf.data(), 10).ok()) << "only the one call is short";
}

TEST(BufferedSourceTest, FileTruncatedUnderUsIsAnErrorNotGarbage) {
  ScratchDir dir;
  WriteFile(dir.Sub("f"), Pattern(20000, 4));
  auto s = OpenBufferedSource(dir.Sub("f"));
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(::truncate(dir.Sub("f").c_str(), 10000), 0);
  std::vector<std::uint8_t> buf(5000);
  Status st = (*s)->ReadAt(8000, buf.data(), 5000);  // size at open said 20000
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_NE(st.message().find("end of file at offset 10000"), std::string::npos) << st.ToString();
}

TEST(ResidencyTest, ArithmeticMatchesPageByPageCount) {
  const std::uint64_t page = 4096, size = 10 * page + 123;
  std::vector<unsigned char> pages = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1};
  Residency r = Residency::FromPages(size, page, pages);
  auto slow = [&](std::uint64_t off, std::uint64_t n) {
    std::uint64_t t = 0;
    for (std::uint64_t b = off; b < off + n && b < size; ++b) t += pages[b / page];
    return t;
  };
  for (std::uint64_t off : {0ull, 1ull, 4095ull, 4096ull, 5000ull, 20000ull, 40000ull}) {
    for (std::uint64_t n : {0ull, 1ull, 100ull, 4096ull, 9000ull, 30000ull, 100000ull}) {
      EXPECT_EQ(r.ResidentBytes(off, n), slow(off, n)) << off << "+" << n;
    }
  }
  std::uint64_t strided = 0;
  for (int i = 0; i < 6; ++i) strided += slow(100 + i * 7000, 3000);
  EXPECT_EQ(r.ResidentBytes(100, 7000, 3000, 6), strided);
  EXPECT_EQ(r.TotalResident(), slow(0, size));
  EXPECT_EQ(Residency::Uniform(size, true).TotalResident(), size);
  EXPECT_EQ(Residency::Uniform(size, false).TotalResident(), 0u);
}

TEST(ResidencyTest, MeasuresAFreshFileAsResidentAndEvictedRangeAsNot) {
  ScratchDir dir;
  const std::uint64_t size = 4 << 20;
  WriteFile(dir.Sub("f"), Pattern(size, 2));
  auto all = Residency::Measure(dir.Sub("f"), 2);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->size(), size);
  EXPECT_EQ(all->TotalResident(), size) << "just written, method " << all->method();
  if (!testtransport::Evict(dir.Sub("f"), size / 2, size / 2)) GTEST_SKIP() << "no fadvise";
  auto half = Residency::Measure(dir.Sub("f"), 1);
  ASSERT_TRUE(half.ok());
  if (half->ResidentBytes(size / 2, size / 2) == size / 2) {
    GTEST_SKIP() << "this filesystem keeps pages after POSIX_FADV_DONTNEED";
  }
  EXPECT_EQ(half->ResidentBytes(0, size / 2), size / 2);
  EXPECT_LT(half->ResidentBytes(size / 2, size / 2), size / 2);
}

TEST(ReadModeTest, NamesRoundTrip) {
  for (ReadMode m : {ReadMode::kAuto, ReadMode::kBuffered, ReadMode::kDirect, ReadMode::kMmap,
                     ReadMode::kPageable, ReadMode::kRegistered}) {
    auto parsed = ParseReadMode(ReadModeName(m));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_FALSE(ParseReadMode("fast").has_value());
}

}  // namespace
}  // namespace hoist::transport
