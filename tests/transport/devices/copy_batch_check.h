// One check shared by the host and CUDA backends' tests: Device::CopyBatchAsync of mixed copies
// (1-D of many sizes, 2-D with rows back to back, 2-D pitched, empty) lands every byte where a
// plain memcpy of each copy puts it, and leaves the bytes between them alone.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/transport/synth.h"
#include "transport/devices/device.h"

namespace hoist::testtransport {

using transport::Copy2D;
using transport::Device;
using transport::StagingKind;

inline void CheckCopyBatchLandsLikeMemcpy(Device& dev) {
  constexpr std::uint64_t kBytes = 8 << 20;
  auto arena = dev.Allocate(kBytes);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  auto staging = dev.AllocateStaging(kBytes, StagingKind::kAuto);
  ASSERT_TRUE(staging.ok()) << staging.status().ToString();
  const std::vector<std::uint8_t> src = Pattern(kBytes, 43);
  std::memcpy(staging->ptr, src.data(), kBytes);
  auto* a = static_cast<std::byte*>(arena->ptr);
  std::vector<std::uint8_t> want(kBytes, 0x11);
  std::vector<Copy2D> ops;
  std::uint64_t s = 0, d = 0;  // the next source and destination offsets
  // dst_pitch, src_pitch, width, rows; a 2-D copy's pitches are at least its width.
  const std::uint64_t shapes[][4] = {
      {0, 0, 448, 1}, {0, 0, 1, 1},    {0, 0, 100000, 1}, {512, 512, 512, 8}, {512, 1000, 300, 20},
      {0, 0, 0, 1},   {0, 0, 4096, 1}, {64, 64, 64, 3},   {0, 0, 1835008, 1}, {0, 0, 449, 1}};
  for (int round = 0; round < 3; ++round) {
    for (const auto& sh : shapes) {
      const std::uint64_t dst_extent = sh[3] > 1 ? (sh[3] - 1) * sh[0] + sh[2] : sh[2];
      const std::uint64_t src_extent = sh[3] > 1 ? (sh[3] - 1) * sh[1] + sh[2] : sh[2];
      ASSERT_LE(d + dst_extent, kBytes);
      ASSERT_LE(s + src_extent, kBytes);
      ops.push_back(Copy2D{a + d, sh[0], staging->ptr + s, sh[1], sh[2], sh[3]});
      for (std::uint64_t r = 0; r < sh[3]; ++r) {
        std::memcpy(want.data() + d + r * sh[0], src.data() + s + r * sh[1], sh[2]);
      }
      d += dst_extent + 13;  // a gap the batch must leave alone
      s += src_extent + 7;
    }
    s = (s + 4096 * round) % (3 << 20);  // sources may repeat, destinations never overlap
  }
  auto stream = dev.CreateStream();
  auto done = dev.CreateEvent(false);
  ASSERT_TRUE(stream.ok() && done.ok());
  ASSERT_TRUE(dev.MemsetAsync(a, 0x11, kBytes, *stream).ok());
  const Status batch = dev.CopyBatchAsync(ops, *stream);
  ASSERT_TRUE(batch.ok()) << batch.ToString();
  ASSERT_TRUE(dev.Record(*done, *stream).ok());
  ASSERT_TRUE(dev.Wait(*done).ok());
  std::vector<std::uint8_t> back(kBytes);
  ASSERT_TRUE(dev.CopyToHost(back.data(), arena->ptr, kBytes).ok());
  for (std::uint64_t i = 0; i < kBytes; ++i) ASSERT_EQ(back[i], want[i]) << "arena byte " << i;
  ASSERT_TRUE(dev.DestroyEvent(*done).ok());
  ASSERT_TRUE(dev.DestroyStream(*stream).ok());
  ASSERT_TRUE(dev.FreeStaging(*staging).ok());
  ASSERT_TRUE(dev.Free(*arena).ok());
}

}  // namespace hoist::testtransport
