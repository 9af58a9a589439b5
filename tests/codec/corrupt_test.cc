// Damaged codec streams are refused with one Corrupt (or Unsupported) error naming the tensor
// and a byte offset; nothing crashes and nothing is accepted that differs from the original.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "tests/codec/codec_data.h"
#include "tests/test_paths.h"

namespace hoist::codec {
namespace {

constexpr const char* kName = "model-00001-of-00002.safetensors: model.layers.3.mlp.up_proj.weight";

struct Sample {
  std::vector<std::uint8_t> data, stream;
};

Sample MakeSample(DType dtype = DType::kBF16) {
  Sample s;
  const bool f8 = dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2;
  s.data = f8 ? testing::BlockQuantizedF8(dtype, 20, 150, 23) : testing::NormalBf16(3000, 23, 0.02);
  EncodeOptions o;
  o.block_values = 1000;  // three blocks, the last one short of 1000 (1000 = 15 x 64 + 40)
  o.sub_streams = 64;
  s.stream = *Encode(dtype, s.data, o);
  return s;
}

Status DecodeAll(const std::vector<std::uint8_t>& stream, std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  return Decode(stream, out, kName);
}

void ExpectNamedError(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_TRUE(s.code() == Code::kCorrupt || s.code() == Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find(kName), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("byte "), std::string::npos) << s.ToString();
}

// Rewrites the header checksum after a deliberate change, so the checks behind it are reached.
void Reseal(std::vector<std::uint8_t>& stream) {
  std::uint32_t header;
  std::memcpy(&header, &stream[28], 4);
  const std::uint64_t sum = Xxh64(stream.data(), header - 8);
  std::memcpy(&stream[header - 8], &sum, 8);
}

TEST(CodecCorrupt, EveryFlippedBitIsRefused) {
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3, DType::kF8E5M2}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Sample s = MakeSample(dtype);
    ASSERT_TRUE(DecodeAll(s.stream, s.data.size()).ok());
    if (dtype != DType::kF32) {
      ASSERT_EQ(s.stream[7], 1) << "a coded stream";
    }
    for (std::size_t i = 0; i < s.stream.size(); ++i) {
      for (int bit = 0; bit < 8; bit += (i < 512 ? 1 : 3)) {
        auto bad = s.stream;
        bad[i] ^= static_cast<std::uint8_t>(1 << bit);
        ExpectNamedError(DecodeAll(bad, s.data.size()),
                         "byte " + std::to_string(i) + " bit " + std::to_string(bit));
        if (HasFailure()) return;
      }
    }
  }
}

// The same for a stream of format 2 (u16 sub-stream lengths), which this build still reads.
TEST(CodecCorrupt, EveryFlippedBitOfAFormat2StreamIsRefused) {
  std::ifstream in(hoist::testing::SourceDir() + "/tests/fuzz/codec_corpus/bf16_normal",
                   std::ios::binary);
  const std::vector<std::uint8_t> stream{std::istreambuf_iterator<char>(in), {}};
  ASSERT_EQ(stream[4], 2);
  const auto info = ParseStream(stream, kName);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::size_t bytes = info->original_bytes;
  ASSERT_TRUE(DecodeAll(stream, bytes).ok());
  for (std::size_t i = 0; i < stream.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = stream;
      bad[i] ^= static_cast<std::uint8_t>(1 << bit);
      ExpectNamedError(DecodeAll(bad, bytes),
                       "byte " + std::to_string(i) + " bit " + std::to_string(bit));
      if (HasFailure()) return;
    }
  }
}

TEST(CodecCorrupt, EveryTruncationAndAnExtension) {
  const Sample s = MakeSample();
  for (std::size_t n = 0; n < s.stream.size(); ++n) {
    const std::vector<std::uint8_t> cut(s.stream.begin(), s.stream.begin() + n);
    ExpectNamedError(DecodeAll(cut, s.data.size()), "truncated to " + std::to_string(n));
    if (HasFailure()) return;
  }
  auto longer = s.stream;
  longer.push_back(0);
  ExpectNamedError(DecodeAll(longer, s.data.size()), "one byte appended");
}

