// The CPU reference decoder (docs/CODEC.md): one block at a time, every sub-stream checked.
#include <cstring>
#include <string>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "codec/layout.h"

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

template <bool kBf16>
inline void PutValue(std::uint8_t* out, std::uint32_t sym, std::uint32_t raw) {
  const std::uint16_t v =
      kBf16 ? static_cast<std::uint16_t>((raw & 0x80) << 8 | sym << 7 | (raw & 0x7F))
            : static_cast<std::uint16_t>(sym << 8 | raw);
  layout::Store<std::uint16_t>(out, v);
}

// Decodes sub-stream values k = t, t + T, ... < n from `bits` up to bit `stop`; false when a
// bit pattern has no code or a code crosses `stop`.
template <bool kBf16>
bool DecodeSubStream(const DecodeLut& lut, BitStream& bits, std::uint64_t stop, std::uint64_t t,
                     std::uint64_t T, std::uint64_t n, const std::uint8_t* raw, std::uint8_t* out) {
  for (std::uint64_t k = t; k < n; k += T) {
    const std::uint16_t e = lut[bits.Peek12()];
    const int len = e >> 8;
    if (len == 0 || bits.pos() + static_cast<std::uint64_t>(len) > stop) return false;
    bits.Skip(len);
    PutValue<kBf16>(out + 2 * k, e & 0xFF, raw[k]);
  }
  return true;
}

// Block b's bytes are blk[0, size); `at` is their offset in the stream (for messages, which
// name stream offsets).
Status DecodeHuffmanBlock(const StreamInfo& info, const std::uint8_t* blk, std::uint64_t size,
                          std::uint64_t at, std::uint32_t b, std::uint8_t* out,
                          std::string_view name) {
  const std::uint64_t n = info.block_value_count(b);
  const std::uint32_t T = info.sub_streams;
  const std::uint64_t lengths_rel = layout::RawRegionBytes(n);
  const std::uint64_t words_rel = lengths_rel + layout::LengthsRegionBytes(T);
  const std::uint64_t word_count = (size - words_rel) / 4;
  const std::uint64_t lengths_at = at + lengths_rel, words_at = at + words_rel;
  BitStream bits(blk + words_rel, word_count);
  const std::uint8_t* raw = blk;
  HOIST_RETURN_IF_ERROR(CheckZero(blk, at, n, lengths_rel, b, name));
  HOIST_RETURN_IF_ERROR(CheckZero(blk, at, lengths_rel + 2 * T, words_rel, b, name));
  const bool bf16 = info.dtype == DType::kBF16;
  for (std::uint32_t t = 0; t < T; ++t) {
    const std::uint64_t stop = bits.pos() + Load<std::uint16_t>(blk + lengths_rel + 2 * t);
    auto where = [&] { return "block " + std::to_string(b) + " sub-stream " + std::to_string(t); };
    if (stop > 32 * word_count) {
      return Bad(
          name, lengths_at + 2 * t,
          where() + " ends past the block's " + std::to_string(32 * word_count) + " coded bits");
    }
    const bool ok = bf16 ? DecodeSubStream<true>(info.lut, bits, stop, t, T, n, raw, out)
                         : DecodeSubStream<false>(info.lut, bits, stop, t, T, n, raw, out);
    if (!ok) {
      return Bad(name, words_at + bits.pos() / 8,
                 where() + ": no code, or a code past the sub-stream's end, at bit " +
                     std::to_string(bits.pos()));
    }
    if (bits.pos() != stop) {
      return Bad(name, lengths_at + 2 * t,
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
    HOIST_RETURN_IF_ERROR(DecodeHuffmanBlock(info, bytes.data(), size, at, b, out.data(), name));
  }
  if (static_cast<std::uint32_t>(Xxh64(out.data(), n)) != info.block_checksums[b]) {
    return Bad(name, at,
               "block " + std::to_string(b) + " checksum mismatch (decoded bytes " +
                   std::to_string(info.block_first_byte(b)) + ".." +
                   std::to_string(info.block_first_byte(b) + n) + " are wrong)");
  }
  return Status::Ok();
}

Status DecodeBlock(const StreamInfo& info, std::span<const std::uint8_t> stream, std::uint32_t b,
                   std::span<std::uint8_t> out, std::string_view name) {
  if (b >= info.block_count || stream.size() != info.stream_bytes()) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " of a stream of " + std::to_string(info.block_count) +
                                   " blocks (or the stream is not the parsed one)");
  }
  const std::uint64_t begin = info.header_bytes + info.block_offsets[b];
  const std::uint64_t end = info.header_bytes + info.block_offsets[b + 1];
  return DecodeBlockBytes(info, b, stream.subspan(begin, end - begin), out, name);
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
  layout::ParallelFor(info.block_count, threads, [&](std::uint64_t b) {
    const auto block = static_cast<std::uint32_t>(b);
    const std::uint64_t first = info.block_first_byte(block);
    const std::uint64_t bytes = info.block_value_count(block) * DTypeSize(info.dtype);
    errors[b] = DecodeBlock(info, stream, block, out.subspan(first, bytes), name);
  });
  for (auto& e : errors) HOIST_RETURN_IF_ERROR(e);
  if (Xxh64(out.data(), out.size()) != info.content_checksum) {
    return Bad(name, 32, "tensor checksum mismatch");
  }
  return Status::Ok();
}

}  // namespace hoist::codec
