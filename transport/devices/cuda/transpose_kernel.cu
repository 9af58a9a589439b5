#include "transport/devices/cuda/transpose_kernel.h"

namespace hoist::transport {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // a block is kTile x kRowsPerPass threads

// One kTile x kTile tile of one matrix per block, through shared memory (padded against bank
// conflicts) so that both the reads and the writes are coalesced.
template <typename T>
__global__ void TransposeTiles(const T* __restrict__ src, T* __restrict__ dst, std::uint64_t rows,
                               std::uint64_t cols, std::uint64_t matrix) {
  __shared__ T tile[kTile][kTile + 1];
  const T* s = src + blockIdx.z * matrix;
  T* d = dst + blockIdx.z * matrix;
  const std::uint64_t c0 = static_cast<std::uint64_t>(blockIdx.x) * kTile;
  const std::uint64_t r0 = static_cast<std::uint64_t>(blockIdx.y) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const std::uint64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = s[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
    const std::uint64_t c = c0 + i, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) d[c * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
cudaError_t Launch(const void* src, void* dst, std::uint64_t batch, std::uint64_t rows,
                   std::uint64_t cols, cudaStream_t stream) {
  const dim3 block(kTile, kRowsPerPass);
  const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                  static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>(batch));
  TransposeTiles<T><<<grid, block, 0, stream>>>(static_cast<const T*>(src), static_cast<T*>(dst),
                                                rows, cols, rows * cols);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchTranspose(const void* src, void* dst, std::uint64_t batch, std::uint64_t rows,
                            std::uint64_t cols, std::uint32_t elem_bytes, cudaStream_t stream) {
  // Grid limits: x up to 2^31 - 1 tiles, y and z up to 65535.
  if ((rows + kTile - 1) / kTile > 65535 || batch > 65535 ||
      (cols + kTile - 1) / kTile > 2147483647ull) {
    return cudaErrorInvalidValue;
  }
  switch (elem_bytes) {
    case 1:
      return Launch<std::uint8_t>(src, dst, batch, rows, cols, stream);
    case 2:
      return Launch<std::uint16_t>(src, dst, batch, rows, cols, stream);
    case 4:
      return Launch<std::uint32_t>(src, dst, batch, rows, cols, stream);
    case 8:
      return Launch<std::uint64_t>(src, dst, batch, rows, cols, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace hoist::transport
