// The CPU reference decoder (docs/CODEC.md): one block at a time, every sub-stream checked.
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

class BitReader {  // the coded words of one block; reads past the end see zeros
 public:
  BitReader(const std::uint8_t* words, std::uint64_t count) : words_(words), count_(count) {}
  std::uint32_t Peek12(std::uint64_t pos) const {
    const std::uint64_t i = pos >> 5;
    const std::uint64_t pair = std::uint64_t{Word(i)} << 32 | Word(i + 1);
    return static_cast<std::uint32_t>((pair << (pos & 31)) >> (64 - kLutBits));
  }

 private:
  std::uint32_t Word(std::uint64_t i) const {
    return i < count_ ? Load<std::uint32_t>(words_ + 4 * i) : 0;
  }
  const std::uint8_t* words_;
  std::uint64_t count_;
};

// Padding bytes [from, to) must be zero (so that every changed byte of a stream is noticed).
Status CheckZero(const std::uint8_t* stream, std::uint64_t from, std::uint64_t to, std::uint32_t b,
                 std::string_view name) {
  for (std::uint64_t i = from; i < to; ++i) {
    if (stream[i] != 0) return Bad(name, i, "block " + std::to_string(b) + " padding is not 0");
  }
  return Status::Ok();
}

inline void PutValue(DType dtype, std::uint8_t* out, std::uint8_t sym, std::uint8_t raw) {
  const std::uint16_t v =
      dtype == DType::kBF16
          ? static_cast<std::uint16_t>((raw & 0x80) << 8 | sym << 7 | (raw & 0x7F))
          : static_cast<std::uint16_t>(sym << 8 | raw);
  layout::Store<std::uint16_t>(out, v);
}

Status DecodeHuffmanBlock(const StreamInfo& info, const std::uint8_t* stream, std::uint32_t b,
                          std::uint8_t* out, std::string_view name) {
  const std::uint64_t begin = info.header_bytes + info.block_offsets[b];
  const std::uint64_t end = info.header_bytes + info.block_offsets[b + 1];
  const std::uint64_t n = info.block_value_count(b);
  const std::uint32_t T = info.sub_streams;
  const std::uint64_t lengths_at = begin + layout::RawRegionBytes(n);
  const std::uint64_t words_at = lengths_at + layout::LengthsRegionBytes(T);
  const std::uint64_t word_count = (end - words_at) / 4;
  const BitReader reader(stream + words_at, word_count);
  const std::uint8_t* raw = stream + begin;
  HOIST_RETURN_IF_ERROR(CheckZero(stream, begin + n, lengths_at, b, name));
  HOIST_RETURN_IF_ERROR(CheckZero(stream, lengths_at + 2 * T, words_at, b, name));
  std::uint64_t pos = 0;
  for (std::uint32_t t = 0; t < T; ++t) {
    const std::uint64_t stop = pos + Load<std::uint16_t>(stream + lengths_at + 2 * t);
    if (stop > 32 * word_count) {
      return Bad(name, lengths_at + 2 * t,
                 "block " + std::to_string(b) + " sub-stream " + std::to_string(t) +
                     " ends past the block's " + std::to_string(32 * word_count) + " coded bits");
    }
    for (std::uint64_t k = t; k < n; k += T) {
      const std::uint16_t e = info.lut[reader.Peek12(pos)];
      const int len = e >> 8;
      if (len == 0 || pos + len > stop) {
        return Bad(
            name, words_at + pos / 8,
            "block " + std::to_string(b) + " sub-stream " + std::to_string(t) +
                (len == 0 ? ": no code matches the bits at bit " : ": code overruns at bit ") +
                std::to_string(pos));
      }
      pos += len;
      PutValue(info.dtype, out + 2 * k, static_cast<std::uint8_t>(e), raw[k]);
    }
    if (pos != stop) {
      return Bad(name, lengths_at + 2 * t,
                 "block " + std::to_string(b) + " sub-stream " + std::to_string(t) + " has " +
                     std::to_string(stop - pos) + " bits left over");
    }
  }
  if ((pos + 31) / 32 != word_count) {
    return Bad(name, words_at,
               "block " + std::to_string(b) + " has " + std::to_string(word_count) +
                   " coded words for " + std::to_string(pos) + " bits");
  }
  if (pos % 32 != 0 &&
      (reader.Peek12(pos) != 0 || reader.Peek12(pos + 12) != 0 || reader.Peek12(pos + 24) != 0)) {
    return Bad(name, words_at + pos / 8, "block " + std::to_string(b) + " padding bits are not 0");
  }
  return Status::Ok();
}

}  // namespace

Status DecodeBlock(const StreamInfo& info, std::span<const std::uint8_t> stream, std::uint32_t b,
                   std::span<std::uint8_t> out, std::string_view name) {
  if (b >= info.block_count) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " of a stream of " + std::to_string(info.block_count));
  }
  const std::uint64_t bytes = info.block_value_count(b) * DTypeSize(info.dtype);
  if (out.size() != bytes || stream.size() != info.stream_bytes()) {
    return Status::InvalidArgument(std::string(name) + ": codec: block " + std::to_string(b) +
                                   " decodes to " + std::to_string(bytes) + " bytes, not " +
                                   std::to_string(out.size()) +
                                   " (or the stream is not the "
                                   "parsed one)");
  }
  const std::uint64_t begin = info.header_bytes + info.block_offsets[b];
  if (info.method == Method::kStored) {
    std::memcpy(out.data(), stream.data() + begin, bytes);
  } else {
    HOIST_RETURN_IF_ERROR(DecodeHuffmanBlock(info, stream.data(), b, out.data(), name));
  }
  if (static_cast<std::uint32_t>(Xxh64(out.data(), bytes)) != info.block_checksums[b]) {
    return Bad(name, begin,
               "block " + std::to_string(b) + " checksum mismatch (decoded bytes " +
                   std::to_string(info.block_first_byte(b)) + ".." +
                   std::to_string(info.block_first_byte(b) + bytes) + " are wrong)");
  }
  return Status::Ok();
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
