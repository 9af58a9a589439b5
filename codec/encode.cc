// The encoder: histogram, code table, then every block on its own (docs/CODEC.md).
#include <algorithm>
#include <cmath>
#include <string>

#include "codec/checksum.h"
#include "codec/codec.h"
#include "codec/layout.h"
#include "util/parallel.h"

namespace hoist::codec {
namespace {

using layout::Store;

class BitWriter {  // most significant bit first, into little-endian 32-bit words at `out`
 public:
  explicit BitWriter(std::uint8_t* out) : out_(out) {}
  void Put(std::uint32_t code, int len) {
    acc_ = acc_ << len | code;
    bits_ += len;
    if (bits_ >= 32) {
      bits_ -= 32;
      Emit(static_cast<std::uint32_t>(acc_ >> bits_));
      acc_ &= (std::uint64_t{1} << bits_) - 1;
    }
  }
  void Flush() {
    if (bits_ > 0) Emit(static_cast<std::uint32_t>(acc_ << (32 - bits_)));
    acc_ = 0;
    bits_ = 0;
  }

 private:
  void Emit(std::uint32_t word) {
    Store<std::uint32_t>(out_, word);
    out_ += 4;
  }
  std::uint8_t* out_;
  std::uint64_t acc_ = 0;
  int bits_ = 0;
};

struct Plan {
  DType dtype;
  Split split;
  const std::uint8_t* data;
  std::uint64_t values;
  std::uint32_t block_values;
  std::uint32_t sub_streams;
  CodeLengths lengths;
  std::array<std::uint16_t, 256> codes;
};

std::uint32_t ValueAt(Split split, const std::uint8_t* data, std::uint64_t i) {
  return split.value_bytes == 2 ? layout::Load<std::uint16_t>(data + 2 * i) : data[i];
}

// The coded bits of each sub-stream of the block of `n` values from value `first`.
std::vector<std::uint32_t> SubStreamBits(const Plan& p, std::uint64_t first, std::uint64_t n) {
  std::vector<std::uint32_t> bits(p.sub_streams, 0);
  std::uint32_t t = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    bits[t] += p.lengths[SymbolOf(p.split, ValueAt(p.split, p.data, first + k))];
    if (++t == p.sub_streams) t = 0;
  }
  return bits;
}

// Format 3's sub-stream lengths: base (the shortest) and the width of the fields above it.
struct LengthFields {
  std::uint32_t base = 0, width = 0;
  std::uint64_t total = 0;  // coded bits of the block
};
LengthFields FieldsOf(const std::vector<std::uint32_t>& bits) {
  LengthFields f;
  f.base = *std::min_element(bits.begin(), bits.end());
  const std::uint32_t top = *std::max_element(bits.begin(), bits.end());
  f.width = layout::BitWidth(top - f.base);
  for (std::uint32_t b : bits) f.total += b;
  return f;
}

// The encoded size of a Huffman block of `n` values from value `first`.
std::uint64_t HuffmanBlockBytes(const Plan& p, std::uint64_t first, std::uint64_t n) {
  const LengthFields f = FieldsOf(SubStreamBits(p, first, n));
  return layout::RawRegionBytes(n, p.split.raw_bits()) +
         layout::PackedLengthsBytes(p.sub_streams, f.width) + (f.total + 31) / 32 * 4;
}

// The raw bits of values [first, first + n), packed least significant bit first into `out`.
void PackRaw(const Plan& p, std::uint64_t first, std::uint64_t n, std::uint8_t* out) {
  const std::uint32_t width = p.split.raw_bits();
  std::uint64_t acc = 0;
  std::uint32_t have = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    acc |= std::uint64_t{RawOf(p.split, ValueAt(p.split, p.data, first + k))} << have;
    for (have += width; have >= 8; have -= 8, acc >>= 8) *out++ = static_cast<std::uint8_t>(acc);
  }
  if (have > 0) *out = static_cast<std::uint8_t>(acc);
}

