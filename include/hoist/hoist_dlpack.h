// DLPack export of hoist tensors (Debian's libdlpack-dev, DLPack 0.6 ABI), so PyTorch, JAX or
// CuPy take them without a copy: torch.utils.dlpack.from_dlpack(capsule) on the GPU.
//
// Device: kDLCUDA with the model's CUDA ordinal, or kDLCPU on the host backend. Dtypes: BF16 ->
// kDLBfloat 16, F16/F32/F64 -> kDLFloat, I* -> kDLInt, U* and BOOL -> kDLUInt; DLPack 0.6 has no
// 8-bit float, so F8_E4M3 / F8_E5M2 are exported as kDLUInt 8 (the raw bytes; Tensor::dtype says
// which). raw == true exports every tensor as unsigned integers of its element width (for
// consumers without bfloat16, e.g. numpy).
//
// Ownership: the returned DLManagedTensor holds a reference on the model's weights; the consumer
// calls its deleter exactly once, which drops that reference (the weights are freed when the
// Model was released and the last export is deleted). Failure: an invalid model or index, or a
// dtype hoist does not know, is a Status. Threading: any thread.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string_view>

#include "hoist/hoist.h"

namespace hoist {

Result<DLManagedTensor*> ToDLPack(const Model& model, std::size_t index, bool raw = false);
Result<DLManagedTensor*> ToDLPack(const Model& model, std::string_view name, bool raw = false);

// The DLPack type of a safetensors dtype name (see above); false when unknown.
bool DLPackDType(std::string_view dtype, bool raw, DLDataType* out);

}  // namespace hoist
