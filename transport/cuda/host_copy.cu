#include <cuda_runtime.h>

#include <string>

#include "transport/cuda/host_copy.h"

namespace hoist::transport::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kBlocks = 1056;  // 8 per multiprocessor of an H200; 132 to 1056 ran alike (run X)
constexpr int kUnroll = 4;     // loads a thread keeps in flight across the link

// dst[i] = src[i] for n 16-byte words; each thread keeps kUnroll loads in flight.
__global__ void CopyWords(const int4* __restrict__ src, int4* __restrict__ dst, std::uint64_t n) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

// dst[i] = src[i] for n bytes (an unaligned copy, or the tail of an aligned one).
__global__ void CopyBytes(const unsigned char* src, unsigned char* dst, std::uint64_t n) {
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
}

bool Aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

Status LaunchHostCopy(void* dst, const void* host_src, std::uint64_t bytes, void* cuda_stream) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || host_src == nullptr) {
    return Status::InvalidArgument("host copy: null pointer");
  }
  void* src = nullptr;
  if (cudaHostGetDevicePointer(&src, const_cast<void*>(host_src), 0) != cudaSuccess) {
    (void)cudaGetLastError();  // not a sticky error: clear it
    return Status::Unsupported("host copy: the source is not mapped into the device");
  }
  auto* s = static_cast<cudaStream_t>(cuda_stream);
  const bool aligned = Aligned16(src) && Aligned16(dst);
  const std::uint64_t words = aligned ? bytes / 16 : 0;
  if (words > 0) {
    CopyWords<<<kBlocks, kThreads, 0, s>>>(static_cast<const int4*>(src), static_cast<int4*>(dst),
                                           words);
  }
  const std::uint64_t rest = bytes - words * 16;
  if (rest > 0) {
    const unsigned blocks =
        static_cast<unsigned>(rest / kThreads + 1 < kBlocks ? rest / kThreads + 1 : kBlocks);
    CopyBytes<<<blocks, kThreads, 0, s>>>(static_cast<const unsigned char*>(src) + words * 16,
                                          static_cast<unsigned char*>(dst) + words * 16, rest);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return Status::Internal(std::string("host copy: kernel launch: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace hoist::transport::cuda