// Writes a Huffman block into `out` (HuffmanBlockBytes bytes, zeroed).
void EncodeHuffmanBlock(const Plan& p, std::uint64_t first, std::uint64_t n, std::uint8_t* out) {
  const std::uint32_t T = p.sub_streams;
  PackRaw(p, first, n, out);
  const std::vector<std::uint32_t> bits = SubStreamBits(p, first, n);
  const LengthFields f = FieldsOf(bits);
  std::uint8_t* lengths = out + layout::RawRegionBytes(n, p.split.raw_bits());
  Store<std::uint32_t>(lengths, f.base | f.width << 16);
  for (std::uint32_t t = 0; t < T; ++t) {
    layout::PutBitField(lengths + layout::kLengthsHeadBytes, std::uint64_t{t} * f.width, f.width,
                        bits[t] - f.base);
  }
  BitWriter writer(lengths + layout::PackedLengthsBytes(T, f.width));
  for (std::uint32_t t = 0; t < T; ++t) {
    for (std::uint64_t k = t; k < n; k += T) {
      const std::uint32_t sym = SymbolOf(p.split, ValueAt(p.split, p.data, first + k));
      writer.Put(p.codes[sym], p.lengths[sym]);
    }
  }
  writer.Flush();
}

SymbolCounts Histogram(Split split, const std::uint8_t* data, std::uint64_t values, int threads) {
  const std::uint64_t chunk = 1 << 20;
  const std::uint64_t chunks = (values + chunk - 1) / chunk;
  std::vector<SymbolCounts> partial(chunks, SymbolCounts{});
  util::ParallelFor(chunks, threads, [&](std::uint64_t c) {
    const std::uint64_t end = std::min(values, (c + 1) * chunk);
    for (std::uint64_t i = c * chunk; i < end; ++i)
      ++partial[c][SymbolOf(split, ValueAt(split, data, i))];
  });
  SymbolCounts counts{};
  for (const auto& h : partial) {
    for (int s = 0; s < 256; ++s) counts[s] += h[s];
  }
  return counts;
}

Status CheckOptions(DType dtype, std::uint64_t bytes, const EncodeOptions& o) {
  if (o.block_values < 1 || o.block_values > layout::kMaxBlockValues) {
    return Status::InvalidArgument("codec: block size " + std::to_string(o.block_values) +
                                   " values is outside 1 .. " +
                                   std::to_string(layout::kMaxBlockValues));
  }
  if (o.sub_streams < 1 || o.sub_streams > layout::kMaxSubStreams) {
    return Status::InvalidArgument("codec: " + std::to_string(o.sub_streams) +
                                   " sub-streams is outside 1 .. 1024");
  }
  if (o.max_code_len < 8 || o.max_code_len > kLutBits) {
    return Status::InvalidArgument("codec: maximum code length " + std::to_string(o.max_code_len) +
                                   " is outside 8 .. 12");
  }
  const std::uint64_t per_stream = (o.block_values + o.sub_streams - 1) / o.sub_streams;
  if (per_stream * o.max_code_len > 0xFFFF) {
    return Status::InvalidArgument("codec: " + std::to_string(per_stream) +
                                   " values per sub-stream is too many (at most " +
                                   std::to_string(0xFFFF / o.max_code_len) + ")");
  }
  if (bytes % DTypeSize(dtype) != 0 || bytes > layout::kMaxOriginalBytes) {
    return Status::InvalidArgument("codec: " + std::to_string(bytes) + " bytes is not a whole " +
                                   "number of " + std::string(DTypeName(dtype)) +
                                   " values (or over 2^48 bytes)");
  }
  return Status::Ok();
}

// The header, for blocks of the given sizes (the checksums are filled in later).
void WriteHeader(DType dtype, Method method, const EncodeOptions& o, std::uint64_t original,
                 std::uint64_t checksum, const CodeLengths& lengths,
                 const std::vector<std::uint64_t>& offsets, std::uint8_t* p) {
  const std::uint64_t n = offsets.size() - 1;
  std::memcpy(p, kMagic, 4);
  Store<std::uint16_t>(p + 4, kFormatVersion);
  p[6] = static_cast<std::uint8_t>(dtype);
  p[7] = static_cast<std::uint8_t>(method);
  Store<std::uint64_t>(p + 8, original);
  Store<std::uint32_t>(p + 16, o.block_values);
  const bool coded = method == Method::kHuffman;
  Store<std::uint16_t>(p + 20, static_cast<std::uint16_t>(coded ? o.sub_streams : 0));
  p[22] = static_cast<std::uint8_t>(coded ? o.max_code_len : 0);
  Store<std::uint32_t>(p + 24, static_cast<std::uint32_t>(n));
  Store<std::uint32_t>(p + 28, static_cast<std::uint32_t>(layout::HeaderBytes(n)));
  Store<std::uint64_t>(p + 32, checksum);
  Store<std::uint64_t>(p + layout::kIdentityAt, o.id.tensor);
  Store<std::uint32_t>(p + layout::kIdentityAt + 8, o.id.index);
  Store<std::uint32_t>(p + layout::kIdentityAt + 12, o.id.count);
  Store<std::uint64_t>(p + layout::kIdentityAt + 16, o.id.first_column);
  if (coded) std::memcpy(p + layout::kCodeLengthsAt, lengths.data(), 256);
  for (std::uint64_t b = 0; b <= n; ++b) {
    Store<std::uint64_t>(p + layout::kFixedHeaderBytes + 8 * b, offsets[b]);
  }
}

}  // namespace

