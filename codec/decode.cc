// The CPU reference decoder (docs/CODEC.md): one block at a time, every sub-stream checked.
#include <algorithm>
#include <cstring>
#include <string>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "codec/layout.h"
#include "util/parallel.h"

namespace hoist::codec {
namespace {

using layout::Load;

Status Bad(std::string_view name, std::uint64_t offset, const std::string& what) {
  return Status::Corrupt(std::string(name) + ": codec stream: byte " + std::to_string(offset) +
                         ": " + what);
}

class BitStream {  // the coded words of one block, read in order; reads past the end see zeros
 public:
  BitStream(const std::uint8_t* words, std::uint64_t count) : words_(words), count_(count) {
    Refill();
  }
  std::uint32_t Peek12() const { return static_cast<std::uint32_t>(buf_ >> (64 - kLutBits)); }
  void Skip(int len) {  // len <= kLutBits
    buf_ <<= len;
    have_ -= len;
    pos_ += static_cast<std::uint64_t>(len);
    if (have_ < 32) Refill();
  }
  std::uint64_t pos() const { return pos_; }
  std::uint32_t Word(std::uint64_t i) const {
    return i < count_ ? Load<std::uint32_t>(words_ + 4 * i) : 0;
  }

 private:
  void Refill() {  // keeps at least 32 bits buffered
    buf_ |= std::uint64_t{Word(next_++)} << (32 - have_);
    have_ += 32;
  }
  const std::uint8_t* words_;
  std::uint64_t count_;
  std::uint64_t buf_ = 0;  // the next bits, most significant first
  int have_ = 0;
  std::uint64_t next_ = 0;
  std::uint64_t pos_ = 0;
};

// Padding bytes [from, to) must be zero (so that every changed byte of a stream is noticed).
// `at` is blk's offset in the stream (for messages).
Status CheckZero(const std::uint8_t* blk, std::uint64_t at, std::uint64_t from, std::uint64_t to,
                 std::uint32_t b, std::string_view name) {
  for (std::uint64_t i = from; i < to; ++i) {
    if (blk[i] != 0) return Bad(name, at + i, "block " + std::to_string(b) + " padding is not 0");
  }
  return Status::Ok();
}

// Value k's raw bits from the packed raw region (docs/CODEC.md).
template <std::uint32_t kBits>
inline std::uint32_t RawAt(const std::uint8_t* raw, std::uint64_t k) {
  if constexpr (kBits == 8) {
    return raw[k];
  } else if constexpr (kBits == 0) {
    return 0;
  } else if constexpr (8 % kBits == 0) {
    return (raw[k * kBits / 8] >> (k * kBits % 8)) & ((1u << kBits) - 1);
  } else {
    return layout::BitField(raw, k * kBits, kBits);
  }
}

// Decodes sub-stream values k = t, t + T, ... < n from `bits` up to bit `stop`; false when a
// bit pattern has no code or a code crosses `stop`.
template <DType kDType>
bool DecodeSubStream(const DecodeLut& lut, BitStream& bits, std::uint64_t stop, std::uint64_t t,
                     std::uint64_t T, std::uint64_t n, const std::uint8_t* raw, std::uint8_t* out) {
  constexpr Split split = SplitOf(kDType);
  for (std::uint64_t k = t; k < n; k += T) {
    const std::uint16_t e = lut[bits.Peek12()];
    const int len = e >> 8;
    if (len == 0 || bits.pos() + static_cast<std::uint64_t>(len) > stop) return false;
    bits.Skip(len);
    const std::uint32_t v = Join(split, e & 0xFF, RawAt<split.raw_bits()>(raw, k));
    if constexpr (split.value_bytes == 2) {
      layout::Store<std::uint16_t>(out + 2 * k, static_cast<std::uint16_t>(v));
    } else {
      out[k] = static_cast<std::uint8_t>(v);
    }
  }
  return true;
}

bool DecodeSubStreamOf(DType dtype, const DecodeLut& lut, BitStream& bits, std::uint64_t stop,
                       std::uint64_t t, std::uint64_t T, std::uint64_t n, const std::uint8_t* raw,
                       std::uint8_t* out) {
  switch (dtype) {
    case DType::kBF16:
      return DecodeSubStream<DType::kBF16>(lut, bits, stop, t, T, n, raw, out);
    case DType::kF16:
      return DecodeSubStream<DType::kF16>(lut, bits, stop, t, T, n, raw, out);
    case DType::kF8E4M3:
      return DecodeSubStream<DType::kF8E4M3>(lut, bits, stop, t, T, n, raw, out);
    case DType::kF8E5M2:
      return DecodeSubStream<DType::kF8E5M2>(lut, bits, stop, t, T, n, raw, out);
    default:
      return false;  // the parser lets no other dtype be coded
  }
}

// A block's sub-stream lengths: sub-stream t has base + (the width-bit field t of `fields`).
struct Lengths {
  const std::uint8_t* fields = nullptr;
  std::uint32_t base = 0, width = 16;
  std::uint64_t region = 0;      // bytes of the lengths region
  std::uint64_t fields_rel = 0;  // where the fields start in it
  std::uint32_t at(std::uint32_t t) const {
    return base + layout::BitField(fields, std::uint64_t{t} * width, width);
  }
  std::uint64_t field_byte(std::uint32_t t) const {  // in the region
    return fields_rel + std::uint64_t{t} * width / 8;
  }
};

// Bits [from_bit, 8 * to_byte) of blk must be zero (so that every changed byte of a stream is
// noticed). `at` is blk's offset in the stream (for messages).
Status CheckZeroBits(const std::uint8_t* blk, std::uint64_t at, std::uint64_t from_bit,
                     std::uint64_t to_byte, std::uint32_t b, std::string_view name) {
  const std::uint64_t byte = from_bit / 8;
  if (from_bit % 8 != 0 && byte < to_byte && (blk[byte] >> (from_bit % 8)) != 0) {
    return Bad(name, at + byte, "block " + std::to_string(b) + " padding bits are not 0");
  }
  return CheckZero(blk, at, (from_bit + 7) / 8, to_byte, b, name);
}

// The lengths region at blk + rel (format 2: u16 each; format 3: a head word and the fields,
// which must be canonical: the smallest field 0, the largest using all `width` bits).
Status ReadLengths(const StreamInfo& info, const std::uint8_t* blk, std::uint64_t size,
                   std::uint64_t at, std::uint64_t rel, std::uint32_t b, Lengths* out,
                   std::string_view name) {
  const std::uint32_t T = info.sub_streams;
  const std::string block = "block " + std::to_string(b);
  if (info.version <= layout::kU16LengthsVersion) {
    *out = Lengths{blk + rel, 0, 16, layout::U16LengthsBytes(T), 0};
    return CheckZero(blk, at, rel + 2 * std::uint64_t{T}, rel + out->region, b, name);
  }
  const auto head = layout::Load<std::uint32_t>(blk + rel);
  const std::uint32_t width = head >> 16;
  if (width > layout::kMaxLengthWidth) {
    return Bad(
        name, at + rel,
        block + " sub-stream length fields of " + std::to_string(width) + " bits (at most 16)");
  }
  *out = Lengths{blk + rel + layout::kLengthsHeadBytes, head & 0xFFFF, width,
                 layout::PackedLengthsBytes(T, width), layout::kLengthsHeadBytes};
  if (rel + out->region > size) {
    return Bad(name, at + rel, block + ": its sub-stream lengths pass the block's end");
  }
  std::uint32_t low = ~0u, high = 0;
  for (std::uint32_t t = 0; t < T; ++t) {
    const std::uint32_t f = out->at(t) - out->base;
    low = std::min(low, f);
    high = std::max(high, f);
  }
  if (low != 0 || layout::BitWidth(high) != width) {
    return Bad(name, at + rel, block + ": sub-stream length fields are not in canonical form");
  }
  return CheckZeroBits(out->fields, at + rel + layout::kLengthsHeadBytes, std::uint64_t{T} * width,
                       out->region - layout::kLengthsHeadBytes, b, name);
}

// Block b's bytes are blk[0, size); `at` is their offset in the stream (for messages, which
// name stream offsets).
Status DecodeHuffmanBlock(const StreamInfo& info, const DecodeLut& lut, const std::uint8_t* blk,
                          std::uint64_t size, std::uint64_t at, std::uint32_t b, std::uint8_t* out,
                          std::string_view name) {
  const std::uint64_t n = info.block_value_count(b);
  const std::uint32_t T = info.sub_streams;
  const std::uint64_t lengths_rel = layout::RawRegionBytes(n, info.split().raw_bits());
  HOIST_RETURN_IF_ERROR(CheckZeroBits(blk, at, n * info.split().raw_bits(), lengths_rel, b, name));
  Lengths lengths;
  HOIST_RETURN_IF_ERROR(ReadLengths(info, blk, size, at, lengths_rel, b, &lengths, name));
  const std::uint64_t words_rel = lengths_rel + lengths.region;
  const std::uint64_t word_count = (size - words_rel) / 4;
  const std::uint64_t lengths_at = at + lengths_rel, words_at = at + words_rel;
  BitStream bits(blk + words_rel, word_count);
  for (std::uint32_t t = 0; t < T; ++t) {
    const std::uint64_t stop = bits.pos() + lengths.at(t);
    auto where = [&] { return "block " + std::to_string(b) + " sub-stream " + std::to_string(t); };
    if (stop > 32 * word_count) {
      return Bad(
          name, lengths_at + lengths.field_byte(t),
          where() + " ends past the block's " + std::to_string(32 * word_count) + " coded bits");
    }
    if (!DecodeSubStreamOf(info.dtype, lut, bits, stop, t, T, n, blk, out)) {
      return Bad(name, words_at + bits.pos() / 8,
                 where() + ": no code, or a code past the sub-stream's end, at bit " +
                     std::to_string(bits.pos()));
    }
    if (bits.pos() != stop) {
      return Bad(name, lengths_at + lengths.field_byte(t),
                 where() + " has " + std::to_string(stop - bits.pos()) + " bits left over");
    }
  }
  const std::uint64_t pos = bits.pos();
  if ((pos + 31) / 32 != word_count) {
    return Bad(name, words_at,
               "block " + std::to_string(b) + " has " + std::to_string(word_count) +
                   " coded words for " + std::to_string(pos) + " bits");
  }
  if (pos % 32 != 0 && (bits.Word(word_count - 1) & ((1u << (32 - pos % 32)) - 1)) != 0) {
    return Bad(name, words_at + pos / 8, "block " + std::to_string(b) + " padding bits are not 0");
  }
  return Status::Ok();
}

}  // namespace

Status DecodeBlockBytes(const StreamInfo& info, std::uint32_t b,
                        std::span<const std::uint8_t> bytes, std::span<std::uint8_t> out,
                        std::string_view name) {
  if (info.method == Method::kStored)
    return DecodeBlockBytes(info, DecodeLut{}, b, bytes, out, name);
  return DecodeBlockBytes(info, BuildDecodeLut(info.code_lengths), b, bytes, out, name);
}

Status DecodeBlockBytes(const StreamInfo& info, const DecodeLut& lut, std::uint32_t b,
                        std::span<const std::uint8_t> bytes, std::span<std::uint8_t> out,
                        std::string_view name) {
  if (b >= info.block_count) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " of a stream of " + std::to_string(info.block_count));
  }
  const std::uint64_t n = info.block_value_count(b) * DTypeSize(info.dtype);
  const std::uint64_t size = info.block_offsets[b + 1] - info.block_offsets[b];
  if (out.size() != n || bytes.size() != size) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " is " + std::to_string(size) + " bytes decoding to " +
                                   std::to_string(n) + ", not " + std::to_string(bytes.size()) +
                                   " decoding to " + std::to_string(out.size()));
  }
  const std::uint64_t at = info.header_bytes + info.block_offsets[b];
  if (info.method == Method::kStored) {
    std::memcpy(out.data(), bytes.data(), n);
  } else {
    HOIST_RETURN_IF_ERROR(
        DecodeHuffmanBlock(info, lut, bytes.data(), size, at, b, out.data(), name));
  }
  if (BlockChecksum(info.version, info.sub_streams, DTypeSize(info.dtype), out.data(), n) !=
      info.block_checksums[b]) {
    return Bad(name, at,
               "block " + std::to_string(b) + " checksum mismatch (decoded bytes " +
                   std::to_string(info.block_first_byte(b)) + ".." +
                   std::to_string(info.block_first_byte(b) + n) + " are wrong)");
  }
  return Status::Ok();
}

