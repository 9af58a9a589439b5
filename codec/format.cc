// The stream header: dtype helpers and the validating parser (docs/CODEC.md).
#include <algorithm>
#include <bit>
#include <string>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "codec/layout.h"

static_assert(std::endian::native == std::endian::little, "the codec format is little-endian");

namespace hoist::codec {

using layout::Load;

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F32") return DType::kF32;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "F8_E5M2") return DType::kF8E5M2;
  return std::nullopt;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kF32:
      return "F32";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kF8E5M2:
      return "F8_E5M2";
    case DType::kBytes:
      break;
  }
  return "bytes";
}

std::uint32_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF32:
      return 4;
    default:
      return 1;
  }
}

std::uint64_t StreamInfo::block_value_count(std::uint32_t b) const {
  const std::uint64_t first = std::uint64_t{b} * block_values;
  return std::min<std::uint64_t>(block_values, values - first);
}

std::uint64_t StreamInfo::block_first_byte(std::uint32_t b) const {
  return std::uint64_t{b} * block_values * DTypeSize(dtype);
}

std::uint64_t StreamInfo::min_block_head_bytes(std::uint64_t n) const {
  return layout::RawRegionBytes(n, split().raw_bits()) +
         layout::MinLengthsBytes(version, sub_streams);
}

