// The CUDA decoder of packed loads (Device::CreateDecoder .. DestroyDecoder and the batched kernel
// of codec/cuda/codec_decode.cu) against the CPU reference: fresh BF16/F16 and block-quantized
// FP8 (E4M3, E5M2) tensors encoded with codec::Encode (several block sizes, 32/64/100/128/256
// sub-streams, odd-sized last blocks; FP8 copies at odd arena offsets and pitches), and stored
// streams (F32, and BF16 that coding would not shrink), jobs built by hand for whole, row-sliced,
// column-sliced and strided copies, blocks at unaligned slot offsets; the arena must equal
// codec::Decode + ForEachKeptRun byte for byte, a damaged block must be reported by tensor and
// block: one that breaks a sub-stream, and one that only the block's checksum can tell (a raw
// byte of a coded block, a byte of a stored block). The GPU tests skip where no CUDA device is
// visible; the fixture's own check (its jobs cover exactly their copies) runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "tests/codec/codec_data.h"
#include "transport/devices/decode_job.h"
#include "transport/devices/device.h"

namespace hoist::transport {
namespace {

struct Tensor {
  std::string name;
  codec::DType dtype = codec::DType::kBF16;
  std::uint64_t rows = 0, cols = 0;
  std::vector<std::uint8_t> data, stream;
  codec::StreamInfo info;
  std::vector<std::uint64_t> block_src;  // each block's offset in the slot
};

// Rows [row0, row0 + rows) and columns [col0, col0 + width) of a tensor, to arena byte `dst`
// (rows dst_pitch bytes apart).
struct Copy {
  std::size_t tensor = 0;
  std::uint64_t row0 = 0, col0 = 0, rows = 0, width = 0, dst_pitch = 0;
  bool block_before = false;  // also a job for the block just before the copy (nothing kept)
  std::uint64_t dst = 0;      // laid out by MakeCase
};

struct Case {
  std::vector<Tensor> tensors;
  std::vector<Copy> copies;
  DecodeSet set;
  std::vector<std::uint8_t> slot;     // every block once, at its block_src
  std::vector<std::uint8_t> initial;  // the arena before decoding (random bytes)
};

// Tensor `name` of `data` (rows x cols values), encoded with `o`; the stream must use `method`.
Tensor Encoded(const std::string& name, codec::DType dtype, std::uint64_t rows, std::uint64_t cols,
               std::uint64_t seed, std::vector<std::uint8_t> data, const codec::EncodeOptions& o,
               codec::Method method) {
  Tensor t;
  t.name = "shard-" + std::to_string(seed) + ".safetensors: " + name;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  t.data = std::move(data);
  t.stream = codec::Encode(dtype, t.data, o).value();
  t.info = codec::ParseStream(t.stream, t.name).value();
  EXPECT_EQ(t.info.method, method) << t.name;
  return t;
}

// A coded stream of weights (normal BF16/F16, block-quantized FP8).
Tensor MakeTensor(const std::string& name, codec::DType dtype, std::uint64_t rows,
                  std::uint64_t cols, std::uint32_t block_values, std::uint32_t sub_streams,
                  std::uint64_t seed) {
  std::vector<std::uint8_t> data;
  if (dtype == codec::DType::kF8E4M3 || dtype == codec::DType::kF8E5M2) {
    data = codec::testing::BlockQuantizedF8(dtype, rows, cols, seed);
  } else {
    data = dtype == codec::DType::kBF16 ? codec::testing::NormalBf16(rows * cols, seed, 0.02)
                                        : codec::testing::NormalF16(rows * cols, seed, 0.02);
  }
  codec::EncodeOptions o;
  o.block_values = block_values;
  o.sub_streams = sub_streams;
  return Encoded(name, dtype, rows, cols, seed, std::move(data), o, codec::Method::kHuffman);
}

// A stored stream of random values (F32, or BF16 written with coding off).
Tensor MakeStoredTensor(const std::string& name, codec::DType dtype, std::uint64_t rows,
                        std::uint64_t cols, std::uint32_t block_values, std::uint64_t seed) {
  std::vector<std::uint8_t> data(rows * cols * codec::DTypeSize(dtype));
  std::uint64_t state = seed;
  for (auto& b : data) b = static_cast<std::uint8_t>(codec::testing::SplitMix(state));
  codec::EncodeOptions o;
  o.block_values = block_values;
  o.allow_huffman = false;
  return Encoded(name, dtype, rows, cols, seed, std::move(data), o, codec::Method::kStored);
}

// Every block of every tensor once, 0..3 bytes apart so that many sit at unaligned addresses.
void PlaceBlocks(Case& c) {
  std::uint64_t gap = 0;
  for (Tensor& t : c.tensors) {
    for (std::uint32_t b = 0; b < t.info.block_count; ++b) {
      const std::uint64_t begin = t.info.header_bytes + t.info.block_offsets[b];
      const std::uint64_t size = t.info.block_offsets[b + 1] - t.info.block_offsets[b];
      c.slot.resize(c.slot.size() + gap++ % 4, 0xEE);
      t.block_src.push_back(c.slot.size());
      c.slot.insert(c.slot.end(), t.stream.begin() + begin, t.stream.begin() + begin + size);
    }
  }
}

// The jobs of one copy: every block overlapping its source extent (and one before, if asked).
void AddJobs(Case& c, const Copy& copy) {
  const Tensor& t = c.tensors[copy.tensor];
  const std::uint64_t e0 = copy.row0 * t.cols + copy.col0;
  const std::uint64_t end = e0 + (copy.rows - 1) * t.cols + copy.width;
  const std::uint64_t v = t.info.block_values;
  for (std::uint32_t b = 0; b < t.info.block_count; ++b) {
    const std::uint64_t v0 = b * v, n = t.info.block_value_count(b);
    const bool overlaps = v0 < end && v0 + n > e0;
    const bool before = copy.block_before && v0 + n <= e0 && v0 + n + v > e0;
    if (!overlaps && !before) continue;
    DecodeJob j;
    j.src = t.block_src[b];
    j.dst = copy.dst;
    j.dst_pitch = copy.dst_pitch;
    j.first = static_cast<std::int64_t>(v0) - static_cast<std::int64_t>(e0);
    j.pitch = t.cols;
    j.width = copy.width;
    j.rows = copy.rows;
    j.bytes = static_cast<std::uint32_t>(t.info.block_offsets[b + 1] - t.info.block_offsets[b]);
    j.values = static_cast<std::uint32_t>(n);
    j.stream = static_cast<std::uint32_t>(copy.tensor);
    j.block = b;
    j.checksum = t.info.block_checksums[b];
    c.set.jobs.push_back(j);
  }
}

Case MakeCase() {
  using codec::DType;
  Case c;
  c.tensors.push_back(MakeTensor("a", DType::kBF16, 50, 1000, 4096, 256, 1));    // last block 848
  c.tensors.push_back(MakeTensor("b", DType::kF16, 37, 301, 1000, 32, 2));       // last 137
  c.tensors.push_back(MakeTensor("c", DType::kBF16, 300, 40, 1024, 64, 3));      // last 736
  c.tensors.push_back(MakeTensor("d", DType::kF16, 40, 203, 4000, 256, 4));      // last 120 < T
  c.tensors.push_back(MakeTensor("e", DType::kBF16, 400, 500, 65536, 256, 5));   // last 3392
  c.tensors.push_back(MakeTensor("f", DType::kBF16, 90, 77, 2000, 100, 6));      // last 930
  c.tensors.push_back(MakeTensor("g", DType::kF8E4M3, 300, 700, 4096, 128, 7));  // last 1104
  c.tensors.push_back(MakeTensor("h", DType::kF8E5M2, 64, 333, 1000, 32, 8));    // last 312
  c.tensors.push_back(MakeStoredTensor("i", DType::kF32, 70, 130, 4096, 9));     // last 908
  c.tensors.push_back(MakeStoredTensor("j", DType::kBF16, 33, 517, 1000, 10));   // last 61
  c.copies = {
      {0, 0, 0, 50, 1000, 2000},           // whole tensor, contiguous
      {0, 7, 0, 16, 1000, 2000, true},     // rows 7..22: starts mid-block (first < 0)
      {0, 30, 123, 1, 500, 1000},          // part of one row
      {0, 0, 250, 50, 500, 1000},          // columns: pitch 1000 > T 256, rows span blocks
      {1, 0, 0, 37, 301, 2 * 301 + 38},    // whole rows, a wider arena pitch
      {1, 3, 100, 30, 150, 400, true},     // columns, a wider arena pitch
      {2, 10, 5, 280, 30, 60},             // columns: pitch 40 < T 64, many rows a block
      {3, 0, 0, 40, 203, 406},             // whole, a last block shorter than T
      {4, 101, 17, 232, 463, 1000, true},  // 64 Ki-value blocks
      {5, 2, 10, 80, 60, 120},             // T 100 > pitch 77 (not a multiple of 32)
      {5, 50, 0, 40, 77, 154},             // the last rows, contiguous
      {6, 0, 0, 300, 700, 700},            // FP8: whole tensor, contiguous
      {6, 11, 100, 200, 251, 253, true},   // FP8 columns, odd width and arena pitch
      {7, 0, 0, 64, 333, 333},             // E5M2, whole
      {7, 5, 3, 40, 100, 101, true},       // E5M2 columns, pitch 333 > T 32
      {8, 0, 0, 70, 130, 4 * 130},         // stored F32, whole
      {8, 9, 7, 50, 77, 4 * 80, true},     // stored F32 columns
      {9, 0, 0, 33, 517, 2 * 517},         // stored BF16, whole
      {9, 2, 300, 30, 200, 402, true},     // stored BF16 columns, pitch 517 > 256 lanes
  };
  PlaceBlocks(c);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < c.copies.size(); ++i) {
    Copy& copy = c.copies[i];
    const std::uint64_t vb = codec::DTypeSize(c.tensors[copy.tensor].dtype);
    copy.dst = (at + 15) / 16 * 16 + (i % 2) * (vb == 1 ? 1 : vb == 2 ? 2 : 0);  // 2 mod 4, odd
    at = copy.dst + (copy.rows - 1) * copy.dst_pitch + vb * copy.width + 6;
    AddJobs(c, copy);
  }
  for (const Tensor& t : c.tensors) {
    c.set.AddStream(t.info, t.name);
  }
  for (const DecodeJob& j : c.set.jobs) {
    c.set.max_block_bytes = std::max<std::uint64_t>(c.set.max_block_bytes, j.bytes);
  }
  c.initial.resize(at);
  std::uint64_t state = 99;
  for (auto& byte : c.initial) byte = static_cast<std::uint8_t>(codec::testing::SplitMix(state));
  return c;
}

// The reference: each stream decoded on the CPU, each job's kept runs (ForEachKeptRun) copied in.
std::vector<std::uint8_t> ExpectedArena(const Case& c) {
  std::vector<std::vector<std::uint8_t>> decoded;
  for (const Tensor& t : c.tensors) {
    decoded.emplace_back(t.data.size());
    const Status s = codec::Decode(t.stream, decoded.back(), t.name);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  std::vector<std::uint8_t> arena = c.initial;
  for (const DecodeJob& j : c.set.jobs) {
    const std::uint8_t* values =
        decoded[j.stream].data() + c.set.streams[j.stream].block_first_byte(j.block);
    const std::uint32_t vb = ValueBytes(c.set.streams[j.stream]);
    ForEachKeptRun(j, vb, [&](std::uint64_t k0, std::uint64_t k1, std::uint64_t at) {
      std::memcpy(arena.data() + at, values + vb * k0, vb * (k1 - k0));
    });
  }
  return arena;
}

// The copies made directly from the original tensors (no codec, no jobs).
std::vector<std::uint8_t> DirectArena(const Case& c) {
  std::vector<std::uint8_t> arena = c.initial;
  for (const Copy& copy : c.copies) {
    const Tensor& t = c.tensors[copy.tensor];
    const std::uint64_t vb = codec::DTypeSize(t.dtype);
    for (std::uint64_t r = 0; r < copy.rows; ++r) {
      std::memcpy(arena.data() + copy.dst + r * copy.dst_pitch,
                  t.data.data() + vb * ((copy.row0 + r) * t.cols + copy.col0), vb * copy.width);
    }
  }
  return arena;
}

void ExpectSameArena(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t differ = 0, first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << differ << " arena bytes differ, the first at " << first << " of "
                        << got.size();
}

// The first single-bit flip in the coded words of job j's block that the CPU decoder reports as a
// bad sub-stream (no code, a code past its end, bits left over): the GPU must notice it too.
std::uint64_t SubStreamBreakingBit(const Case& c, const DecodeJob& j) {
  const codec::StreamInfo& info = c.set.streams[j.stream];
  const std::uint64_t head = info.min_block_head_bytes(j.values);  // coded words after it
  std::vector<std::uint8_t> block(c.slot.begin() + j.src, c.slot.begin() + j.src + j.bytes);
  std::vector<std::uint8_t> out(ValueBytes(info) * std::uint64_t{j.values});
  for (std::uint64_t bit = 8 * head; bit < 8 * std::uint64_t{j.bytes}; ++bit) {
    block[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    const Status s = codec::DecodeBlockBytes(info, j.block, block, out, "x");
    block[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    if (!s.ok() && s.message().find("sub-stream") != std::string::npos) return bit;
  }
  ADD_FAILURE() << "no bit of block " << j.block << " breaks a sub-stream";
  return 0;
}

TEST(DecoderCudaFixture, JobsCoverExactlyTheirCopies) {
  const Case c = MakeCase();
  ASSERT_FALSE(::testing::Test::HasFailure());
  ExpectSameArena(ExpectedArena(c), DirectArena(c));
  // The cases the kernel must get right are really in the set.
  const auto any = [&](auto pred) {
    return std::any_of(c.set.jobs.begin(), c.set.jobs.end(), pred);
  };
  auto T = [&](const DecodeJob& j) { return c.set.streams[j.stream].sub_streams; };
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.first < 0; }));
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.src % 4 != 0; }));
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.src % 2 != 0; }));
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.first + j.values <= 0; }));  // none kept
  EXPECT_TRUE(any([&](const DecodeJob& j) { return j.pitch > j.width && j.pitch < T(j); }));
  EXPECT_TRUE(any([&](const DecodeJob& j) { return j.pitch > j.width && j.pitch > T(j); }));
  EXPECT_TRUE(
      any([](const DecodeJob& j) { return j.pitch == j.width && j.dst_pitch > 2 * j.width; }));
  EXPECT_TRUE(any([&](const DecodeJob& j) { return j.values < T(j); }));
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.rows == 1; }));
  EXPECT_TRUE(any([](const DecodeJob& j) { return j.dst % 4 == 2; }));
  EXPECT_TRUE(any([&](const DecodeJob& j) {  // FP8 at an odd arena byte
    return ValueBytes(c.set.streams[j.stream]) == 1 && j.dst % 2 == 1;
  }));
  for (codec::DType d : {codec::DType::kF32, codec::DType::kBF16}) {  // stored streams' jobs
    EXPECT_TRUE(any([&](const DecodeJob& j) {
      const codec::StreamInfo& s = c.set.streams[j.stream];
      return s.method == codec::Method::kStored && s.dtype == d && j.pitch > j.width;
    }));
  }
}