namespace {

// DecodeBlock with the stream's table given.
Status DecodeBlockOf(const StreamInfo& info, const DecodeLut& lut,
                     std::span<const std::uint8_t> stream, std::uint32_t b,
                     std::span<std::uint8_t> out, std::string_view name) {
  if (b >= info.block_count || stream.size() != info.stream_bytes()) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " of a stream of " + std::to_string(info.block_count) +
                                   " blocks (or the stream is not the parsed one)");
  }
  const std::uint64_t begin = info.header_bytes + info.block_offsets[b];
  const std::uint64_t end = info.header_bytes + info.block_offsets[b + 1];
  return DecodeBlockBytes(info, lut, b, stream.subspan(begin, end - begin), out, name);
}

}  // namespace

Status DecodeBlock(const StreamInfo& info, std::span<const std::uint8_t> stream, std::uint32_t b,
                   std::span<std::uint8_t> out, std::string_view name) {
  return DecodeBlockOf(info, BuildDecodeLut(info.code_lengths), stream, b, out, name);
}

Status Decode(std::span<const std::uint8_t> stream, std::span<std::uint8_t> out,
              std::string_view name, int threads) {
  HOIST_ASSIGN_OR_RETURN(StreamInfo info, ParseStream(stream, name));
  if (out.size() != info.original_bytes) {
    return Status::Corrupt(std::string(name) + ": codec stream decodes to " +
                           std::to_string(info.original_bytes) + " bytes, expected " +
                           std::to_string(out.size()));
  }
  std::vector<Status> errors(info.block_count);
  const DecodeLut lut = BuildDecodeLut(info.code_lengths);
  util::ParallelFor(info.block_count, threads, [&](std::uint64_t b) {
    const auto block = static_cast<std::uint32_t>(b);
    const std::uint64_t first = info.block_first_byte(block);
    const std::uint64_t bytes = info.block_value_count(block) * DTypeSize(info.dtype);
    errors[b] = DecodeBlockOf(info, lut, stream, block, out.subspan(first, bytes), name);
  });
  for (auto& e : errors) HOIST_RETURN_IF_ERROR(e);
  if (Xxh64(out.data(), out.size()) != info.content_checksum) {
    return Bad(name, 32, "tensor checksum mismatch");
  }
  return Status::Ok();
}

}  // namespace hoist::codec
