// Device seam, host backend: async copies (1-D, 2-D) and memsets run in stream order on the copy
// thread, events order the host against them, out-of-arena accesses are refused, and the CUDA
// entry points fail cleanly on a machine without a GPU.
#include "transport/devices/device.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "tests/transport/devices/copy_batch_check.h"
#include "tests/transport/test_util.h"

namespace hoist::transport {
namespace {

using testtransport::Pattern;

// The seam's default CopyBatchAsync (each copy in turn), as the host backend runs it.
TEST(HostDeviceTest, CopyBatchLandsLikeMemcpy) {
  testtransport::CheckCopyBatchLandsLikeMemcpy(*OpenHostDevice());
}

TEST(HostDeviceTest, KeptStagingComesBackForTheSameSizeOnly) {
  auto dev = OpenHostDevice(/*keep_staging_bytes=*/3 * 65536);
  EXPECT_EQ(dev->KeptStagingBytes(), 3u * 65536);
  EXPECT_EQ(OpenHostDevice()->KeptStagingBytes(), 0u);
  auto a = dev->AllocateStaging(65536, StagingKind::kAuto);
  ASSERT_TRUE(a.ok());
  std::byte* const kept = a->ptr;
  kept[65535] = std::byte{0x42};
  ASSERT_TRUE(dev->FreeStaging(*a).ok());
  EXPECT_EQ(a->ptr, nullptr);
  auto other = dev->AllocateStaging(4096, StagingKind::kAuto);  // another size: new memory
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->ptr, kept);
  auto again = dev->AllocateStaging(65536, StagingKind::kRegister);  // auto is register
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ptr, kept);
  EXPECT_EQ(again->ptr[65535], std::byte{0x42});  // the same memory, not a new mapping
  HostBuffer copy = *again;
  ASSERT_TRUE(dev->FreeStaging(*again).ok());
  EXPECT_EQ(dev->FreeStaging(copy).code(), Code::kInvalidArgument);  // kept is not handed out
  ASSERT_TRUE(dev->FreeStaging(*other).ok());
}

TEST(HostDeviceTest, CopiesAndMemsetsRunInStreamOrder) {
  auto dev = OpenHostDevice();
  EXPECT_EQ(dev->Name(), "host");
  EXPECT_FALSE(dev->Caps().gpu);
  auto arena = dev->Allocate(100000);
  ASSERT_TRUE(arena.ok());
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  auto staging = dev->AllocateStaging(65536, StagingKind::kAuto);
  ASSERT_TRUE(staging.ok());
  EXPECT_EQ(staging->kind, StagingKind::kRegister);
  auto src = Pattern(65536, 7);
  std::memcpy(staging->ptr, src.data(), src.size());

  auto* a = static_cast<std::byte*>(arena->ptr);
  // 1-D: staging[0, 30000) -> arena[1000, 31000).
  Copy2D one{a + 1000, 0, staging->ptr, 0, 30000, 1};
  ASSERT_TRUE(dev->CopyAsync(one, *stream).ok());
  // 2-D: 50 rows of 200 bytes, staging pitch 300 from 40000, arena pitch 256 at 40000.
  Copy2D two{a + 40000, 256, staging->ptr + 40000, 300, 200, 50};
  ASSERT_TRUE(dev->CopyAsync(two, *stream).ok());
  // A memset after the 1-D copy overwrites part of it (FIFO order).
  ASSERT_TRUE(dev->MemsetAsync(a + 5000, 0x5A, 100, *stream).ok());
  auto ev = dev->CreateEvent(true);
  ASSERT_TRUE(ev.ok());
  ASSERT_TRUE(dev->Record(*ev, *stream).ok());
  ASSERT_TRUE(dev->Wait(*ev).ok());

  std::vector<std::uint8_t> back(100000);
  ASSERT_TRUE(dev->CopyToHost(back.data(), arena->ptr, 100000).ok());
  for (int i = 0; i < 30000; ++i) {
    std::uint8_t want = (i >= 4000 && i < 4100) ? 0x5A : src[i];
    ASSERT_EQ(back[1000 + i], want) << i;
  }
  for (int r = 0; r < 50; ++r) {
    ASSERT_EQ(0, std::memcmp(back.data() + 40000 + r * 256, src.data() + 40000 + r * 300, 200))
        << "row " << r;
  }
  // Bytes never written keep the allocation's poison, so a missing copy is visible.
  EXPECT_EQ(back[999], 0xCD);
  ASSERT_TRUE(dev->FreeStaging(*staging).ok());
  ASSERT_TRUE(dev->DestroyEvent(*ev).ok());
  ASSERT_TRUE(dev->DestroyStream(*stream).ok());
  ASSERT_TRUE(dev->Free(*arena).ok());
}

// An arena large enough to be set up on several threads, with a tail that is not a whole piece:
// every byte starts as the poison (no piece skipped or cut short), and it is writable throughout.
TEST(HostDeviceTest, LargeArenaIsPoisonedEverywhere) {
  auto dev = OpenHostDevice();
  const std::uint64_t n = (200ull << 20) + 12345;
  auto arena = dev->Allocate(n);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  const auto* p = static_cast<const std::uint8_t*>(arena->ptr);
  std::uint64_t bad = 0, first_bad = n;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (p[i] != 0xCD) {
      if (bad++ == 0) first_bad = i;
    }
  }
  EXPECT_EQ(bad, 0u) << "first byte without the poison at " << first_bad;
  auto stream = dev->CreateStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE(dev->MemsetAsync(arena->ptr, 0x11, n, *stream).ok());
  ASSERT_TRUE(dev->Synchronize(*stream).ok());
  EXPECT_EQ(p[0], 0x11);
  EXPECT_EQ(p[n - 1], 0x11);
  ASSERT_TRUE(dev->DestroyStream(*stream).ok());
  ASSERT_TRUE(dev->Free(*arena).ok());
}

