// Source seam: every implementation returns exactly the file's bytes for 1-D and strided reads,
// errors name the file and the offset, and residency arithmetic matches a page-by-page count.
#include "transport/reading/source.h"

#include <gtest/gtest.h>
#include <linux/aio_abi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "tests/transport/test_util.h"
#include "transport/reading/residency.h"

namespace hoist::transport {
namespace {

using testtransport::Mapped;
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
  for (auto open : {+[](const std::string& p) { return OpenBufferedSource(p); },
                    +[](const std::string& p) { return OpenMmapSource(p); }}) {
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

// A thread's AIO context is kept when it exits and taken by a later thread: eleven rounds of three
// reading threads leave at most three contexts (one a thread reading at once) instead of making
// (and, at each exit, destroying) their own; every round still reads the file's bytes.
TEST(DirectSourceTest, ThreadsReuseKeptAioContexts) {
  ScratchDir dir;
  const std::string path = dir.Sub("aio.bin");
  const std::vector<std::uint8_t> data = Pattern(1 << 20, 23);
  WriteFile(path, data);
  DirectOptions d;
  d.request_bytes = 65536;
  d.depth = 4;
  auto s = OpenDirectSource(path, d);
  if (!s.ok() && s.status().code() == Code::kUnsupported) GTEST_SKIP() << s.status().ToString();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  constexpr int kThreads = 3;
  const auto round = [&](int r) {
    std::vector<std::vector<std::uint8_t>> out(kThreads, std::vector<std::uint8_t>(200'000));
    std::vector<Status> st(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back(
          [&, t] { st[t] = (*s)->ReadAt(1000 * (r + t), out[t].data(), 200'000); });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(st[t].ok()) << st[t].ToString();
      ASSERT_EQ(0, std::memcmp(out[t].data(), data.data() + 1000 * (r + t), 200'000)) << r;
    }
  };
  aio_context_t probe = 0;
  if (::syscall(SYS_io_setup, 1, &probe) != 0) {
    GTEST_SKIP() << "no native AIO here (O_DIRECT reads are synchronous)";
  }
  ::syscall(SYS_io_destroy, probe);
  const std::size_t before = KeptAioContexts();
  for (int r = 0; r < 11; ++r) round(r);
  // Kept (not destroyed at each exit), and taken again: at most one a thread reading at once,
  // where a context made for every thread would leave up to 33.
  EXPECT_GT(KeptAioContexts(), 0u);
  EXPECT_LE(KeptAioContexts(), before + kThreads);

  // A forked child inherits the kept list and the forking thread's context, not the contexts
  // themselves: the thread that forked and a new one each read through one of the child's own.
  std::vector<std::uint8_t> here(200'000);
  ASSERT_TRUE((*s)->ReadAt(555, here.data(), here.size()).ok());  // this thread's context
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto read_ok = [&](std::uint64_t at) {
      std::vector<std::uint8_t> out(200'000);
      const Status st = (*s)->ReadAt(at, out.data(), out.size());
      return st.ok() && std::memcmp(out.data(), data.data() + at, out.size()) == 0;
    };
    bool threaded = false;
    std::thread([&] { threaded = read_ok(777); }).join();
    ::_exit(read_ok(999) && threaded ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the child's read failed";
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

// A FIFO, a directory or a device in place of a shard is refused at once (never opened
// blocking), naming the path and what it is; Residency::Measure too.
TEST(SourceOpenTest, OnlyRegularFilesAreOpenedAndNothingBlocks) {
  ScratchDir dir;
  const std::string fifo = dir.Sub("model-00001-of-00002.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string sub = dir.Sub("a-directory.safetensors");
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "is a FIFO, not a regular file"},
      {sub, "is a directory, not a regular file"},
      {"/dev/null", "is a character device, not a regular file"}};
  testtransport::WithWatchdog([&] {
    for (const auto& [path, what] : cases) {
      std::vector<Status> got;
      got.push_back(OpenBufferedSource(path).status());
      got.push_back(OpenMmapSource(path).status());
      got.push_back(OpenDirectSource(path).status());
      got.push_back(Residency::Measure(path, 2).status());
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].code(), Code::kCorrupt) << path << " #" << i << " " << got[i].ToString();
        EXPECT_NE(got[i].message().find(path + " " + what), std::string::npos)
            << "#" << i << " " << got[i].ToString();
      }
    }
    return 0;
  });
}

// A regular file opened non-blocking still reads normally (O_NONBLOCK is cleared after the
// checks; O_DIRECT is set afterwards where the filesystem allows it).
TEST(SourceOpenTest, RegularFileOpensReadableInEveryKind) {
  ScratchDir dir;
  auto data = Pattern(70000, 21);
  WriteFile(dir.Sub("f"), data);
  std::vector<std::unique_ptr<Source>> sources;
  for (auto open : {+[](const std::string& p) { return OpenBufferedSource(p); },
                    +[](const std::string& p) { return OpenMmapSource(p); }}) {
    auto s = open(dir.Sub("f"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sources.push_back(std::move(*s));
  }
  auto d = OpenDirectSource(dir.Sub("f"));
  if (d.ok()) {
    sources.push_back(std::move(*d));
  } else {
    EXPECT_EQ(d.status().code(), Code::kUnsupported) << d.status().ToString();
  }
  for (auto& s : sources) {
    std::vector<std::uint8_t> out(60000, 0);
    ASSERT_TRUE(s->ReadAt(4097, out.data(), out.size()).ok()) << s->kind();
    EXPECT_EQ(0, std::memcmp(out.data(), data.data() + 4097, out.size())) << s->kind();
  }
}

// A file truncated after it was mapped: every mapped read of the lost range is an IoError
// naming the file, the range and the size now (the process must not die of SIGBUS); the bytes
// still in the file read normally.
TEST(MmapSourceTest, FileTruncatedAfterMappingIsAnErrorNotSigbus) {
  ScratchDir dir;
  const std::string path = dir.Sub("shard.safetensors");
  const std::uint64_t size = 64 * 4096 + 100;
  auto data = Pattern(size, 22);
  WriteFile(path, data);
  auto s = OpenMmapSource(path);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(::truncate(path.c_str(), 8 * 4096), 0);
  std::vector<std::uint8_t> buf(40 * 4096, 0);

  Status a = (*s)->ReadAt(16 * 4096, buf.data(), 20 * 4096);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.code(), Code::kIoError);
  EXPECT_NE(a.message().find(path), std::string::npos) << a.ToString();
  EXPECT_NE(a.message().find("[65536, 147456)"), std::string::npos) << a.ToString();
  EXPECT_NE(a.message().find("now 32768 bytes"), std::string::npos) << a.ToString();

  RowsRead r;  // strided, the last rows past the new end
  r.offset = 4096;
  r.src_pitch = 3 * 4096;
  r.width = 1000;
  r.rows = 10;
  r.dst = reinterpret_cast<std::byte*>(buf.data());
  r.dst_pitch = 1000;
  Status b = (*s)->ReadRows(r);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.code(), Code::kIoError);
  EXPECT_NE(b.message().find(path), std::string::npos) << b.ToString();

  ASSERT_TRUE((*s)->ReadAt(100, buf.data(), 7000).ok());
  EXPECT_EQ(0, std::memcmp(buf.data(), data.data() + 100, 7000));
}

// What a mapped read leaves in the process's RSS: the pages it copied are released (the page
// cache keeps them), while a plain mapping read the same way keeps them all. Measured as the
// mapping's Rss in /proc/self/smaps.
std::uint64_t MappingRssKiB(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(' ') < 30) {
      in = a >= lo && a < hi;
      continue;
    }
    unsigned long kib = 0;
    if (in && std::sscanf(line.c_str(), "Rss: %lu kB", &kib) == 1) return kib;
  }
  return ~0ull;
}

TEST(MmapSourceTest, ReadPagesAreReleasedFromRss) {
  ScratchDir dir;
  const std::string path = dir.Sub("f");
  const std::uint64_t size = 16ull << 20;
  auto data = Pattern(size, 23);
  WriteFile(path, data);
  auto s = OpenMmapSource(path, /*release_pages=*/true);
  ASSERT_TRUE(s.ok());
  std::vector<std::uint8_t> out(size, 0);
  for (std::uint64_t off = 0; off < size; off += 1ull << 20) {
    ASSERT_TRUE((*s)->ReadAt(off, out.data() + off, 1ull << 20).ok());
  }
  ASSERT_EQ(0, std::memcmp(out.data(), data.data(), size));
  const std::uint64_t released = MappingRssKiB((*s)->mapping());

  // The control: the same file mapped plainly and read the same way stays resident in RSS, so
  // the measurement above can tell the difference.
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* plain = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(plain, MAP_FAILED);
  std::memcpy(out.data(), plain, size);
  const std::uint64_t kept = MappingRssKiB(plain);
  ::munmap(plain, size);

  EXPECT_GE(kept, size / 1024 * 9 / 10) << "the control mapping should be resident";
  EXPECT_LE(released, 64u) << "KiB of the source's mapping still in RSS after reading it all";
}

// Every source that can tell agrees with Residency::Measure (mincore on a fresh mapping, the
// reference) on contiguous ranges, and a strided block is all or nothing where its extent is.
TEST(SourceResidentNowTest, AgreesWithTheMeasuredResidency) {
  ScratchDir dir;
  const std::uint64_t size = 4 << 20;
  const std::string path = dir.Sub("f");
  WriteFile(path, Pattern(size, 5));
  if (!testtransport::Evict(path, size / 2, size / 2)) GTEST_SKIP() << "no fadvise";
  auto ref = Residency::Measure(path, 1);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  if (ref->ResidentBytes(size / 2, size / 2) != 0 || ref->ResidentBytes(0, size / 2) != size / 2) {
    GTEST_SKIP() << "this filesystem does not evict exactly the second half";
  }
  std::vector<std::unique_ptr<Source>> sources;
  for (auto open : {+[](const std::string& p) { return OpenBufferedSource(p); },
                    +[](const std::string& p) { return OpenMmapSource(p); },
                    +[](const std::string& p) { return OpenDirectSource(p); }}) {
    auto s = open(path);
    if (!s.ok() && s.status().code() == Code::kUnsupported) continue;
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sources.push_back(std::move(*s));
  }
  sources.push_back(OpenMmapSourceLazily(path, size));
  struct Block {
    std::uint64_t offset, pitch, width, rows;
  };
  const Block contiguous[] = {{0, 0, size / 2, 1},       {size / 2, 0, size / 2, 1},
                              {4096, 0, 1 << 20, 1},     {size / 2 - 8192, 0, 16384, 1},
                              {size - 4096, 0, 4096, 1}, {12345, 0, 1000, 1}};
  for (const auto& src : sources) {
    SCOPED_TRACE(std::string(src->kind()));
    for (const Block& b : contiguous) {
      SCOPED_TRACE("offset " + std::to_string(b.offset) + " width " + std::to_string(b.width));
      std::optional<std::uint64_t> n = src->ResidentNow(RowsRead{b.offset, b.width, b.width, 1});
      if (src->kind() == "mmap") {
        ASSERT_TRUE(n.has_value()) << "mincore always tells";
      }
      if (!n) continue;  // no cachestat on this kernel: the mapping answers instead
      EXPECT_EQ(*n, ref->ResidentBytes(b.offset, b.width));
    }
    // Strided: 64 rows of 3000 bytes, 8 KiB apart, inside one half or the other.
    const std::optional<std::uint64_t> hot = src->ResidentNow(RowsRead{100, 8192, 3000, 64});
    const std::optional<std::uint64_t> cold =
        src->ResidentNow(RowsRead{size / 2 + 100, 8192, 3000, 64});
    if (hot) {
      EXPECT_EQ(*hot, 3000u * 64);
    }
    if (cold) {
      EXPECT_EQ(*cold, 0u);
    }
    // Past the end of the file counts nothing; an empty block is empty.
    EXPECT_EQ(src->ResidentNow(RowsRead{size, 0, 10, 1}).value_or(0), 0u);
    EXPECT_EQ(src->ResidentNow(RowsRead{0, 0, 0, 1}).value_or(1), 0u);
  }
}

TEST(LazyMmapSourceTest, MapsOnFirstUseOnlyAndReadsTheFile) {
  ScratchDir dir;
  const std::string path = dir.Sub("lazy.bin");
  auto data = Pattern(50'000, 9);
  WriteFile(path, data);
  std::unique_ptr<Source> s = OpenMmapSourceLazily(path, data.size());
  EXPECT_EQ(s->size(), data.size());
  EXPECT_FALSE(Mapped(path)) << "opened lazily, nothing is mapped yet";
  std::vector<std::uint8_t> got(3000);
  ASSERT_TRUE(s->ReadAt(1234, got.data(), got.size()).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data() + 1234, got.size()));
  EXPECT_TRUE(Mapped(path)) << "the first read maps the file";
  ASSERT_NE(s->mapping(), nullptr);
  EXPECT_EQ(0, std::memcmp(s->mapping(), data.data(), data.size()));
  s.reset();
  EXPECT_FALSE(Mapped(path)) << "destroying the source unmaps it";
}

TEST(LazyMmapSourceTest, AFileGoneBeforeFirstUseIsNotFoundOnEveryCall) {
  ScratchDir dir;
  const std::string path = dir.Sub("gone.bin");
  WriteFile(path, Pattern(10'000, 1));
  std::unique_ptr<Source> s = OpenMmapSourceLazily(path, 10'000);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  std::vector<std::uint8_t> got(100);
  for (int i = 0; i < 2; ++i) {
    Status st = s->ReadAt(0, got.data(), got.size());
    EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  }
  EXPECT_EQ(s->mapping(), nullptr);
  EXPECT_FALSE(s->ResidentNow(RowsRead{0, 0, 100, 1}).has_value());
}

}  // namespace
}  // namespace hoist::transport