double SplitEntropyBytes(DType dtype, std::span<const std::uint8_t> data, int threads) {
  const Split split = SplitOf(dtype);
  const std::uint64_t values = data.size() / DTypeSize(dtype);
  if (split.symbol_bits == 0 || values == 0) return static_cast<double>(data.size());
  const SymbolCounts counts = Histogram(split, data.data(), values, threads);
  const double n = static_cast<double>(values);
  double bits = n * split.raw_bits();
  for (std::uint64_t c : counts) {
    if (c > 0) bits -= static_cast<double>(c) * std::log2(static_cast<double>(c) / n);
  }
  return bits / 8;
}

Result<std::vector<std::uint8_t>> Encode(DType dtype, std::span<const std::uint8_t> data,
                                         const EncodeOptions& o) {
  HOIST_RETURN_IF_ERROR(CheckOptions(dtype, data.size(), o));
  const std::uint32_t elem = DTypeSize(dtype);
  const std::uint64_t values = data.size() / elem;
  const std::uint64_t n = (values + o.block_values - 1) / o.block_values;
  if (n > 0xFFFFFFFFull) return Status::InvalidArgument("codec: more than 2^32 blocks");
  const Split split = SplitOf(dtype);
  Plan plan{dtype, split, data.data(), values, o.block_values, o.sub_streams, {}, {}};
  Method method = Method::kStored;
  if (o.allow_huffman && split.symbol_bits > 0 && values > 0) {
    const SymbolCounts counts = Histogram(split, data.data(), values, o.threads);
    plan.lengths = LimitedCodeLengths(counts, o.max_code_len);
    std::uint64_t bits = values * split.raw_bits();
    for (int s = 0; s < 256; ++s) bits += counts[s] * plan.lengths[s];
    if (bits / 8 < data.size()) method = Method::kHuffman;  // else coding cannot win
    plan.codes = CanonicalCodes(plan.lengths);
  }
  // Block sizes, then one buffer: header, then each block written in place by its thread.
  std::vector<std::uint64_t> offsets(n + 1, 0);
  util::ParallelFor(n, o.threads, [&](std::uint64_t b) {
    const std::uint64_t first = b * o.block_values;
    const std::uint64_t count = std::min<std::uint64_t>(o.block_values, values - first);
    offsets[b + 1] =
        method == Method::kHuffman ? HuffmanBlockBytes(plan, first, count) : count * elem;
  });
  for (std::uint64_t b = 0; b < n; ++b) offsets[b + 1] += offsets[b];
  if (method == Method::kHuffman && offsets[n] >= data.size()) {  // overheads ate the gain
    EncodeOptions stored = o;
    stored.allow_huffman = false;
    return Encode(dtype, data, stored);
  }
  const std::uint64_t header = layout::HeaderBytes(n);
  std::vector<std::uint8_t> out(header + offsets[n], 0);
  WriteHeader(dtype, method, o, data.size(), Xxh64(data.data(), data.size()), plan.lengths, offsets,
              out.data());
  std::uint8_t* const sums = out.data() + layout::kFixedHeaderBytes + 8 * (n + 1);
  util::ParallelFor(n, o.threads, [&](std::uint64_t b) {
    const std::uint64_t first = b * o.block_values;
    const std::uint64_t count = std::min<std::uint64_t>(o.block_values, values - first);
    const std::uint8_t* src = data.data() + first * elem;
    Store<std::uint32_t>(
        sums + 4 * b, BlockChecksum(kFormatVersion, method == Method::kHuffman ? o.sub_streams : 0,
                                    elem, src, count * elem));
    std::uint8_t* dst = out.data() + header + offsets[b];
    if (method == Method::kHuffman) {
      EncodeHuffmanBlock(plan, first, count, dst);
    } else {
      std::memcpy(dst, src, count * elem);
    }
  });
  Store<std::uint64_t>(out.data() + header - 8, Xxh64(out.data(), header - 8));
  return out;
}

}  // namespace hoist::codec
