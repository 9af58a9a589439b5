// The lossless weight codec: one self-describing stream per tensor (format: docs/CODEC.md).
//
// Each value splits into a coded symbol and raw bits by its dtype's row of codec/split.h: BF16
// codes its exponent (sign and mantissa raw), F16 its high byte (the low byte raw), F8 E4M3 and
// E5M2 their exponent and mantissa (the sign raw). Symbols take a canonical Huffman code of at
// most 12 bits with a per-tensor table (every symbol the tensor uses has a code, so nothing is
// escaped); raw bits are stored as they are, packed. Values are cut into independent blocks
// (64 Ki values by default), each decodable alone, and each block's coded bits are split into
// sub-streams (256 by default: sub-stream t holds values t, t+256, t+512, ...) with their bit
// lengths stored, so 256 GPU threads decode one block side by side. F32 and anything else are
// stored (raw bytes, still blocked and checksummed), and so is data that coding does not shrink.
// Encode writes format 4; the parser and decoders read formats 2 (BF16/F16 only, u16 sub-stream
// lengths), 3 (XXH64 block checksums) and 4 (lane block checksums, codec/lane_sum.h, which the
// GPU decoder recomputes as it decodes).
//
// Failure: Encode returns InvalidArgument for bad options or a byte count that is not a whole
// number of values. Parsing and decoding never trust the stream: every field, offset, code
// table and sub-stream is checked, and a bad one gives Corrupt (Unsupported for a newer format
// version) naming the caller's `name` (file and tensor) and the byte offset in the stream;
// nothing crashes or reads outside the given span. Decoded blocks are checked against their
// stored XXH64 checksums, and a whole decode against the tensor's.
// Ownership: Encode returns a new buffer; the others read caller memory only.
// Threading: pure functions; `threads` > 1 runs blocks on that many short-lived threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "codec/huffman.h"
#include "codec/split.h"
#include "hoist/status.h"

namespace hoist::codec {

inline constexpr std::uint16_t kFormatVersion = 4;      // what Encode writes
inline constexpr std::uint16_t kOldestReadVersion = 2;  // the oldest the parser reads
inline constexpr char kMagic[4] = {'H', 'C', 'D', 'C'};

enum class Method : std::uint8_t { kStored = 0, kHuffman = 1 };

// "BF16", "F16", "F32", "F8_E4M3", "F8_E5M2" (safetensors spelling); anything else: nullopt.
std::optional<DType> DTypeFromName(std::string_view name);
std::string_view DTypeName(DType dtype);  // "bytes" for kBytes
std::uint32_t DTypeSize(DType dtype);     // bytes per value (1 for kBytes)

// Which tensor and stream a stream belongs to, written into its header (and covered by the
// header checksum) so that a reader that knows what it asked for can tell a stream of another
// tensor, or another stripe of the same tensor, from the right one (docs/PACKED.md). The codec
// only stores it and checks index < count; `hoist pack` writes the XXH64 of the tensor's name,
// the stream's position among the tensor's streams, their number and the stream's first column.
struct StreamId {
  std::uint64_t tensor = 0;        // XXH64 (seed 0) of the tensor's name; 0: none
  std::uint32_t index = 0;         // this stream's position among the tensor's streams
  std::uint32_t count = 1;         // the tensor's streams, >= 1
  std::uint64_t first_column = 0;  // the first column (value of a row) the stream holds
  bool operator==(const StreamId&) const = default;
};

struct EncodeOptions {
  std::uint32_t block_values = 65536;  // values per block, 1 .. 1 << 22
  std::uint32_t sub_streams = 256;     // 1 .. 1024 (the GPU decoder needs a multiple of 32)
  int max_code_len = kLutBits;         // 8 .. 12
  int threads = 1;
  bool allow_huffman = true;  // false: always stored
  StreamId id;                // written into the header as is
};

// A parsed, validated stream header. Offsets are relative to the payload (header_bytes). It holds
// the code lengths, not the 8 KiB decode table built from them (BuildDecodeLut): a checkpoint of
// 90,000 tensors has as many headers, parsed on rank 0 and again on every rank, and the tables
// were most of that work and memory (a DeepSeek-V3-shaped packed copy of 90,427 small tensors,
// ep 8 rank 3 alone on an H100: 2.0 s from the load's start to its first copy with them, 0.09 s
// without; docs/BENCHMARKS.md, "Packed checkpoints at DeepSeek-V3's tensor count"). Whoever decodes
// a block on the CPU builds the table (DecodeBlockBytes), or keeps one per stream.
struct StreamInfo {
  std::uint16_t version = kFormatVersion;
  DType dtype = DType::kBytes;
  Method method = Method::kStored;
  std::uint64_t original_bytes = 0;
  std::uint64_t values = 0;
  std::uint32_t block_values = 0;
  std::uint32_t sub_streams = 0;
  int max_code_len = 0;
  std::uint32_t block_count = 0;
  std::uint64_t header_bytes = 0;
  std::uint64_t content_checksum = 0;  // XXH64 of the original bytes
  StreamId id;                         // as written (index < count checked)
  std::uint64_t header_checksum = 0;   // XXH64 of header bytes [0, header_bytes - 8), verified
  CodeLengths code_lengths{};
  std::vector<std::uint64_t> block_offsets;    // block_count + 1 entries
  std::vector<std::uint32_t> block_checksums;  // each block's (codec::BlockChecksum)
  std::uint64_t max_block_bit_words = 0;       // at least the largest block's coded bits, in 32-bit
                                               // words (exact for format 2; format 3 counts the
                                               // block's length fields too)

