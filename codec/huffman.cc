#include "codec/huffman.h"

#include <algorithm>
#include <queue>
#include <utility>
#include <vector>

#include "codec/lut_build.h"

namespace hoist::codec {

static_assert(lut::kBits == kLutBits, "codec/lut_build.h builds tables of kLutBits");

namespace {

// Plain Huffman depths of the used symbols of `counts` (all > 0 where used).
CodeLengths HuffmanDepths(const SymbolCounts& counts) {
  CodeLengths lengths{};
  std::vector<int> parent;  // node -> parent node; leaves 0..255 first
  parent.assign(256, -1);
  using Item = std::pair<std::uint64_t, int>;  // (weight, node); ties broken by node id
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  for (int s = 0; s < 256; ++s) {
    if (counts[s] > 0) queue.push({counts[s], s});
  }
  if (queue.empty()) return lengths;
  if (queue.size() == 1) {
    lengths[queue.top().second] = 1;
    return lengths;
  }
  while (queue.size() > 1) {
    const Item a = queue.top();
    queue.pop();
    const Item b = queue.top();
    queue.pop();
    const int node = static_cast<int>(parent.size());
    parent.push_back(-1);
    parent[a.second] = node;
    parent[b.second] = node;
    queue.push({a.first + b.first, node});
  }
  for (int s = 0; s < 256; ++s) {
    if (counts[s] == 0) continue;
    int depth = 0;
    for (int n = s; parent[n] >= 0; n = parent[n]) ++depth;
    lengths[s] = static_cast<std::uint8_t>(depth);
  }
  return lengths;
}

}  // namespace

CodeLengths LimitedCodeLengths(const SymbolCounts& counts, int max_len) {
  SymbolCounts c = counts;
  for (;;) {
    const CodeLengths lengths = HuffmanDepths(c);
    if (*std::max_element(lengths.begin(), lengths.end()) <= max_len) return lengths;
    for (auto& x : c) x = (x + 1) / 2;  // 0 stays 0, >= 1 stays >= 1; flattens the tree
  }
}

bool CodeLengthsValid(const CodeLengths& lengths, int max_len) {
  if (max_len < 1 || max_len > kLutBits) return false;
  std::uint64_t kraft = 0;  // in units of 2^-max_len
  bool any = false;
  for (std::uint8_t len : lengths) {
    if (len == 0) continue;
    if (len > max_len) return false;
    any = true;
    kraft += std::uint64_t{1} << (max_len - len);
  }
  return any && kraft <= (std::uint64_t{1} << max_len);
}

std::array<std::uint16_t, 256> CanonicalCodes(const CodeLengths& lengths) {
  std::array<std::uint16_t, 256> codes{};
  lut::CanonicalCodes(lengths.data(), codes.data());
  return codes;
}

DecodeLut BuildDecodeLut(const CodeLengths& lengths) {
  DecodeLut table{};  // 0: no code
  const auto codes = CanonicalCodes(lengths);
  for (int s = 0; s < 256; ++s) {
    if (lengths[s] != 0) lut::FillSymbol(s, lengths[s], codes[s], table.data());
  }
  return table;
}

}  // namespace hoist::codec
