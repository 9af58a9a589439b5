// Experiment (not part of hoist): variants of the codec's GPU decode kernel, timed side by side
// on one realistic bf16 stream. Build: nvcc -O3 -std=c++20 -arch=sm_90 -I. -Iinclude
// decode_lab.cu codec/*.cc -o decode_lab
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "codec/codec.h"
#include "codec/layout.h"

namespace {
constexpr std::uint32_t kLutWords = hoist::codec::kLutEntries / 2;
constexpr std::uint32_t kScanWords = 33;

struct Params {
  const std::uint8_t* stream;
  const std::uint64_t* offsets;
  std::uint64_t header_bytes;
  std::uint64_t values;
  std::uint32_t block_values;
  const std::uint32_t* lut;
  std::uint16_t* out;
  int* error;
};

__device__ __forceinline__ std::uint32_t Align4(std::uint64_t x) {
  return static_cast<std::uint32_t>((x + 3) & ~std::uint64_t{3});
}

__device__ std::uint32_t BlockExclusiveScan(std::uint32_t x, std::uint32_t* sums,
                                            std::uint32_t* total) {
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  std::uint32_t inclusive = x;
  for (int o = 1; o < 32; o <<= 1) {
    const std::uint32_t y = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
    if (lane >= o) inclusive += y;
  }
  if (lane == 31) sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    std::uint32_t v = lane < warps ? sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const std::uint32_t y = __shfl_up_sync(0xFFFFFFFFu, v, o);
      if (lane >= o) v += y;
    }
    sums[lane] = v;
    if (lane == 31) *total = v;
  }
  __syncthreads();
  return inclusive - x + (warp > 0 ? sums[warp - 1] : 0);
}

class BitReader {
 public:
  __device__ __forceinline__ BitReader(const std::uint32_t* bits, std::uint32_t pos,
                                       std::uint32_t len)
      : bits_(bits), next_((pos >> 5) + 2), have_(64 - (pos & 31)), left_(len) {
    const std::uint32_t i = pos >> 5;
    buf_ = (static_cast<std::uint64_t>(bits[i]) << 32 | bits[i + 1]) << (pos & 31);
  }
  __device__ __forceinline__ bool Next(const std::uint16_t* lut, std::uint32_t* sym) {
    if (have_ < 32) {
      buf_ |= static_cast<std::uint64_t>(bits_[next_++]) << (32 - have_);
      have_ += 32;
    }
    const std::uint16_t e = lut[buf_ >> (64 - hoist::codec::kLutBits)];
    const std::uint32_t len = e >> 8;
    if (len == 0 || len > left_) return false;
    buf_ <<= len;
    have_ -= len;
    left_ -= len;
    *sym = e & 0xFF;
    return true;
  }
  __device__ __forceinline__ bool Done() const { return left_ == 0; }

 private:
  const std::uint32_t* bits_;
  std::uint64_t buf_;
  std::uint32_t next_, have_, left_;
};