// An arena larger than the machine's available memory is refused before anything is allocated
// (it would otherwise end in the OOM killer while its pages are populated).
TEST(HostDeviceTest, ArenaBeyondAvailableMemoryIsResourceExhausted) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  bool known = false;
  while (std::getline(meminfo, line)) known = known || line.rfind("MemAvailable:", 0) == 0;
  if (!known) GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the check cannot apply";
  auto dev = OpenHostDevice();
  const std::uint64_t huge = 1ull << 50;  // 1 PiB
  auto arena = dev->Allocate(huge);
  ASSERT_FALSE(arena.ok());
  EXPECT_EQ(arena.status().code(), Code::kResourceExhausted);
  EXPECT_NE(arena.status().message().find(std::to_string(huge)), std::string::npos)
      << arena.status().ToString();
  EXPECT_NE(arena.status().message().find("exceeds the memory available"), std::string::npos)
      << arena.status().ToString();
}

TEST(HostDeviceTest, EventsTimeAndOrderOps) {
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(8 << 20);
  ASSERT_TRUE(arena.ok());
  auto stream = dev->CreateStream();
  auto e0 = dev->CreateEvent(true);
  auto e1 = dev->CreateEvent(true);
  auto never = dev->CreateEvent(false);
  ASSERT_TRUE(stream.ok() && e0.ok() && e1.ok() && never.ok());
  EXPECT_TRUE(dev->Wait(*never).ok()) << "an event never recorded is complete";
  auto src = Pattern(8 << 20, 1);
  ASSERT_TRUE(dev->Record(*e0, *stream).ok());
  for (int i = 0; i < 8; ++i) {
    Copy2D c{
        static_cast<std::byte*>(arena->ptr) + (i << 20), 0, src.data() + (i << 20), 0, 1 << 20, 1};
    ASSERT_TRUE(dev->CopyAsync(c, *stream).ok());
  }
  ASSERT_TRUE(dev->Record(*e1, *stream).ok());
  ASSERT_TRUE(dev->Wait(*e1).ok());
  auto dt = dev->Elapsed(*e0, *e1);
  ASSERT_TRUE(dt.ok()) << dt.status().ToString();
  EXPECT_GE(*dt, 0.0);
  EXPECT_LT(*dt, 10.0);
  EXPECT_EQ(0, std::memcmp(arena->ptr, src.data(), src.size()));
  ASSERT_TRUE(dev->Synchronize(*stream).ok());
}

TEST(HostDeviceTest, RefusesAccessOutsideEveryArena) {
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(4096);
  auto stream = dev->CreateStream();
  ASSERT_TRUE(arena.ok() && stream.ok());
  std::vector<std::uint8_t> src(8192, 1);
  auto* a = static_cast<std::byte*>(arena->ptr);
  EXPECT_FALSE(dev->CopyAsync(Copy2D{a + 4000, 0, src.data(), 0, 200, 1}, *stream).ok());
  EXPECT_FALSE(dev->CopyAsync(Copy2D{a, 2048, src.data(), 100, 100, 3}, *stream).ok())
      << "third row lands at 4096";
  EXPECT_TRUE(dev->CopyAsync(Copy2D{a, 1998, src.data(), 100, 100, 3}, *stream).ok());
  EXPECT_FALSE(dev->MemsetAsync(a + 4090, 0, 7, *stream).ok());
  EXPECT_FALSE(dev->CopySync(Copy2D{src.data(), 0, src.data(), 0, 10, 1}).ok());
  std::vector<std::uint8_t> back(10);
  EXPECT_FALSE(dev->CopyToHost(back.data(), a + 4095, 2).ok());
  EXPECT_FALSE(dev->CopyAsync(Copy2D{a, 0, src.data(), 0, 1, 1}, 999).ok()) << "bad stream";
  ASSERT_TRUE(dev->Synchronize(*stream).ok());
}

TEST(HostDeviceTest, RegisterAndUnregisterPairUp) {
  auto dev = OpenHostDevice();
  std::vector<std::uint8_t> mem(4096, 3);
  EXPECT_TRUE(dev->RegisterHost(mem.data(), mem.size(), true).ok());
  EXPECT_FALSE(dev->RegisterHost(mem.data(), mem.size(), true).ok());
  EXPECT_TRUE(dev->UnregisterHost(mem.data()).ok());
  EXPECT_FALSE(dev->UnregisterHost(mem.data()).ok());
}

TEST(HostDeviceTest, CopySyncIsDoneOnReturn) {
  auto dev = OpenHostDevice();
  auto arena = dev->Allocate(10000);
  ASSERT_TRUE(arena.ok());
  auto src = Pattern(100 * 1000, 8);
  Copy2D c{arena->ptr, 100, src.data(), 1000, 100, 100};
  ASSERT_TRUE(dev->CopySync(c).ok());
  for (int r = 0; r < 100; ++r) {
    ASSERT_EQ(
        0, std::memcmp(static_cast<std::byte*>(arena->ptr) + r * 100, src.data() + r * 1000, 100));
  }
}

TEST(CudaDeviceTest, FailsCleanlyWithoutAGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present; covered by the GPU runs";
  auto d = OpenCudaDevice(0);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("cuda:0"), std::string::npos) << d.status().ToString();
}

TEST(StagingKindTest, NamesRoundTrip) {
  for (StagingKind k : {StagingKind::kAuto, StagingKind::kRegister, StagingKind::kMallocHost}) {
    auto p = ParseStagingKind(StagingKindName(k));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, k);
  }
  EXPECT_FALSE(ParseStagingKind("pinned").has_value());
}

}  // namespace
}  // namespace hoist::transport
