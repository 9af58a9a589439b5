// hoist-mkckpt's FP8 content: block-quantized weights, as the official FP8 checkpoints hold them
// (DeepSeek-V3, Qwen3-FP8). Each value is a normal-distributed weight (Box-Muller on a hash of
// (key, element index)), divided by its 128 x 128 block's scale amax / 448 and rounded to
// E4M3 (OCP "fn": bias 7, no infinities, 0x7F / 0xFF NaN, largest 448) to nearest even. So
// every block's largest magnitude is exactly 448 (0x7E or 0xFE), the values of a block spread
// over a few binades below it, and zeros and subnormals occur where real ones do; never NaN.
// The tensor is rows x cols, cols its last dimension (a 1-D tensor is one row).
//
// Failure: none. Ownership: values. Threading: pure functions (each call keeps its own cache of
// block maxima).
#pragma once

#include <cstdint>
#include <vector>

namespace hoist::tools {

// E4M3 (fn) nearest to `x`, ties to even; |x| above 448 saturates to 448 (as quantizers clamp).
std::uint8_t ToE4M3(float x);

// Bytes [begin, end) of a rows x cols block-quantized E4M3 tensor whose weights come from `key`.
void BlockQuantizedE4M3(std::uint64_t key, std::uint64_t rows, std::uint64_t cols,
                        std::uint64_t begin, std::uint64_t end, std::uint8_t* out);

}  // namespace hoist::tools