std::unique_ptr<Device> OpenGpuOrSkip() {
  if (CudaDeviceCount() == 0) return nullptr;
  auto d = OpenCudaDevice(0);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? std::move(*d) : nullptr;
}

#define GPU_OR_SKIP(dev)      \
  auto dev = OpenGpuOrSkip(); \
  if (!dev) GTEST_SKIP() << "no CUDA device visible on this machine"

// Device copies of a case's slot and initial arena, a stream and a decoder of its set.
struct OnGpu {
  Device& dev;
  DeviceBuffer slot, arena;
  StreamId stream = -1;
  DecoderId decoder = -1;

  explicit OnGpu(Device& d) : dev(d) {}
  ~OnGpu() {
    if (decoder >= 0) {
      EXPECT_TRUE(dev.DestroyDecoder(decoder).ok());
    }
    if (stream >= 0) {
      EXPECT_TRUE(dev.DestroyStream(stream).ok());
    }
    EXPECT_TRUE(dev.Free(slot).ok());
    EXPECT_TRUE(dev.Free(arena).ok());
  }
  Status Upload(const std::vector<std::uint8_t>& host, DeviceBuffer& to) {
    return dev.CopySync(Copy2D{to.ptr, 0, host.data(), 0, host.size(), 1});
  }
  Status Set(const Case& c) {
    HOIST_ASSIGN_OR_RETURN(slot, dev.Allocate(c.slot.size()));
    HOIST_ASSIGN_OR_RETURN(arena, dev.Allocate(c.initial.size()));
    HOIST_RETURN_IF_ERROR(Upload(c.slot, slot));
    HOIST_RETURN_IF_ERROR(Upload(c.initial, arena));
    HOIST_ASSIGN_OR_RETURN(stream, dev.CreateStream());
    HOIST_ASSIGN_OR_RETURN(decoder, dev.CreateDecoder(c.set));
    return Status::Ok();
  }
  // Jobs [0, split) and [split, jobs) in two launches, then a wait for the stream.
  Status Decode(std::size_t split, std::size_t jobs) {
    HOIST_RETURN_IF_ERROR(dev.DecodeAsync(decoder, 0, split, slot.ptr, arena.ptr, stream));
    HOIST_RETURN_IF_ERROR(
        dev.DecodeAsync(decoder, split, jobs - split, slot.ptr, arena.ptr, stream));
    return dev.Synchronize(stream);
  }
  std::vector<std::uint8_t> Arena() {
    std::vector<std::uint8_t> out(arena.bytes);
    const Status s = dev.CopyToHost(out.data(), arena.ptr, out.size());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
};

// Builds without the kernels answer Unsupported; the tests then skip.
#ifdef HOIST_HAVE_CUDA_DECODE
#define DECODER_OR_SKIP(status) ASSERT_TRUE((status).ok()) << (status).ToString()
#else
#define DECODER_OR_SKIP(status)                                          \
  ASSERT_EQ((status).code(), Code::kUnsupported) << (status).ToString(); \
  GTEST_SKIP() << "this build has no CUDA decode kernels"
#endif

TEST(DecoderCuda, DecodesEveryKindOfCopyLikeTheCpu) {
  GPU_OR_SKIP(dev);
  const Case c = MakeCase();
  ASSERT_FALSE(::testing::Test::HasFailure());
  OnGpu gpu(*dev);
  const Status set = gpu.Set(c);
  DECODER_OR_SKIP(set);
  const std::size_t jobs = c.set.jobs.size();
  const Status run = gpu.Decode(jobs / 2 + 1, jobs);
  ASSERT_TRUE(run.ok()) << run.ToString();
  const Status decoded = dev->DecoderStatus(gpu.decoder);
  EXPECT_TRUE(decoded.ok()) << decoded.ToString();
  ExpectSameArena(gpu.Arena(), ExpectedArena(c));
}

TEST(DecoderCuda, ReportsADamagedBlockThenResets) {
  GPU_OR_SKIP(dev);
  Case c = MakeCase();
  ASSERT_FALSE(::testing::Test::HasFailure());
  // The last block of tensor "c": one job reads it (the error names exactly it).
  std::size_t bad = c.set.jobs.size();
  for (std::size_t i = 0; i < c.set.jobs.size(); ++i) {
    if (c.set.jobs[i].stream == 2) bad = i;
  }
  ASSERT_LT(bad, c.set.jobs.size());
  const DecodeJob& j = c.set.jobs[bad];
  ASSERT_EQ(j.block, c.set.streams[2].block_count - 1);
  const std::uint64_t bit = SubStreamBreakingBit(c, j);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<std::uint8_t> intact = c.slot;
  c.slot[j.src + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));

