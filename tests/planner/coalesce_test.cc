// CoalesceCopies (planner/coalesce.h): a merged copy list moves exactly the bytes the original
// list moves, to exactly the same places (checked by expanding both into a byte map, the
// obviously-correct reference), and merges what is one copy written in parts.
#include "planner/coalesce.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace hoist::planner {
namespace {

proto::Copy Make(std::uint32_t file, std::uint64_t src, std::uint64_t dst, std::uint64_t width,
                 std::uint64_t rows = 1, std::uint64_t src_pitch = 0, std::uint64_t dst_pitch = 0) {
  proto::Copy c;
  c.set_file(file);
  c.set_src_offset(src);
  c.set_dst_offset(dst);
  c.set_width(width);
  c.set_rows(rows);
  c.set_src_pitch(src_pitch);
  c.set_dst_pitch(dst_pitch);
  return c;
}

// Arena byte -> (file, file byte): every byte each copy writes, one by one.
std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> Expand(
    const std::vector<proto::Copy>& copies) {
  std::map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> m;
  for (const proto::Copy& c : copies) {
    for (std::uint64_t r = 0; r < c.rows(); ++r) {
      for (std::uint64_t b = 0; b < c.width(); ++b) {
        const auto [it, fresh] =
            m.emplace(c.dst_offset() + r * c.dst_pitch() + b,
                      std::make_pair(c.file(), c.src_offset() + r * c.src_pitch() + b));
        EXPECT_TRUE(fresh) << "arena byte written twice";
      }
    }
  }
  return m;
}

TEST(CoalesceTest, PartsOfOneCopyBecomeOne) {
  std::vector<proto::Copy> cs = {Make(0, 100, 0, 10), Make(0, 110, 10, 6),  // flat, contiguous
                                 Make(1, 0, 100, 4, 3, 16, 4), Make(1, 48, 112, 4, 2, 16, 4)};
  const auto want = Expand(cs);
  CoalesceCopies(&cs);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].width(), 16u);
  EXPECT_EQ(cs[1].rows(), 5u);
  EXPECT_EQ(Expand(cs), want);
}

TEST(CoalesceTest, WhatIsNotContiguousStaysApart) {
  std::vector<proto::Copy> cs = {
      Make(0, 0, 0, 8),
      Make(0, 8, 9, 8),  // arena gap
      Make(0, 100, 50, 8),
      Make(1, 108, 58, 8),  // other file
      Make(2, 0, 200, 4, 2, 16, 4),
      Make(2, 32, 208, 4, 2, 8, 4),  // other pitch
      Make(3, 0, 300, 4, 2, 0, 4),
      Make(3, 0, 308, 4, 2, 0, 4),  // pitch 0 never merges
  };
  const auto want = Expand(cs);
  CoalesceCopies(&cs);
  EXPECT_EQ(cs.size(), 8u);
  EXPECT_EQ(Expand(cs), want);
}

// Random lists of non-overlapping flat and strided copies, cut into random parts: the merged
// list writes the same bytes from the same places, and never has more copies.
TEST(CoalesceTest, RandomCutsWriteTheSameBytes) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<proto::Copy> cs;
    std::uint64_t dst = 0;
    for (int k = 0; k < 6; ++k) {
      const std::uint32_t file = rng() % 2;
      const std::uint64_t src = (rng() % 64) * 1024, width = 1 + rng() % 40;
      if (rng() % 2 == 0) {  // a flat copy cut in parts
        std::uint64_t done = 0;
        while (done < width) {
          const std::uint64_t part = std::min<std::uint64_t>(width - done, 1 + rng() % 16);
          cs.push_back(Make(file, src + done, dst + done, part));
          done += part;
        }
        dst += width;
      } else {  // a strided block cut into runs of rows
        const std::uint64_t rows = 1 + rng() % 8, pitch = width + rng() % 9;
        std::uint64_t r = 0;
        while (r < rows) {
          const std::uint64_t run = std::min<std::uint64_t>(rows - r, 1 + rng() % 3);
          cs.push_back(Make(file, src + r * pitch, dst + r * width, width, run, pitch, width));
          r += run;
        }
        dst += rows * width;
      }
      dst += rng() % 3;  // sometimes a gap in the arena
    }
    std::shuffle(cs.begin(), cs.end(), rng);
    const auto want = Expand(cs);
    const std::size_t before = cs.size();
    CoalesceCopies(&cs);
    EXPECT_LE(cs.size(), before);
    EXPECT_EQ(Expand(cs), want) << "round " << round;
  }
}

}  // namespace
}  // namespace hoist::planner
