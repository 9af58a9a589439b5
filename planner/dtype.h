// Safetensors element types. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hoist::planner {

enum class DType : std::uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E8M0,  // OCP E8M0 (ue8m0): power-of-two scales, e.g. DeepSeek-V4's MXFP4 / FP8 scales
};

// "BF16" -> kBF16; nullopt for a name safetensors does not define.
std::optional<DType> ParseDType(std::string_view name);
// kBF16 -> "BF16" (the safetensors spelling).
std::string_view DTypeName(DType dtype);
// Bytes per element.
std::size_t DTypeSize(DType dtype);

}  // namespace hoist::planner