  OnGpu gpu(*dev);
  const Status set = gpu.Set(c);
  DECODER_OR_SKIP(set);
  ASSERT_TRUE(gpu.Decode(bad - 1, c.set.jobs.size()).ok());  // the bad job second in launch 2
  const Status s = dev->DecoderStatus(gpu.decoder);
  EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
  EXPECT_NE(s.message().find(c.tensors[2].name + ": codec stream: block " +
                             std::to_string(j.block) + " is damaged"),
            std::string::npos)
      << s.ToString();
  const Status again = dev->DecoderStatus(gpu.decoder);
  EXPECT_TRUE(again.ok()) << "the flag was not reset: " << again.ToString();

  // The same decoder with the intact blocks: clean, and every kept value right.
  ASSERT_TRUE(gpu.Upload(intact, gpu.slot).ok());
  ASSERT_TRUE(gpu.Decode(0, c.set.jobs.size()).ok());
  const Status clean = dev->DecoderStatus(gpu.decoder);
  EXPECT_TRUE(clean.ok()) << clean.ToString();
  c.slot = intact;
  ExpectSameArena(gpu.Arena(), ExpectedArena(c));
}

// Damage that leaves every sub-stream well-formed: a flipped raw (sign/mantissa) bit of a coded
// block, and a flipped byte of a stored block. The CPU decoder refuses both by the block's
// checksum; the GPU must too, naming the tensor and block, and then decode the intact bytes.
TEST(DecoderCuda, ChecksumsCatchWhatTheSubStreamsCannot) {
  GPU_OR_SKIP(dev);
  const Case c = MakeCase();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const auto first_job_of = [&](std::size_t tensor) {
    for (std::size_t i = 0; i < c.set.jobs.size(); ++i) {
      if (c.set.jobs[i].stream == tensor) return i;
    }
    return c.set.jobs.size();
  };
  for (std::size_t tensor : {std::size_t{0}, std::size_t{6}, std::size_t{8}, std::size_t{9}}) {
    SCOPED_TRACE(c.tensors[tensor].name);
    const std::size_t bad = first_job_of(tensor);
    ASSERT_LT(bad, c.set.jobs.size());
    const DecodeJob& j = c.set.jobs[bad];
    Case damaged = c;
    damaged.slot[j.src + 5] ^= 0x10;  // a raw byte of a coded block, a value of a stored one
    std::vector<std::uint8_t> block(damaged.slot.begin() + j.src,
                                    damaged.slot.begin() + j.src + j.bytes);
    std::vector<std::uint8_t> out(ValueBytes(c.set.streams[j.stream]) * std::uint64_t{j.values});
    const Status cpu = codec::DecodeBlockBytes(c.set.streams[j.stream], j.block, block, out, "x");
    ASSERT_NE(cpu.message().find("checksum mismatch"), std::string::npos) << cpu.ToString();

    OnGpu gpu(*dev);
    const Status set = gpu.Set(damaged);
    DECODER_OR_SKIP(set);
    ASSERT_TRUE(gpu.Decode(c.set.jobs.size() / 2, c.set.jobs.size()).ok());
    const Status s = dev->DecoderStatus(gpu.decoder);
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_NE(s.message().find(c.tensors[tensor].name + ": codec stream: block " +
                               std::to_string(j.block) + " is damaged"),
              std::string::npos)
        << s.ToString();
    ASSERT_TRUE(gpu.Upload(c.slot, gpu.slot).ok());
    ASSERT_TRUE(gpu.Decode(0, c.set.jobs.size()).ok());
    const Status clean = dev->DecoderStatus(gpu.decoder);
    EXPECT_TRUE(clean.ok()) << clean.ToString();
  }
}

