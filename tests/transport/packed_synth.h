// Test-only: a synthetic packed checkpoint (one shard of codec streams, 4 KiB aligned), its
// LoadPlan with packed tensors, and the logical image (the original tensors back to back) that a
// plain-file reference reads; tensors may be cut in column stripes.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "proto/plan.pb.h"
#include "tests/codec/codec_data.h"
#include "tests/transport/test_util.h"

namespace hoist::testtransport {

struct TensorSpec {
  std::string name;
  codec::DType dtype;
  std::uint64_t rows, cols;
  int stripes;  // 1: one stream
};

// A packed "checkpoint": one shard of codec streams (4 KiB aligned), its LoadPlan (files and
// packed tensors), and the logical image (the original bytes back to back) for the reference.
struct Packed {
  std::unique_ptr<ScratchDir> dir = std::make_unique<ScratchDir>();
  proto::LoadPlan plan, ref_plan;
  std::vector<std::uint8_t> logical;
  std::vector<std::uint64_t> offsets;  // logical offset per tensor
  std::vector<TensorSpec> specs;
};

inline std::vector<std::uint8_t> Values(const TensorSpec& t, std::uint64_t seed) {
  const std::uint64_t n = t.rows * t.cols;
  if (t.dtype == codec::DType::kBF16) return codec::testing::NormalBf16(n, seed, 0.02);
  if (t.dtype == codec::DType::kF16) return codec::testing::NormalF16(n, seed, 0.02);
  return testtransport::Pattern(n * 4, seed);  // F32: stored
}

// Columns [c0, c1) of every row of a rows x cols tensor of `vb`-byte values.
inline std::vector<std::uint8_t> Columns(const std::vector<std::uint8_t>& v, const TensorSpec& t,
                                         std::uint64_t c0, std::uint64_t c1, std::uint32_t vb) {
  std::vector<std::uint8_t> out;
  for (std::uint64_t r = 0; r < t.rows; ++r) {
    const auto* row = v.data() + (r * t.cols + c0) * vb;
    out.insert(out.end(), row, row + (c1 - c0) * vb);
  }
  return out;
}

inline Packed MakePacked(const std::vector<TensorSpec>& specs, std::uint32_t block_values) {
  Packed p;
  p.specs = specs;
  std::vector<std::uint8_t> shard;
  proto::PackedTensor* pts = nullptr;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& t = specs[i];
    const std::uint32_t vb = codec::DTypeSize(t.dtype);
    const std::vector<std::uint8_t> v = Values(t, 100 + i);
    p.offsets.push_back(p.logical.size());
    pts = p.plan.add_packed();
    pts->set_name(t.name);
    pts->set_file(0);
    pts->set_offset(p.logical.size());
    pts->set_bytes(v.size());
    pts->set_row_values(t.cols);
    pts->set_value_bytes(vb);
    pts->set_dtype(std::string(codec::DTypeName(t.dtype)));
    pts->set_xxh64(codec::Xxh64(v.data(), v.size()));
    pts->set_name_xxh64(codec::Xxh64(t.name.data(), t.name.size()));
    p.logical.insert(p.logical.end(), v.begin(), v.end());
    for (int s = 0; s < t.stripes; ++s) {
      const std::uint64_t c0 = t.cols * s / t.stripes, c1 = t.cols * (s + 1) / t.stripes;
      codec::EncodeOptions o;
      o.block_values = block_values;
      o.sub_streams = 64;
      o.id = {codec::Xxh64(t.name.data(), t.name.size()), static_cast<std::uint32_t>(s),
              static_cast<std::uint32_t>(t.stripes), c0};
      auto stream = codec::Encode(t.dtype, Columns(v, t, c0, c1, vb), o);
      if (!stream.ok()) throw std::runtime_error(stream.status().ToString());
      auto info = codec::ParseStream(*stream, t.name);
      if (!info.ok()) throw std::runtime_error(info.status().ToString());
      shard.resize((shard.size() + 4095) / 4096 * 4096);
      proto::PackedStream* ps = pts->add_streams();
      ps->set_offset(shard.size());
      ps->set_bytes(stream->size());
      ps->set_col_begin(c0);
      ps->set_col_end(c1);
      ps->set_header(std::string(stream->begin(), stream->begin() + info->header_bytes));
      shard.insert(shard.end(), stream->begin(), stream->end());
    }
  }
  const std::string shard_path = p.dir->Sub("packed-00001.bin");
  const std::string image_path = p.dir->Sub("logical.bin");
  testtransport::WriteFile(shard_path, shard);
  testtransport::WriteFile(image_path, p.logical);
  proto::File f = testtransport::StatFile(shard_path);
  f.set_packed(true);
  f.set_logical_size(p.logical.size());
  *p.plan.add_files() = f;
  *p.ref_plan.add_files() = testtransport::StatFile(image_path);
  return p;
}

inline std::vector<TensorSpec> Specs() {
  return {{"a.bf16", codec::DType::kBF16, 96, 700, 1},
          {"b.f16", codec::DType::kF16, 50, 333, 1},
          {"c.f32", codec::DType::kF32, 40, 129, 1},
          {"d.striped", codec::DType::kBF16, 64, 512, 4},
          {"e.bf16", codec::DType::kBF16, 1, 5000, 1}};
}

// A rank plan of logical copies over `p` (file 0: the packed shard; a caller may add a plain file
// 1 holding the same logical image), its arena cursor-allocated, 256-aligned.
class PlanWriter {
 public:
  explicit PlanWriter(const Packed& p) : p_(p) {}
  // Rows [r0, r1), columns [c0, c1) of tensor i, read from `file`.
  void Rect(int i, std::uint64_t r0, std::uint64_t r1, std::uint64_t c0, std::uint64_t c1,
            std::uint64_t extra_pitch = 0, std::uint32_t file = 0) {
    const TensorSpec& t = p_.specs[i];
    const std::uint64_t vb = codec::DTypeSize(t.dtype), w = (c1 - c0) * vb;
    proto::Copy* c = rp_.add_copies();
    c->set_file(file);
    c->set_src_offset(p_.offsets[i] + (r0 * t.cols + c0) * vb);
    c->set_src_pitch(t.cols * vb);
    c->set_width(w);
    c->set_rows(r1 - r0);
    c->set_dst_pitch(w + extra_pitch);
    c->set_dst_offset(Alloc((r1 - r0) * (w + extra_pitch)));
  }
  void Range(std::uint64_t a, std::uint64_t b) {
    proto::Copy* c = rp_.add_copies();
    c->set_file(0);
    c->set_src_offset(a);
    c->set_width(b - a);
    c->set_rows(1);
    c->set_dst_offset(Alloc(b - a));
  }
  void Fill(std::uint64_t bytes, std::uint32_t value) {
    proto::Fill* f = rp_.add_fills();
    f->set_dst_offset(Alloc(bytes));
    f->set_bytes(bytes);
    f->set_value(value);
  }
  proto::RankPlan Done() {
    rp_.set_arena_bytes(cursor_);
    return rp_;
  }

 private:
  std::uint64_t Alloc(std::uint64_t n) {
    const std::uint64_t at = cursor_;
    cursor_ = (cursor_ + n + 255) / 256 * 256;
    return at;
  }
  const Packed& p_;
  proto::RankPlan rp_;
  std::uint64_t cursor_ = 0;
};

}  // namespace hoist::testtransport
