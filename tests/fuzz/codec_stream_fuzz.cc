// libFuzzer target for the codec's parser and CPU decoder: the input is a whole codec stream.
//
// Each input is tried as is and "resealed" (its header checksum recomputed, so that mutations
// reach the checks behind it). Beyond "no crash, no sanitizer report, no leak": a stream that
// decodes must decode to bytes whose checksum is the stored one, and its re-encoding must decode
// to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "codec/checksum.h"
#include "codec/codec.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Try(std::span<const std::uint8_t> stream) {
  auto info = hoist::codec::ParseStream(stream, "fuzz");
  if (!info.ok() || info->original_bytes > (std::uint64_t{16} << 20)) return;
  std::vector<std::uint8_t> out(info->original_bytes);
  if (!hoist::codec::Decode(stream, out, "fuzz").ok()) return;
  Check(hoist::codec::Xxh64(out.data(), out.size()) == info->content_checksum);
  auto again = hoist::codec::Encode(info->dtype, out);
  Check(again.ok());
  std::vector<std::uint8_t> back(out.size());
  Check(hoist::codec::Decode(*again, back, "fuzz").ok() && back == out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Try({data, size});
  std::vector<std::uint8_t> sealed(data, data + size);
  std::uint32_t header = 0;
  if (size >= 32) std::memcpy(&header, data + 28, 4);
  if (header >= 8 && header <= size) {
    const std::uint64_t sum = hoist::codec::Xxh64(sealed.data(), header - 8);
    std::memcpy(sealed.data() + header - 8, &sum, 8);
    Try(sealed);
  }
  return 0;
}