TEST(CodecCorrupt, NamedReasons) {
  const Sample s = MakeSample();
  auto expect = [&](std::vector<std::uint8_t> bad, const std::string& reason) {
    const Status st = DecodeAll(bad, s.data.size());
    ExpectNamedError(st, reason);
    EXPECT_NE(st.message().find(reason), std::string::npos) << st.ToString();
  };
  auto bad = s.stream;
  bad[0] = 'X';
  expect(bad, "bad magic");
  bad = s.stream;
  bad[4] = kFormatVersion + 1;
  Reseal(bad);
  EXPECT_EQ(DecodeAll(bad, s.data.size()).code(), Code::kUnsupported);
  expect(bad, "format version " + std::to_string(kFormatVersion + 1));
  bad[4] = kOldestReadVersion - 1;
  Reseal(bad);
  EXPECT_EQ(DecodeAll(bad, s.data.size()).code(), Code::kUnsupported);
  bad = s.stream;
  bad[48] = 1;  // stream 1 of 1
  Reseal(bad);
  expect(bad, "stream 1 of 1 streams");
  bad = s.stream;
  bad[324] ^= 1;  // first block offset, without resealing
  expect(bad, "header checksum mismatch");
  bad = s.stream;
  bad[320 + 8 + 5] = 0x01;  // block 1's offset (+ 2^40), resealed
  Reseal(bad);
  expect(bad, "past the payload");
  bad = s.stream;
  bad[64 + 120] = 13;  // a code longer than 12 bits
  Reseal(bad);
  expect(bad, "invalid code table");
  bad = s.stream;
  const auto info = *ParseStream(s.stream, kName);
  const std::uint64_t lengths = info.header_bytes + 1000;  // block 0: 1000 raw bytes
  bad[lengths] += 1;  // the base length: every sub-stream claims one bit more
  expect(bad, "sub-stream 0");
  bad = s.stream;
  bad[lengths + 2] += 1;  // the field width: the fields are read at other places
  expect(bad, "block 0");
  bad = s.stream;
  bad[lengths + 2] = 17;  // fields over 16 bits
  expect(bad, "sub-stream length fields of 17 bits");
  bad = s.stream;
  bad[info.header_bytes + 5] ^= 0x40;  // a raw byte: only the block checksum can tell
  expect(bad, "block 0 checksum mismatch");
  std::vector<std::uint8_t> out(s.data.size() + 2);
  EXPECT_FALSE(Decode(s.stream, out, kName).ok());  // wrong output size
}

// The identity the encoder is given comes back from the parser as written, under the header
// checksum (a changed identity byte is a header checksum mismatch).
TEST(CodecCorrupt, StreamIdentityRoundTripsUnderTheHeaderChecksum) {
  const std::vector<std::uint8_t> data = testing::NormalBf16(3000, 7, 0.02);
  EncodeOptions o;
  o.id = StreamId{Xxh64("w", 1), 2, 4, 96};
  for (bool huffman : {true, false}) {
    o.allow_huffman = huffman;
    auto stream = *Encode(DType::kBF16, data, o);
    const auto info = ParseStream(stream, kName);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->id, o.id);
    EXPECT_EQ(info->header_checksum,
              Xxh64(stream.data(), static_cast<std::size_t>(info->header_bytes - 8)));
    stream[56] ^= 1;  // the first column
    ExpectNamedError(DecodeAll(stream, data.size()), "identity byte changed");
  }
}

TEST(CodecCorrupt, SingleBlockDecodeChecksItsBlock) {
  const Sample s = MakeSample();
  const auto info = *ParseStream(s.stream, kName);
  auto bad = s.stream;
  bad[info.header_bytes + info.block_offsets[1] + 9] ^= 0x01;  // block 1's raw bytes
  std::vector<std::uint8_t> out(2000);
  EXPECT_TRUE(DecodeBlock(info, bad, 0, out, kName).ok());
  const Status s1 = DecodeBlock(info, bad, 1, out, kName);
  EXPECT_EQ(s1.code(), Code::kCorrupt);
  EXPECT_NE(s1.message().find("block 1 checksum mismatch"), std::string::npos) << s1.ToString();
  EXPECT_FALSE(DecodeBlock(info, s.stream, 3, out, kName).ok());  // no block 3
}

}  // namespace
}  // namespace hoist::codec