// kMode: 0 = current kernel; 1 = raw bytes prefetched kDepth values ahead; 2 = 1 + staging
// unrolled; 3 = prologue only (stage + scan, no decode); 4 = decode without raw loads; 5 = raw
// only (no Huffman)
template <int kMode, int kDepth>
__global__ void __launch_bounds__(1024) Kernel(Params p) {
  extern __shared__ std::uint32_t smem[];
  std::uint32_t* lut_words = smem;
  std::uint32_t* scan = smem + kLutWords;
  std::uint32_t* bits = scan + kScanWords;
  const std::uint16_t* lut = reinterpret_cast<const std::uint16_t*>(lut_words);
  const std::uint32_t b = blockIdx.x, T = blockDim.x, t = threadIdx.x;
  const std::uint64_t first = std::uint64_t{b} * p.block_values;
  const std::uint64_t left = p.values - first;
  const std::uint32_t n = left < p.block_values ? static_cast<std::uint32_t>(left) : p.block_values;
  const std::uint8_t* block = p.stream + p.header_bytes + p.offsets[b];
  const std::uint64_t size = p.offsets[b + 1] - p.offsets[b];
  const std::uint32_t head = Align4(n) + Align4(2ull * T);
  const std::uint16_t* lengths = reinterpret_cast<const std::uint16_t*>(block + Align4(n));
  const std::uint32_t* words = reinterpret_cast<const std::uint32_t*>(block + head);
  const std::uint32_t word_count = static_cast<std::uint32_t>((size - head) / 4);
  std::uint16_t* out = p.out + first;
  if (kMode == 5) {
    for (std::uint32_t k = t; k < n; k += T) out[k] = block[k];
    return;
  }
  for (std::uint32_t i = t; i < kLutWords; i += T) lut_words[i] = p.lut[i];
  if (kMode == 2) {
#pragma unroll 8
    for (std::uint32_t i = t; i < word_count; i += T) bits[i] = words[i];
  } else {
    for (std::uint32_t i = t; i < word_count; i += T) bits[i] = words[i];
  }
  if (t < 2) bits[word_count + t] = 0;
  const std::uint32_t my_bits = lengths[t];
  const std::uint32_t start = BlockExclusiveScan(my_bits, scan, scan + 32);
  const std::uint32_t total = scan[32];
  bool ok = total <= 32u * word_count;
  if (kMode == 3) {
    if (!ok) atomicCAS(p.error, 0, static_cast<int>(b) + 1);
    return;
  }
  BitReader reader(bits, ok ? start : 0, ok ? my_bits : 0);
  if (kMode == 6 || kMode == 7) {
    std::uint8_t* syms = reinterpret_cast<std::uint8_t*>(bits + word_count + 2);
    const std::uint32_t chunk = kDepth * T;
    for (std::uint32_t c0 = 0; c0 < n; c0 += chunk) {
      const std::uint32_t m = n - c0 < chunk ? n - c0 : chunk;
#pragma unroll 4
      for (std::uint32_t k = t; k < m; k += T) {
        std::uint32_t sym = 0;
        ok = reader.Next(lut, &sym) && ok;
        syms[k] = static_cast<std::uint8_t>(sym);
      }
      __syncthreads();
      if (kMode == 6 && m % 4 == 0) {
        const std::uint32_t* raw4 = reinterpret_cast<const std::uint32_t*>(block + c0);
        const std::uint32_t* sym4 = reinterpret_cast<const std::uint32_t*>(syms);
        uint2* out4 = reinterpret_cast<uint2*>(out + c0);
        for (std::uint32_t q = t; q < m / 4; q += T) {
          const std::uint32_t r = raw4[q], s = sym4[q];
          std::uint32_t v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const std::uint32_t rb = (r >> (8 * u)) & 0xFF, sb = (s >> (8 * u)) & 0xFF;
            v[u] = (rb & 0x80) << 8 | sb << 7 | (rb & 0x7F);
          }
          out4[q] = make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
        }
      } else {
        for (std::uint32_t k = t; k < m; k += T) {
          const std::uint32_t rb = block[c0 + k], sb = syms[k];
          out[c0 + k] = static_cast<std::uint16_t>((rb & 0x80) << 8 | sb << 7 | (rb & 0x7F));
        }
      }
      __syncthreads();
    }
    if (!ok || !reader.Done()) atomicCAS(p.error, 0, static_cast<int>(b) + 1);
    return;
  }
  if (kMode == 0 || kMode == 4) {
    std::uint32_t next_raw = (kMode == 0 && t < n) ? block[t] : 0;
    for (std::uint32_t k = t; ok && k < n; k += T) {
      const std::uint32_t raw = next_raw;
      if (kMode == 0 && k + T < n) next_raw = block[k + T];
      std::uint32_t sym = 0;
      ok = reader.Next(lut, &sym);
      out[k] = static_cast<std::uint16_t>((raw & 0x80) << 8 | sym << 7 | (raw & 0x7F));
    }
  } else {
    std::uint32_t ahead[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const std::uint32_t k = t + u * T;
      ahead[u] = k < n ? block[k] : 0;
    }
    for (std::uint32_t k0 = t; ok && k0 < n; k0 += kDepth * T) {
      std::uint32_t cur[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        cur[u] = ahead[u];
        const std::uint32_t k = k0 + (kDepth + u) * T;
        ahead[u] = k < n ? block[k] : 0;
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const std::uint32_t k = k0 + u * T;
        if (ok && k < n) {
          std::uint32_t sym = 0;
          ok = reader.Next(lut, &sym);
          const std::uint32_t raw = cur[u];
          out[k] = static_cast<std::uint16_t>((raw & 0x80) << 8 | sym << 7 | (raw & 0x7F));
        }
      }
    }
  }
  if (!ok || !reader.Done()) atomicCAS(p.error, 0, static_cast<int>(b) + 1);
}

std::uint16_t ToBf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