  std::uint64_t stream_bytes() const { return header_bytes + block_offsets.back(); }
  std::uint64_t block_value_count(std::uint32_t b) const;  // block_values, less for the last
  std::uint64_t block_first_byte(std::uint32_t b) const;   // in the decoded tensor
  Split split() const { return SplitOf(dtype); }
  // The bytes before a coded block of `n` values' coded words, at least (its raw region and the
  // smallest lengths region of its format): a bound for sizing, the block itself says the rest.
  std::uint64_t min_block_head_bytes(std::uint64_t n) const;
};

// Encodes `data` (a whole number of `dtype` values) into a new stream.
Result<std::vector<std::uint8_t>> Encode(DType dtype, std::span<const std::uint8_t> data,
                                         const EncodeOptions& options = {});

// The entropy bound of coding `data` (whole `dtype` values) with its dtype's split, in bytes:
// its raw bits plus, per value, the empirical entropy of its symbols (for BF16, the exponent-
// entropy bound (8 + H) / 16 of the original size). A dtype that is never coded: its size.
double SplitEntropyBytes(DType dtype, std::span<const std::uint8_t> data, int threads = 1);

// Parses and validates the header, tables and block offsets of `stream` (the whole stream).
Result<StreamInfo> ParseStream(std::span<const std::uint8_t> stream, std::string_view name);

// Parses a stream's header alone: `header` holds at least the stream's first header_bytes bytes,
// `stream_bytes` is the whole stream's size (block offsets are checked against it). The same
// checks as ParseStream except those needing the payload.
Result<StreamInfo> ParseHeader(std::span<const std::uint8_t> header, std::uint64_t stream_bytes,
                               std::string_view name);

// Decodes block `block` of a parsed stream into `out` (block_value_count(block) values).
Status DecodeBlock(const StreamInfo& info, std::span<const std::uint8_t> stream,
                   std::uint32_t block, std::span<std::uint8_t> out, std::string_view name);

// Decodes block `block` given as its own bytes (`bytes`: payload bytes [block_offsets[block],
// block_offsets[block + 1]) of the stream), with the same checks as DecodeBlock; error offsets
// are the stream's. The first form builds the stream's decode table for the call; the second
// takes it (`lut`: BuildDecodeLut(info.code_lengths), unused for a stored stream) from a caller
// that decodes many blocks of one stream.
Status DecodeBlockBytes(const StreamInfo& info, std::uint32_t block,
                        std::span<const std::uint8_t> bytes, std::span<std::uint8_t> out,
                        std::string_view name);
Status DecodeBlockBytes(const StreamInfo& info, const DecodeLut& lut, std::uint32_t block,
                        std::span<const std::uint8_t> bytes, std::span<std::uint8_t> out,
                        std::string_view name);

// Parses and decodes a whole stream into `out` (exactly the original size).
Status Decode(std::span<const std::uint8_t> stream, std::span<std::uint8_t> out,
              std::string_view name, int threads = 1);

}  // namespace hoist::codec
