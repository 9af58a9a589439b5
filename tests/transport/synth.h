// Test-only: a synthetic three-file checkpoint and one rank plan with hand-written edge cases
// (1-D copy over many slots, strided column shard, strided destination, rows wider than a slot,
// tiny copies, a whole file) plus random copies and fills; and a runner that executes it through
// the real pipeline on a given device and copies the arena back.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/transport/test_util.h"
#include "transport/staging/pipeline.h"

namespace hoist::testtransport {

using transport::Device;
using transport::DirectOptions;
using transport::OpenHostDevice;
using transport::OpenSources;
using transport::PipelineOptions;
using transport::PipelineReport;
using transport::Residency;
using transport::RunPipeline;
using transport::SourceWrapper;

struct Synth {
  std::unique_ptr<ScratchDir> dir = std::make_unique<ScratchDir>();
  proto::LoadPlan plan;
  std::vector<std::string> paths;
  std::uint64_t copy_bytes = 0;
  proto::RankPlan& rp() { return *plan.mutable_ranks(0); }
};

// Three files and one rank plan: hand-written edge cases plus `random_copies` random ones.
inline Synth MakeSynth(std::uint64_t seed, int random_copies = 30) {
  Synth s;
  const std::uint64_t sizes[3] = {60013, 45001, 9000};
  for (int f = 0; f < 3; ++f) {
    std::string p = s.dir->Sub("shard-" + std::to_string(f) + ".bin");
    testtransport::WriteFile(p, Pattern(sizes[f], seed * 10 + f));
    *s.plan.add_files() = testtransport::StatFile(p);
    s.paths.push_back(p);
  }
  proto::RankPlan& rp = *s.plan.add_ranks();
  rp.set_rank(0);
  std::uint64_t cursor = 0;
  auto alloc = [&](std::uint64_t bytes) {
    std::uint64_t at = cursor;
    cursor = (cursor + bytes + 255) / 256 * 256;
    return at;
  };
  std::vector<proto::Copy> copies;
  auto add = [&](std::uint32_t file, std::uint64_t src, std::uint64_t sp, std::uint64_t width,
                 std::uint64_t rows, std::uint64_t dp) {
    proto::Copy c;
    c.set_file(file);
    c.set_src_offset(src);
    c.set_src_pitch(sp);
    c.set_width(width);
    c.set_rows(rows);
    c.set_dst_pitch(dp);
    c.set_dst_offset(alloc((rows - 1) * dp + width));
    copies.push_back(c);
    s.copy_bytes += width * rows;
  };
  add(0, 17, 0, 20000, 1, 0);          // 1-D, five 4 KiB slots
  add(0, 30000, 1000, 300, 25, 300);   // column shard: strided source, packed dst
  add(1, 5, 100, 100, 30, 100);        // contiguous rows (pitch == width on both sides)
  add(1, 4000, 700, 500, 12, 640);     // strided dst too
  add(1, 20000, 6000, 5000, 3, 5000);  // rows wider than a 4 KiB slot
  add(2, 0, 0, 9000, 1, 0);            // a whole file
  for (int i = 0; i < 40; ++i) add(2, 100 + i * 13, 0, 7, 1, 0);  // tiny copies
  std::mt19937_64 rng(seed);
  for (int i = 0; i < random_copies; ++i) {
    std::uint32_t f = static_cast<std::uint32_t>(rng() % 3);
    std::uint64_t width = 1 + rng() % 3000;
    std::uint64_t rows = 1 + rng() % 8;
    std::uint64_t sp = rows > 1 ? width + rng() % 2000 : 0;
    std::uint64_t dp = rows > 1 ? width + (rng() % 2) * (rng() % 300) : 0;
    std::uint64_t extent = (rows - 1) * sp + width;
    if (extent > sizes[f]) continue;
    add(f, rng() % (sizes[f] - extent + 1), sp, width, rows, dp);
  }
  std::stable_sort(copies.begin(), copies.end(), [](const proto::Copy& a, const proto::Copy& b) {
    return std::make_pair(a.file(), a.src_offset()) < std::make_pair(b.file(), b.src_offset());
  });
  for (const auto& c : copies) *rp.add_copies() = c;
  const std::uint32_t values[3] = {0, 0x5A, 0xFF};
  for (int i = 0; i < 3; ++i) {
    proto::Fill* f = rp.add_fills();
    f->set_bytes(1000 + 333 * i);
    f->set_dst_offset(alloc(f->bytes()));
    f->set_value(values[i]);
  }
  rp.set_arena_bytes(cursor);
  return s;
}

struct RunResult {
  Status status;
  PipelineReport report;
  std::vector<std::uint8_t> arena;
};

enum class Residence { kMeasured, kAllCold, kHalf };

// Runs the pipeline for s on `device` (the host backend when null) and copies the arena back.
inline RunResult RunSynth(Synth& s, const PipelineOptions& o, Residence res = Residence::kMeasured,
                          const SourceWrapper& wrap = nullptr, Device* device = nullptr) {
  RunResult out;
  std::unique_ptr<Device> host;
  if (device == nullptr) host = OpenHostDevice();
  Device* dev = device != nullptr ? device : host.get();
  auto arena = dev->Allocate(s.rp().arena_bytes());
  if (!arena.ok()) {
    out.status = arena.status();
    return out;
  }
  std::vector<bool> used(s.paths.size(), true);
  auto sources = OpenSources(s.paths, used, o.mode, DirectOptions{}, wrap);
  if (!sources.ok()) {
    out.status = sources.status();
    return out;
  }
  std::vector<Residency> residency;
  for (std::size_t f = 0; f < s.paths.size(); ++f) {
    const std::uint64_t size = s.plan.files(static_cast<int>(f)).size();
    if (res == Residence::kMeasured) {
      auto r = Residency::Measure(s.paths[f]);
      residency.push_back(r.ok() ? std::move(*r) : Residency::Uniform(size, false));
    } else if (res == Residence::kAllCold) {
      residency.push_back(Residency::Uniform(size, false));
    } else {
      std::vector<unsigned char> pages((size + 4095) / 4096);
      for (std::size_t p = 0; p < pages.size(); ++p) pages[p] = p % 2;
      residency.push_back(Residency::FromPages(size, 4096, pages));
    }
  }
  for (std::size_t f = 0; f < s.paths.size(); ++f) sources->files[f].residency = &residency[f];
  out.status = WithWatchdog(
      [&] { return RunPipeline(*dev, *arena, s.rp(), sources->files, o, &out.report); });
  out.arena.resize(s.rp().arena_bytes());
  if (!dev->CopyToHost(out.arena.data(), arena->ptr, out.arena.size()).ok()) {
    ADD_FAILURE() << "copy back failed";
  }
  if (!dev->Free(*arena).ok()) ADD_FAILURE() << "arena free failed";
  return out;
}

}  // namespace hoist::testtransport