namespace {

Status Bad(std::string_view name, std::uint64_t offset, const std::string& what) {
  return Status::Corrupt(std::string(name) + ": codec stream: byte " + std::to_string(offset) +
                         ": " + what);
}

// Sub-streams and the longest code (bytes [20, 24)): in range for a coded stream, 0 for a stored
// one (ParseFixed read the method and block size first).
Status ParseCoding(const std::uint8_t* p, std::string_view name, StreamInfo& info) {
  const bool coded = info.method == Method::kHuffman;
  info.sub_streams = Load<std::uint16_t>(p + 20);
  info.max_code_len = p[22];
  if (p[23] != 0) return Bad(name, 23, "reserved byte is not zero");
  if (coded) {
    if (info.sub_streams < 1 || info.sub_streams > layout::kMaxSubStreams) {
      return Bad(name, 20, std::to_string(info.sub_streams) + " sub-streams");
    }
    if (info.max_code_len < 1 || info.max_code_len > kLutBits) {
      return Bad(name, 22, "maximum code length " + std::to_string(info.max_code_len));
    }
    const std::uint64_t per_stream = (info.block_values + info.sub_streams - 1) / info.sub_streams;
    if (per_stream * info.max_code_len > 0xFFFF) {
      return Bad(name, 16,
                 "sub-streams of " + std::to_string(per_stream) +
                     " values cannot have 16-bit bit lengths");
    }
  } else if (info.sub_streams != 0 || info.max_code_len != 0) {
    return Bad(name, 20, "stored stream with sub-streams or a code length");
  }
  return Status::Ok();
}

// The fixed fields (bytes [0, 40) and the code lengths).
Status ParseFixed(std::span<const std::uint8_t> s, std::string_view name, StreamInfo& info) {
  if (s.size() < layout::kFixedHeaderBytes) {
    return Bad(name, s.size(),
               "truncated header: " + std::to_string(s.size()) + " bytes, a header has at least " +
                   std::to_string(layout::kFixedHeaderBytes));
  }
  const std::uint8_t* p = s.data();
  if (std::memcmp(p, kMagic, 4) != 0) return Bad(name, 0, "bad magic (not a hoist codec stream)");
  const auto version = Load<std::uint16_t>(p + 4);
  if (version < kOldestReadVersion || version > kFormatVersion) {
    return Status::Unsupported(std::string(name) + ": codec stream: byte 4: format version " +
                               std::to_string(version) + ", this build reads versions " +
                               std::to_string(kOldestReadVersion) + " to " +
                               std::to_string(kFormatVersion));
  }
  info.version = version;
  if (p[6] > static_cast<std::uint8_t>(DType::kF8E5M2)) {
    return Bad(name, 6, "unknown dtype code " + std::to_string(p[6]));
  }
  info.dtype = static_cast<DType>(p[6]);
  if (p[7] > 1) return Bad(name, 7, "unknown method " + std::to_string(p[7]));
  info.method = static_cast<Method>(p[7]);
  const bool coded = info.method == Method::kHuffman;
  // Format 2 coded BF16 and F16 only; format 3 every dtype with a split (codec/split.h).
  const bool codable = info.split().symbol_bits > 0 &&
                       (version > layout::kU16LengthsVersion || DTypeSize(info.dtype) == 2);
  if (coded && !codable) {
    return Bad(name, 7,
               "Huffman method on a " + std::string(DTypeName(info.dtype)) + " stream of format " +
                   std::to_string(version));
  }
  info.original_bytes = Load<std::uint64_t>(p + 8);
  if (info.original_bytes > layout::kMaxOriginalBytes) {
    return Bad(name, 8, "original size " + std::to_string(info.original_bytes) + " too large");
  }
  if (info.original_bytes % DTypeSize(info.dtype) != 0) {
    return Bad(name, 8,
               "original size " + std::to_string(info.original_bytes) +
                   " is not a whole number of " + std::string(DTypeName(info.dtype)) + " values");
  }
  info.values = info.original_bytes / DTypeSize(info.dtype);
  info.block_values = Load<std::uint32_t>(p + 16);
  if (info.block_values < 1 || info.block_values > layout::kMaxBlockValues) {
    return Bad(name, 16, "block size " + std::to_string(info.block_values) + " values");
  }
  HOIST_RETURN_IF_ERROR(ParseCoding(p, name, info));
  const std::uint64_t blocks = (info.values + info.block_values - 1) / info.block_values;
  if (Load<std::uint32_t>(p + 24) != blocks) {
    return Bad(name, 24,
               std::to_string(Load<std::uint32_t>(p + 24)) + " blocks, " +
                   std::to_string(info.values) + " values in blocks of " +
                   std::to_string(info.block_values) + " make " + std::to_string(blocks));
  }
  info.block_count = static_cast<std::uint32_t>(blocks);
  info.header_bytes = Load<std::uint32_t>(p + 28);
  if (info.header_bytes != layout::HeaderBytes(blocks)) {
    return Bad(name, 28,
               "header size " + std::to_string(info.header_bytes) + ", expected " +
                   std::to_string(layout::HeaderBytes(blocks)));
  }
  info.content_checksum = Load<std::uint64_t>(p + 32);
  std::memcpy(info.code_lengths.data(), p + layout::kCodeLengthsAt, 256);
  return Status::Ok();
}

// Which tensor and stream the stream says it is (bytes [40, 64); ParseFixed ran first).
Status ParseIdentity(std::span<const std::uint8_t> s, std::string_view name, StreamInfo& info) {
  const std::uint8_t* p = s.data() + layout::kIdentityAt;
  info.id.tensor = Load<std::uint64_t>(p);
  info.id.index = Load<std::uint32_t>(p + 8);
  info.id.count = Load<std::uint32_t>(p + 12);
  info.id.first_column = Load<std::uint64_t>(p + 16);
  if (info.id.count == 0 || info.id.index >= info.id.count) {
    return Bad(name, layout::kIdentityAt + 8,
               "stream " + std::to_string(info.id.index) + " of " + std::to_string(info.id.count) +
                   " streams");
  }
  return Status::Ok();
}

Status ParseCodeLengths(std::string_view name, StreamInfo& info) {
  if (info.method == Method::kStored) {
    for (int i = 0; i < 256; ++i) {
      if (info.code_lengths[i] != 0) {
        return Bad(name, layout::kCodeLengthsAt + i, "stored stream with a code table");
      }
    }
    return Status::Ok();
  }
  if (!CodeLengthsValid(info.code_lengths, info.max_code_len)) {
    return Bad(name, layout::kCodeLengthsAt,
               "invalid code table (a length over the maximum, or no prefix code)");
  }
  const std::uint32_t symbols = 1u << info.split().symbol_bits;
  for (std::uint32_t i = symbols; i < 256; ++i) {
    if (info.code_lengths[i] != 0) {
      return Bad(name, layout::kCodeLengthsAt + i,
                 "a code for symbol " + std::to_string(i) + ", past the " +
                     std::to_string(info.split().symbol_bits) + "-bit symbols of " +
                     std::string(DTypeName(info.dtype)));
    }
  }
  return Status::Ok();
}

// Block offsets (and each block's size against its value count) and checksums.
Status ParseBlocks(std::span<const std::uint8_t> s, std::uint64_t stream_bytes,
                   std::string_view name, StreamInfo& info) {
  const std::uint64_t n = info.block_count;
  const std::uint8_t* offsets = s.data() + layout::kFixedHeaderBytes;
  const std::uint8_t* sums = offsets + 8 * (n + 1);
  info.block_offsets.resize(n + 1);
  info.block_checksums.resize(n);
  const std::uint64_t payload = stream_bytes - info.header_bytes;
  for (std::uint64_t b = 0; b <= n; ++b) {
    const std::uint64_t off = Load<std::uint64_t>(offsets + 8 * b);
    info.block_offsets[b] = off;
    const std::uint64_t at = layout::kFixedHeaderBytes + 8 * b;
    if (off > payload) {
      return Bad(name, at,
                 "block " + std::to_string(b) + " offset " + std::to_string(off) +
                     " is past the payload's " + std::to_string(payload) + " bytes");
    }
    if (b > 0 && off < info.block_offsets[b - 1]) {
      return Bad(name, at, "block offsets decrease at block " + std::to_string(b));
    }
  }
  for (std::uint64_t b = 0; b <= n; ++b) {
    const std::uint64_t at = layout::kFixedHeaderBytes + 8 * b;
    const std::uint64_t off = info.block_offsets[b];
    if (b == 0 && off != 0) return Bad(name, at, "first block offset is not 0");
    if (b == n) {
      if (off != payload) {
        return Bad(name, at,
                   "payload is " + std::to_string(off) + " bytes but the stream holds " +
                       std::to_string(payload));
      }
      break;
    }
    const std::uint64_t next = info.block_offsets[b + 1];
    const std::uint64_t values = info.block_value_count(static_cast<std::uint32_t>(b));
    const std::uint64_t size = next - off;
    if (info.method == Method::kStored) {
      if (size != values * DTypeSize(info.dtype)) {
        return Bad(name, at,
                   "stored block " + std::to_string(b) + " has " + std::to_string(size) +
                       " bytes for " + std::to_string(values) + " values");
      }
    } else {
      const std::uint64_t head = info.min_block_head_bytes(values);
      if (size < head || (size - head) % 4 != 0 || off % 4 != 0) {
        return Bad(name, at,
                   "coded block " + std::to_string(b) + " has " + std::to_string(size) +
                       " bytes, not " + std::to_string(head) + " + whole words");
      }
      info.max_block_bit_words = std::max(info.max_block_bit_words, (size - head) / 4);
    }
    info.block_checksums[b] = Load<std::uint32_t>(sums + 4 * b);
  }
  return Status::Ok();
}

// The header of a stream of `stream_bytes` bytes (the header alone, or more).
Result<StreamInfo> ParseHeaderOf(std::span<const std::uint8_t> s, std::uint64_t stream_bytes,
                                 std::string_view name) {
  StreamInfo info;
  HOIST_RETURN_IF_ERROR(ParseFixed(s, name, info));
  HOIST_RETURN_IF_ERROR(ParseIdentity(s, name, info));
  if (s.size() < info.header_bytes || stream_bytes < info.header_bytes) {
    return Bad(name, std::min<std::uint64_t>(s.size(), stream_bytes),
               "truncated: the header alone is " + std::to_string(info.header_bytes) +
                   " bytes, the stream " +
                   std::to_string(std::min<std::uint64_t>(s.size(), stream_bytes)));
  }
  const std::uint64_t sum_at = info.header_bytes - 8;
  const std::uint64_t stored_sum = Load<std::uint64_t>(s.data() + sum_at);
  if (Xxh64(s.data(), sum_at) != stored_sum) {
    return Bad(name, sum_at, "header checksum mismatch (the header or its tables are damaged)");
  }
  info.header_checksum = stored_sum;
  HOIST_RETURN_IF_ERROR(ParseCodeLengths(name, info));
  HOIST_RETURN_IF_ERROR(ParseBlocks(s, stream_bytes, name, info));
  return info;
}

}  // namespace

Result<StreamInfo> ParseStream(std::span<const std::uint8_t> s, std::string_view name) {
  return ParseHeaderOf(s, s.size(), name);
}

Result<StreamInfo> ParseHeader(std::span<const std::uint8_t> header, std::uint64_t stream_bytes,
                               std::string_view name) {
  return ParseHeaderOf(header, stream_bytes, name);
}

}  // namespace hoist::codec
