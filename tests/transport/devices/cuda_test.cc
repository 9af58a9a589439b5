// The CUDA backend, run only where a GPU is visible (skipped in CPU-only CI): device ops against
// host-side expectations, both staging kinds, read-only registration of a mapped file, and the
// full pipeline in every read mode compared with the plain-pread reference.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/transport/devices/copy_batch_check.h"
#include "tests/transport/synth.h"
#include "tests/transport/test_util.h"
#include "transport/devices/device.h"
#include "transport/staging/pipeline.h"

namespace hoist::transport {
namespace {

using testtransport::MakeSynth;
using testtransport::Pattern;
using testtransport::Residence;
using testtransport::RunResult;
using testtransport::RunSynth;
using testtransport::Synth;

std::unique_ptr<Device> OpenGpuOrSkip() {
  if (CudaDeviceCount() == 0) return nullptr;
  auto d = OpenCudaDevice(0);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(*d) : nullptr;
}

#define GPU_OR_SKIP(dev)      \
  auto dev = OpenGpuOrSkip(); \
  if (!dev) GTEST_SKIP() << "no CUDA device visible on this machine"

TEST(CudaDeviceTest, OpsMatchHostExpectations) {
  GPU_OR_SKIP(dev);
  EXPECT_TRUE(dev->Caps().gpu);
  EXPECT_FALSE(dev->Caps().pci_bus_id.empty());
  EXPECT_EQ(dev->Name().rfind("cuda:0 ", 0), 0u) << dev->Name();
  for (StagingKind kind : {StagingKind::kRegister, StagingKind::kMallocHost}) {
    SCOPED_TRACE(std::string(StagingKindName(kind)));
    auto arena = dev->Allocate(1 << 20);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    auto staging = dev->AllocateStaging(1 << 20, kind);
    ASSERT_TRUE(staging.ok()) << staging.status().ToString();
    EXPECT_EQ(staging->kind, kind);
    auto src = Pattern(1 << 20, 21);
    std::memcpy(staging->ptr, src.data(), src.size());
    auto stream = dev->CreateStream();
    auto e0 = dev->CreateEvent(true);
    auto e1 = dev->CreateEvent(true);
    ASSERT_TRUE(stream.ok() && e0.ok() && e1.ok());
    auto* a = static_cast<std::byte*>(arena->ptr);
    ASSERT_TRUE(dev->MemsetAsync(a, 0x11, 1 << 20, *stream).ok());
    ASSERT_TRUE(dev->Record(*e0, *stream).ok());
    ASSERT_TRUE(dev->CopyAsync(Copy2D{a + 100, 0, staging->ptr, 0, 300000, 1}, *stream).ok());
    ASSERT_TRUE(
        dev->CopyAsync(Copy2D{a + 500000, 512, staging->ptr + 400000, 1000, 300, 200}, *stream)
            .ok());
    ASSERT_TRUE(dev->MemsetAsync(a + 1000, 0x5A, 10, *stream).ok());
    ASSERT_TRUE(dev->Record(*e1, *stream).ok());
    ASSERT_TRUE(dev->Wait(*e1).ok());
    auto dt = dev->Elapsed(*e0, *e1);
    ASSERT_TRUE(dt.ok()) << dt.status().ToString();
    EXPECT_GE(*dt, 0.0);
    std::vector<std::uint8_t> back(1 << 20);
    ASSERT_TRUE(dev->CopyToHost(back.data(), arena->ptr, back.size()).ok());
    EXPECT_EQ(back[0], 0x11);
    for (int i = 0; i < 300000; ++i) {
      ASSERT_EQ(back[100 + i], (i >= 900 && i < 910) ? 0x5A : src[i]) << i;
    }
    for (int r = 0; r < 200; ++r) {
      ASSERT_EQ(0,
                std::memcmp(back.data() + 500000 + r * 512, src.data() + 400000 + r * 1000, 300));
      ASSERT_EQ(back[500000 + r * 512 + 300], 0x11);
    }
    ASSERT_TRUE(dev->FreeStaging(*staging).ok());
    ASSERT_TRUE(dev->DestroyEvent(*e0).ok());
    ASSERT_TRUE(dev->DestroyEvent(*e1).ok());
    ASSERT_TRUE(dev->DestroyStream(*stream).ok());
    ASSERT_TRUE(dev->Free(*arena).ok());
  }
}

// cudaMemcpyBatchAsync (runs of flat copies) and cudaMemcpy2DAsync (pitched ones) in one batch.
TEST(CudaDeviceTest, CopyBatchLandsLikeMemcpy) {
  GPU_OR_SKIP(dev);
  testtransport::CheckCopyBatchLandsLikeMemcpy(*dev);
}

TEST(CudaDeviceTest, ErrorsAreStatusesWithContext) {
  GPU_OR_SKIP(dev);
  auto huge = dev->Allocate(1ull << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("cudaMalloc"), std::string::npos)
      << huge.status().ToString();
  EXPECT_FALSE(OpenCudaDevice(CudaDeviceCount()).ok());
  // The device keeps working after a failed call.
  auto ok = dev->Allocate(4096);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST(CudaPipelineTest, EveryReadModeMatchesTheReference) {
  GPU_OR_SKIP(dev);
  Synth s = MakeSynth(77);
  const auto ref = testtransport::ReferenceArena(s.plan, s.rp());
  for (ReadMode mode : {ReadMode::kAuto, ReadMode::kBuffered, ReadMode::kDirect, ReadMode::kMmap,
                        ReadMode::kPageable, ReadMode::kRegistered}) {
    for (StagingKind kind : {StagingKind::kRegister, StagingKind::kMallocHost}) {
      SCOPED_TRACE(std::string(ReadModeName(mode)) + " " + std::string(StagingKindName(kind)));
      PipelineOptions o;
      o.mode = mode;
      o.slots = 3;
      o.slot_bytes = 4096;
      o.threads = 4;
      o.chunk_bytes = 1000;
      o.staging = kind;
      RunResult r = RunSynth(s, o, Residence::kHalf, nullptr, dev.get());
      if (!r.status.ok() && r.status.code() == Code::kUnsupported) continue;  // e.g. O_DIRECT
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      ASSERT_EQ(testtransport::FirstMismatch(ref, r.arena.data()), -1);
      EXPECT_EQ(r.report.bytes_h2d, s.copy_bytes);
    }
  }
}

}  // namespace
}  // namespace hoist::transport
