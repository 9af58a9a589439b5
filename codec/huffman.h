// Canonical, length-limited Huffman codes over the 256 byte symbols of the codec's coded stream.
//
// A code is described by its 256 code lengths alone (0 = symbol absent). Canonical assignment
// (as DEFLATE): symbols sorted by (length, symbol value) take consecutive codes, shorter first.
// Codes are read most-significant bit first. A decoder peeks kLutBits bits and looks them up in
// a table of 1 << kLutBits entries: entry = length << 8 | symbol, length 0 = no code starts with
// these bits (possible only for incomplete codes: a corrupt stream, or one symbol alone).
//
// Failure: functions here take validated input (CodeLengthsValid says whether lengths are);
// nothing throws. Ownership: values only. Threading: pure functions.
#pragma once

#include <array>
#include <cstdint>

namespace hoist::codec {

inline constexpr int kLutBits = 12;  // the longest code any stream may use
inline constexpr int kLutEntries = 1 << kLutBits;

using SymbolCounts = std::array<std::uint64_t, 256>;
using CodeLengths = std::array<std::uint8_t, 256>;
using DecodeLut = std::array<std::uint16_t, kLutEntries>;

// Huffman code lengths for `counts`, none longer than max_len (8..kLutBits): where plain
// Huffman is deeper, counts are halved (rounding up, so no used symbol disappears) until it is
// not. One used symbol gets length 1; no used symbol gives all zeros.
CodeLengths LimitedCodeLengths(const SymbolCounts& counts, int max_len);

// True when every length is <= max_len (<= kLutBits), at least one is non-zero and the Kraft sum
// is at most 1 (a prefix code exists).
bool CodeLengthsValid(const CodeLengths& lengths, int max_len);

// The canonical code of each symbol (right-aligned in `code`, `lengths[s]` bits).
std::array<std::uint16_t, 256> CanonicalCodes(const CodeLengths& lengths);

// The decode table for valid `lengths`.
DecodeLut BuildDecodeLut(const CodeLengths& lengths);

}  // namespace hoist::codec