TEST(DecoderCuda, RefusesBadArguments) {
  GPU_OR_SKIP(dev);
  const Case c = MakeCase();
  ASSERT_FALSE(::testing::Test::HasFailure());
  OnGpu gpu(*dev);
  const Status set = gpu.Set(c);
  DECODER_OR_SKIP(set);
  const std::size_t n = c.set.jobs.size();
  const auto code = [&](std::size_t first, std::size_t count, const void* src) {
    return dev->DecodeAsync(gpu.decoder, first, count, src, gpu.arena.ptr, gpu.stream).code();
  };
  EXPECT_EQ(code(n, 0, gpu.slot.ptr), Code::kOk);  // nothing to do
  EXPECT_EQ(code(n, 1, gpu.slot.ptr), Code::kInvalidArgument);
  EXPECT_EQ(code(1, n, gpu.slot.ptr), Code::kInvalidArgument);
  EXPECT_EQ(code(0, 1, nullptr), Code::kInvalidArgument);
  EXPECT_EQ(
      dev->DecodeAsync(gpu.decoder + 100, 0, 1, gpu.slot.ptr, gpu.arena.ptr, gpu.stream).code(),
      Code::kInvalidArgument);
  EXPECT_EQ(dev->DecoderStatus(gpu.decoder + 100).code(), Code::kInvalidArgument);

  DecodeSet wide = c.set;  // more sub-streams than a CUDA block has threads
  wide.streams[0].sub_streams = 2048;
  EXPECT_EQ(dev->CreateDecoder(wide).status().code(), Code::kInvalidArgument);
  DecodeSet odd = c.set;  // an odd arena offset of a BF16 stream
  ASSERT_EQ(odd.streams[odd.jobs[0].stream].dtype, codec::DType::kBF16);
  odd.jobs[0].dst += 1;
  EXPECT_EQ(dev->CreateDecoder(odd).status().code(), Code::kInvalidArgument);
  DecodeSet short_tables = c.set;  // code lengths out of step with the streams
  short_tables.code_lengths.pop_back();
  EXPECT_EQ(dev->CreateDecoder(short_tables).status().code(), Code::kInvalidArgument);
  DecodeSet other_lengths = c.set;  // lengths that are not the stream's own (an invalid code)
  other_lengths.code_lengths.back().fill(1);
  EXPECT_EQ(dev->CreateDecoder(other_lengths).status().code(), Code::kInvalidArgument);

  auto other = dev->CreateDecoder(c.set);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_TRUE(dev->DestroyDecoder(*other).ok());
  EXPECT_EQ(dev->DestroyDecoder(*other).code(), Code::kInvalidArgument);
  ASSERT_TRUE(dev->Synchronize(gpu.stream).ok());
  EXPECT_TRUE(dev->DecoderStatus(gpu.decoder).ok());
}

}  // namespace
}  // namespace hoist::transport