template <int kMode, int kDepth>
void Run(const char* name, const Params& p, std::uint32_t blocks, std::uint32_t threads,
         std::uint64_t shared0, const std::vector<std::uint16_t>& want) {
  auto k = &Kernel<kMode, kDepth>;
  const std::uint64_t shared = shared0 + ((kMode >= 6) ? kDepth * threads + 16 : 0);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
  cudaMemset(p.out, 0, p.values * 2);
  cudaMemset(p.error, 0, 4);
  cudaEvent_t a, z;
  cudaEventCreate(&a);
  cudaEventCreate(&z);
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    cudaEventRecord(a);
    k<<<blocks, threads, shared>>>(p);
    cudaEventRecord(z);
    cudaEventSynchronize(z);
    float m = 0;
    cudaEventElapsedTime(&m, a, z);
    if (r > 1) ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  int err = 0;
  cudaMemcpy(&err, p.error, 4, cudaMemcpyDeviceToHost);
  std::vector<std::uint16_t> got(p.values);
  cudaMemcpy(got.data(), p.out, p.values * 2, cudaMemcpyDeviceToHost);
  const bool same = got == want;
  const double med = ms[ms.size() / 2];
  std::printf("%-34s %8.3f ms %8.1f GiB/s  error=%d  %s\n", name, med,
              p.values * 2 / (med / 1e3) / (1u << 30), err,
              (kMode <= 2 || kMode >= 6) ? (same ? "identical" : "DIFFERENT") : "(not a decode)");
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) std::printf("  cuda error %s\n", cudaGetErrorString(e));
}
}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t values = static_cast<std::uint64_t>(argc > 1 ? std::atoi(argv[1]) : 256) << 20;
  std::vector<std::uint16_t> data(values);
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (s >> 11) * (1.0 / 9007199254740992.0);
  };
  for (std::uint64_t i = 0; i < values; ++i) {  // normal, std 0.02 (weights' statistics)
    const double u1 = std::max(next(), 1e-300), u2 = next();
    data[i] = ToBf16(static_cast<float>(0.02 * std::sqrt(-2 * std::log(u1)) *
                                        std::cos(6.283185307179586 * u2)));
  }
  hoist::codec::EncodeOptions o;
  o.sub_streams = 1024;
  o.threads = 16;
  auto bytes = std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(data.data()),
                                             values * 2);
  auto enc = hoist::codec::Encode(hoist::codec::DType::kBF16, bytes, o);
  if (!enc.ok()) return 1;
  auto info = hoist::codec::ParseStream(*enc, "lab");
  if (!info.ok()) return 2;
  std::printf("values %llu, stream %.1f%% of the original, %u blocks, max words %llu\n",
              (unsigned long long)values, 100.0 * enc->size() / (values * 2), info->block_count,
              (unsigned long long)info->max_block_bit_words);
  std::uint8_t* d_stream;
  std::uint16_t *d_out, *d_lut;
  int* d_err;
  cudaMalloc(&d_stream, enc->size());
  cudaMalloc(&d_out, values * 2);
  cudaMalloc(&d_lut, sizeof(info->lut));
  cudaMalloc(&d_err, 4);
  cudaMemcpy(d_stream, enc->data(), enc->size(), cudaMemcpyHostToDevice);
  cudaMemcpy(d_lut, info->lut.data(), sizeof(info->lut), cudaMemcpyHostToDevice);
  Params p{d_stream,
           reinterpret_cast<const std::uint64_t*>(d_stream + hoist::codec::layout::kFixedHeaderBytes),
           info->header_bytes,
           info->values,
           info->block_values,
           reinterpret_cast<const std::uint32_t*>(d_lut),
           d_out,
           d_err};
  const std::uint64_t shared = 4 * (kLutWords + kScanWords + info->max_block_bit_words + 2);
  const std::uint32_t blocks = info->block_count, threads = info->sub_streams;
  for (int rep = 0; rep < 2; ++rep) {
    Run<0, 1>("0 current", p, blocks, threads, shared, data);
    Run<1, 2>("1 raw ahead 2", p, blocks, threads, shared, data);
    Run<1, 4>("1 raw ahead 4", p, blocks, threads, shared, data);
    Run<1, 8>("1 raw ahead 8", p, blocks, threads, shared, data);
    Run<1, 16>("1 raw ahead 16", p, blocks, threads, shared, data);
    Run<2, 8>("2 raw ahead 8 + staging unrolled", p, blocks, threads, shared, data);
    Run<6, 4>("6 syms in smem x4, u64 writes", p, blocks, threads, shared, data);
    Run<6, 8>("6 syms in smem x8, u64 writes", p, blocks, threads, shared, data);
    Run<6, 16>("6 syms in smem x16, u64 writes", p, blocks, threads, shared, data);
    Run<6, 64>("6 syms in smem x64, u64 writes", p, blocks, threads, shared, data);
    Run<7, 16>("7 syms in smem x16, u16 writes", p, blocks, threads, shared, data);
    Run<3, 1>("3 prologue only", p, blocks, threads, shared, data);
    Run<4, 1>("4 decode, no raw loads", p, blocks, threads, shared, data);
    Run<5, 1>("5 raw bytes only", p, blocks, threads, shared, data);
  }
  return 0;
}
