// libFuzzer target for the safetensors header parser: the input is a whole file's bytes.
//
// Beyond "no crash, no sanitizer report, no leak", an accepted header must satisfy the
// invariants the rest of hoist relies on; a violation aborts so the fuzzer records it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "planner/dtype.h"
#include "planner/safetensors.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckInvariants(const hoist::planner::SafetensorsHeader& h, std::uint64_t file_size) {
  Check(h.data_start == 8 + h.header_len);
  Check(h.header_len <= hoist::planner::kMaxHeaderBytes);
  Check(h.data_start <= file_size);
  // Sorted by begin, tiling the data section exactly.
  std::uint64_t covered = 0;
  for (const auto& t : h.tensors) {
    Check(t.begin == covered);
    Check(t.begin <= t.end);
    __uint128_t elements = 1;
    for (std::uint64_t d : t.shape) {
      elements *= d;
      if (elements > UINT64_MAX) elements = static_cast<__uint128_t>(UINT64_MAX) + 1;
    }
    Check(elements * hoist::planner::DTypeSize(t.dtype) == t.bytes());
    covered = t.end;
  }
  Check(covered == file_size - h.data_start);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto result = hoist::planner::ParseSafetensorsPrefix("fuzz.safetensors", bytes, size);
  if (result.ok()) {
    CheckInvariants(result.value(), size);
  } else {
    Check(!result.status().message().empty());
  }
  return 0;
}
