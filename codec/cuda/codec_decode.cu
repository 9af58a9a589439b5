// The codec's GPU decode kernel (see codec_decode.h; block layout in docs/CODEC.md).
#include <cuda_runtime.h>

#include <string>

#include "codec/checksum.h"
#include "codec/cuda/codec_decode.h"
#include "codec/lane_sum.h"
#include "codec/layout.h"
#include "codec/lut_build.h"

namespace hoist::transport::cuda {
namespace {

constexpr std::uint32_t kLutWords = codec::kLutEntries / 2;  // u16 entries, two per word
constexpr std::uint32_t kScanWords = 34;  // 32 warp sums, the total, the lane checksum

struct Params {
  const std::uint8_t* stream;
  const std::uint64_t* offsets;  // block_count + 1, relative to the payload
  std::uint64_t header_bytes;
  std::uint64_t values;
  std::uint32_t block_values;
  const std::uint32_t* lut;  // 2048 words
  std::uint8_t* out;
  int* error;
  std::uint32_t packed_lengths;  // 1: format 3's head word and fields; 0: format 2's u16s
};

// A row of codec/split.h as compile-time constants: value bytes, raw bits, and how a symbol and
// raw bits join into a value.
template <codec::DType kDType>
struct Row {
  static constexpr std::uint32_t kValueBytes = codec::SplitOf(kDType).value_bytes;
  static constexpr std::uint32_t kLow = codec::SplitOf(kDType).low_bits;
  static constexpr std::uint32_t kSymbol = codec::SplitOf(kDType).symbol_bits;
  static constexpr std::uint32_t kRawBits = codec::SplitOf(kDType).raw_bits();
  using Value = std::conditional_t<kValueBytes == 2, std::uint16_t, std::uint8_t>;
  static_assert(kSymbol > 0 && kRawBits <= 8 && (kValueBytes == 1 || kValueBytes == 2));

  __device__ __forceinline__ static Value Join(std::uint32_t sym, std::uint32_t raw) {
    return static_cast<Value>((raw >> kLow) << (kLow + kSymbol) | sym << kLow |
                              (raw & ((1u << kLow) - 1)));
  }
  // Value k's raw bits (least significant bit first in the raw region; docs/CODEC.md). Reads
  // only the bytes holding them.
  __device__ __forceinline__ static std::uint32_t Raw(const std::uint8_t* raw, std::uint32_t k) {
    if constexpr (kRawBits == 8) {
      return raw[k];
    } else if constexpr (kRawBits == 0) {
      return 0;
    } else {
      const std::uint32_t bit = k * kRawBits, shift = bit & 7;
      std::uint32_t v = raw[bit >> 3];
      if constexpr (8 % kRawBits != 0) {
        if (shift + kRawBits > 8) v |= std::uint32_t{raw[(bit >> 3) + 1]} << 8;
      }
      return (v >> shift) & ((1u << kRawBits) - 1);
    }
  }
};
using Bf16Row = Row<codec::DType::kBF16>;
using F16Row = Row<codec::DType::kF16>;
using E4M3Row = Row<codec::DType::kF8E4M3>;
using E5M2Row = Row<codec::DType::kF8E5M2>;

__device__ __forceinline__ std::uint32_t Align4(std::uint64_t x) {
  return static_cast<std::uint32_t>((x + 3) & ~std::uint64_t{3});
}

// Exclusive prefix sum of `x` over the CUDA block (blockDim.x a multiple of 32, <= 1024);
// *total receives the sum. Every thread must call it.
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
    sums[lane] = v;  // inclusive over warps
    if (lane == 31) *total = v;
  }
  __syncthreads();
  return inclusive - x + (warp > 0 ? sums[warp - 1] : 0);
}

// One thread's sub-stream: bits [pos, pos + len) of the staged words (most significant bit of
// each word first, two zero words after the last), read through a 64-bit register so that a
// value costs one shared-memory load (its table entry) and a word is loaded every 32 bits.
class BitReader {
 public:
  __device__ __forceinline__ BitReader(const std::uint32_t* bits, std::uint32_t pos,
                                       std::uint32_t len)
      : bits_(bits), next_((pos >> 5) + 2), have_(64 - (pos & 31)), left_(len) {
    const std::uint32_t i = pos >> 5;
    buf_ = (static_cast<std::uint64_t>(bits[i]) << 32 | bits[i + 1]) << (pos & 31);
  }

  // The next code's table entry; false on a bit pattern without a code or a code past the
  // sub-stream's end. Reads no word past the first zero word after the sub-stream's last bit.
  __device__ __forceinline__ bool Next(const std::uint16_t* lut, std::uint32_t* sym) {
    if (have_ < 32) {
      buf_ |= static_cast<std::uint64_t>(bits_[next_++]) << (32 - have_);
      have_ += 32;
    }
    const std::uint16_t e = lut[buf_ >> (64 - codec::kLutBits)];
    const std::uint32_t len = e >> 8;
    if (len == 0 || len > left_) return false;
    buf_ <<= len;
    have_ -= len;
    left_ -= len;
    *sym = e & 0xFF;
    return true;
  }

  // Whether every bit of the sub-stream was consumed.
  __device__ __forceinline__ bool Done() const { return left_ == 0; }

 private:
  const std::uint32_t* bits_;
  std::uint64_t buf_;  // the next `have_` bits, most significant first; zeros after them
  std::uint32_t next_, have_, left_;
};

// ---- Batched jobs (LaunchCodecJobs) ----

struct JobArgs {
  const CodecJob* jobs;  // jobs[0] is job `first` of the set
  const CodecJobStream* streams;
  const uint4* luts;  // kLutWords / 4 per stream
  const std::uint8_t* src;
  std::uint8_t* arena;
  int* error;
  std::uint32_t first;
  std::uint32_t max_words;
};

__device__ __forceinline__ std::uint64_t Align4Wide(std::uint64_t x) { return (x + 3) & ~3ull; }

// Kept values form one range of k: value k lands at element first + k of `base`.
template <class V>
struct RangeOut {
  V* base;
  std::int64_t first;
  std::uint32_t lo, hi;  // kept: lo <= k < hi (lo <= hi)
  __device__ __forceinline__ void Put(std::uint32_t k, V v) {
    if (k - lo < hi - lo) base[first + static_cast<std::int64_t>(k)] = v;
  }
  __device__ __forceinline__ void Step() {}
};

// The general rule: the thread's current value is element (r, c) of the copy, c in [0, pitch)
// (r < 0 before the copy's start); `row` is the arena byte of (r, 0) modulo 2^64.
template <class V>
struct GridOut {
  std::uint8_t* arena;
  std::uint64_t pitch, width, rows, dst_pitch;
  std::uint64_t step_c, step_row;  // T % pitch, (T / pitch) * dst_pitch
  std::int64_t step_r;             // T / pitch
  std::uint64_t c, row;
  std::int64_t r;
  __device__ __forceinline__ void Put(std::uint32_t, V v) {
    if (r >= 0 && static_cast<std::uint64_t>(r) < rows && c < width) {
      *reinterpret_cast<V*>(arena + row + sizeof(V) * c) = v;
    }
  }
  __device__ __forceinline__ void Step() {
    c += step_c;
    r += step_r;
    row += step_row;
    if (c >= pitch) {
      c -= pitch;
      ++r;
      row += dst_pitch;
    }
  }
};

// Decodes values k = t, t + T, ... < n of the thread's sub-stream, folding each into lane t's
// checksum state *h; false on a bit pattern without a code, a code past the sub-stream's end or
// bits left over. The raw bytes are loaded kAhead values ahead of their use, so that several
// global loads are in flight per thread.
template <class R, std::uint32_t kAhead, class Out>
__device__ __forceinline__ bool DecodeSubStream(BitReader& reader, const std::uint16_t* lut,
                                                const std::uint8_t* raw, std::uint32_t t,
                                                std::uint32_t T, std::uint32_t n, Out& out,
                                                std::uint32_t* h) {
  std::uint32_t ahead[kAhead];
#pragma unroll
  for (std::uint32_t u = 0; u < kAhead; ++u) {
    const std::uint32_t k = t + u * T;
    ahead[u] = k < n ? R::Raw(raw, k) : 0;
  }
  for (std::uint32_t k0 = t; k0 < n; k0 += kAhead * T) {  // n <= 2^22: no overflow
    std::uint32_t now[kAhead];
#pragma unroll
    for (std::uint32_t u = 0; u < kAhead; ++u) {
      now[u] = ahead[u];
      const std::uint32_t k = k0 + (kAhead + u) * T;
      ahead[u] = k < n ? R::Raw(raw, k) : 0;
    }
#pragma unroll
    for (std::uint32_t u = 0; u < kAhead; ++u) {
      const std::uint32_t k = k0 + u * T;
      if (k >= n) break;
      std::uint32_t sym = 0;
      if (!reader.Next(lut, &sym)) return false;
      const typename R::Value v = R::Join(sym, now[u]);
      out.Put(k, v);
      out.Step();
      *h = codec::lane::Round(*h, v);
    }
  }
  return reader.Done();
}

// The little-endian u32 at p, which may sit at any address.
__device__ __forceinline__ std::uint32_t LoadU32(const std::uint8_t* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % 4 == 0)
    return *reinterpret_cast<const std::uint32_t*>(p);
  return p[0] | p[1] << 8 | p[2] << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// A block's sub-stream lengths region at `lengths` (docs/CODEC.md): format 2, u16 each; format
// 3, a head word (base | width << 16) then `width`-bit fields. `region` is its size in bytes;
// false when the head word is bad (width over 16).
struct BlockLengths {
  const std::uint8_t* fields;
  std::uint32_t base, width, region;
  __device__ __forceinline__ bool Read(const std::uint8_t* lengths, std::uint32_t T,
                                       std::uint32_t packed) {
    if (packed == 0) {
      fields = lengths;
      base = 0;
      width = 16;
      region = Align4(2ull * T);
      return true;
    }
    const std::uint32_t head = LoadU32(lengths);
    fields = lengths + 4;
    base = head & 0xFFFF;
    width = head >> 16;
    region = 4 + Align4((std::uint64_t{T} * width + 7) / 8);
    return width <= 16;
  }
  // Sub-stream t's length: base + bits [t * width, + width) of the fields, least significant
  // bit first (reads only the bytes holding them).
  __device__ __forceinline__ std::uint32_t Of(std::uint32_t t) const {
    if (width == 0) return base;
    const std::uint32_t bit = t * width, shift = bit & 7, bytes = (shift + width + 7) >> 3;
    const std::uint8_t* q = fields + (bit >> 3);
    std::uint32_t v = q[0];
    if (bytes > 1) v |= std::uint32_t{q[1]} << 8;
    if (bytes > 2) v |= std::uint32_t{q[2]} << 16;
    return base + ((v >> shift) & ((1u << width) - 1));
  }
};

// One CUDA block per codec block, one thread per sub-stream. Two 1024-thread blocks a
// multiprocessor (at most 32 registers a thread): with one, the SM idles while its block stages
// words and waits at barriers.
template <class R>
__global__ void __launch_bounds__(1024, 2) DecodeKernel(Params p) {
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
  const std::uint32_t raw_bytes = Align4((std::uint64_t{n} * R::kRawBits + 7) / 8);
  BlockLengths lengths;
  const bool head_ok = lengths.Read(block + raw_bytes, T, p.packed_lengths);
  const std::uint64_t head = std::uint64_t{raw_bytes} + lengths.region;
  if (!head_ok || head > size) {  // the same for every thread: nobody reaches a sync
    if (t == 0) atomicCAS(p.error, 0, static_cast<int>(b) + 1);
    return;
  }
  const std::uint32_t* words = reinterpret_cast<const std::uint32_t*>(block + head);
  const std::uint32_t word_count = static_cast<std::uint32_t>((size - head) / 4);

  for (std::uint32_t i = t; i < kLutWords; i += T) lut_words[i] = p.lut[i];
  for (std::uint32_t i = t; i < word_count; i += T) bits[i] = words[i];
  if (t < 2) bits[word_count + t] = 0;  // peeks at the end read zeros
  const std::uint32_t my_bits = lengths.Of(t);
  const std::uint32_t start = BlockExclusiveScan(my_bits, scan, scan + 32);  // syncs
  const std::uint32_t total = scan[32];

  bool ok = total <= 32u * word_count;
  if (ok) {
    BitReader reader(bits, start, my_bits);
    using V = typename R::Value;
    RangeOut<V> out{reinterpret_cast<V*>(p.out), static_cast<std::int64_t>(first), 0, n};
    std::uint32_t h = 0;  // unused: this path's checksum is the host's (DecodeOnGpu)
    ok = DecodeSubStream<R, 4>(reader, lut, block, t, T, n, out, &h);
  }
  if (!ok) atomicCAS(p.error, 0, static_cast<int>(b) + 1);
}

// True when job j's kept values are one range of k (rows == 1, or whole rows packed in the
// arena); *out then says which and where. Otherwise the general rule applies (GridOut).
template <class V>
__device__ bool MakeRangeOut(const CodecJob& j, std::uint8_t* arena, RangeOut<V>* out) {
  const std::uint64_t n = j.values;
  out->base = reinterpret_cast<V*>(arena + j.dst);
  out->first = j.first;
  out->lo = out->hi = 0;
  if (j.pitch == 0 || j.width == 0 || j.rows == 0) return true;  // nothing kept
  std::uint64_t limit;                                           // kept: 0 <= first + k < limit
  if (j.rows == 1) {
    limit = j.width < j.pitch ? j.width : j.pitch;
  } else if (j.pitch == j.width && j.dst_pitch == sizeof(V) * j.width) {
    limit = j.rows > ~0ull / j.width ? ~0ull : j.rows * j.width;
  } else {
    return false;
  }
  if (j.first >= 0) {
    const std::uint64_t f = static_cast<std::uint64_t>(j.first);
    out->hi = f >= limit ? 0 : static_cast<std::uint32_t>(limit - f < n ? limit - f : n);
  } else {
    const std::uint64_t skip = 0 - static_cast<std::uint64_t>(j.first);  // values before d = 0
    const std::uint64_t lo = skip < n ? skip : n;
    const std::uint64_t hi = limit >= n - lo ? n : lo + limit;
    out->lo = static_cast<std::uint32_t>(lo);
    out->hi = static_cast<std::uint32_t>(hi);
  }
  return true;
}

template <class V>
__device__ GridOut<V> MakeGridOut(const CodecJob& j, std::uint8_t* arena, std::uint32_t t,
                                  std::uint32_t T) {
  GridOut<V> o;
  o.arena = arena;
  o.pitch = j.pitch;
  o.width = j.width;
  o.rows = j.rows;
  o.dst_pitch = j.dst_pitch;
  if (j.pitch > T) {
    o.step_c = T;
    o.step_r = 0;
  } else {  // pitch <= T <= 1024: a 32-bit division
    const std::uint32_t p = static_cast<std::uint32_t>(j.pitch);
    o.step_c = T % p;
    o.step_r = T / p;
  }
  o.step_row = static_cast<std::uint64_t>(o.step_r) * j.dst_pitch;
  const std::int64_t d = j.first + static_cast<std::int64_t>(t);  // floor division by pitch
  if (d >= 0) {
    o.r = static_cast<std::int64_t>(static_cast<std::uint64_t>(d) / j.pitch);
    o.c = static_cast<std::uint64_t>(d) % j.pitch;
  } else {
    const std::uint64_t m = static_cast<std::uint64_t>(-(d + 1));  // -d - 1 >= 0
    o.r = -static_cast<std::int64_t>(m / j.pitch) - 1;
    o.c = j.pitch - 1 - m % j.pitch;
  }
  o.row = j.dst + static_cast<std::uint64_t>(o.r) * j.dst_pitch;
  return o;
}

// Stages the stream's table and the block's coded words (bytewise when the block is not 4-byte
// aligned) in shared memory, with two zero words after them.
__device__ void StageJob(const uint4* lut, const std::uint8_t* words, std::uint32_t count,
                         std::uint32_t* lut_words, std::uint32_t* bits) {
  const std::uint32_t t = threadIdx.x, step = blockDim.x;
  for (std::uint32_t i = t; i < kLutWords / 4; i += step) {
    reinterpret_cast<uint4*>(lut_words)[i] = lut[i];
  }
  if (reinterpret_cast<std::uintptr_t>(words) % 4 == 0) {
    const auto* w = reinterpret_cast<const std::uint32_t*>(words);
    for (std::uint32_t i = t; i < count; i += step) bits[i] = w[i];
  } else {
    for (std::uint32_t i = t; i < count; i += step) {
      const std::uint8_t* p = words + 4 * std::uint64_t{i};
      bits[i] = p[0] | p[1] << 8 | p[2] << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    }
  }
  if (t < 2) bits[count + t] = 0;  // peeks at the end read zeros
}

template <class R>
__device__ bool DecodeJobValues(const CodecJob& j, std::uint8_t* arena, BitReader& reader,
                                const std::uint16_t* lut, const std::uint8_t* raw, std::uint32_t T,
                                std::uint32_t* h) {
  using V = typename R::Value;
  const std::uint32_t t = threadIdx.x;
  RangeOut<V> range;
  if (MakeRangeOut(j, arena, &range)) {
    return DecodeSubStream<R, 4>(reader, lut, raw, t, T, j.values, range, h);
  }
  GridOut<V> grid = MakeGridOut<V>(j, arena, t, T);
  return DecodeSubStream<R, 1>(reader, lut, raw, t, T, j.values, grid, h);
}

// The row of a coded dtype (codec/split.h) picks the decode loop; false for any other dtype.
__device__ bool DecodeJobRow(std::uint32_t dtype, const CodecJob& j, std::uint8_t* arena,
                             BitReader& reader, const std::uint16_t* lut, const std::uint8_t* raw,
                             std::uint32_t T, std::uint32_t* h) {
  switch (static_cast<codec::DType>(dtype)) {
    case codec::DType::kBF16:
      return DecodeJobValues<Bf16Row>(j, arena, reader, lut, raw, T, h);
    case codec::DType::kF16:
      return DecodeJobValues<F16Row>(j, arena, reader, lut, raw, T, h);
    case codec::DType::kF8E4M3:
      return DecodeJobValues<E4M3Row>(j, arena, reader, lut, raw, T, h);
    case codec::DType::kF8E5M2:
      return DecodeJobValues<E5M2Row>(j, arena, reader, lut, raw, T, h);
    default:
      return false;
  }
}

// Raw bits per value of a coded dtype's row (0 for any other: its jobs fail in DecodeJobRow).
__device__ __forceinline__ std::uint32_t RawBitsOf(std::uint32_t dtype) {
  switch (static_cast<codec::DType>(dtype)) {
    case codec::DType::kBF16:
      return Bf16Row::kRawBits;
    case codec::DType::kF16:
      return F16Row::kRawBits;
    case codec::DType::kF8E4M3:
      return E4M3Row::kRawBits;
    case codec::DType::kF8E5M2:
      return E5M2Row::kRawBits;
    default:
      return 0;
  }
}

// The XOR of every thread's x; *word must have been zeroed before a barrier every thread passed.
// Every thread must call it; all get the result.
__device__ std::uint32_t BlockXor(std::uint32_t x, std::uint32_t* word) {
  for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xFFFFFFFFu, x, o);
  if ((threadIdx.x & 31) == 0) atomicXor(word, x);
  __syncthreads();
  return *word;
}

// The little-endian value at p (any address).
template <class V>
__device__ __forceinline__ V LoadValue(const std::uint8_t* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(V) == 0) return *reinterpret_cast<const V*>(p);
  V v = 0;
  for (std::uint32_t i = 0; i < sizeof(V); ++i) v |= static_cast<V>(V{p[i]} << (8 * i));
  return v;
}

// Lane l of a stored block (values l, l + L, ... < n, L = lane::kStoredLanes): placed by `out`
// (made for thread l of L), folded into the lane's state.
template <class V, class Out>
__device__ std::uint32_t StoredLane(const std::uint8_t* block, std::uint32_t l, std::uint32_t n,
                                    Out& out) {
  std::uint32_t h = codec::lane::Seed(l);
  for (std::uint32_t k = l; k < n; k += codec::lane::kStoredLanes) {
    const V v = LoadValue<V>(block + std::uint64_t{k} * sizeof(V));
    out.Put(k, v);
    out.Step();
    h = codec::lane::Round(h, v);
  }
  return h;
}

// A stored block's job: this thread's lanes (threadIdx.x, + blockDim.x, ...), their values placed
// by the copy's rule; returns the XOR of those lanes' finished states.
template <class V>
__device__ std::uint32_t StoredJob(const CodecJob& j, const std::uint8_t* block,
                                   std::uint8_t* arena) {
  constexpr std::uint32_t L = codec::lane::kStoredLanes;
  std::uint32_t sum = 0;
  RangeOut<V> range;
  const bool is_range = MakeRangeOut(j, arena, &range);
  for (std::uint32_t l = threadIdx.x; l < L; l += blockDim.x) {
    std::uint32_t h;
    if (is_range) {
      h = StoredLane<V>(block, l, j.values, range);
    } else {
      GridOut<V> grid = MakeGridOut<V>(j, arena, l, L);
      h = StoredLane<V>(block, l, j.values, grid);
    }
    sum ^= codec::lane::Finish(h);
  }
  return sum;
}

// A stored stream's job: its values as they are, checked against job.checksum when the stream
// is `checked`. A job whose bytes are not its values fails (uniform over the block).
__device__ void StoredJobKernel(const JobArgs& a, const CodecJob& j, const CodecJobStream& s,
                                std::uint32_t* sum_word, int bad) {
  const std::uint32_t vb = s.stored_value_bytes;
  if (std::uint64_t{j.values} * vb != j.bytes) {
    if (threadIdx.x == 0) atomicCAS(a.error, 0, bad);
    return;
  }
  if (threadIdx.x == 0) *sum_word = 0;
  __syncthreads();
  const std::uint8_t* block = a.src + j.src;
  std::uint32_t mine;
  if (vb == 4) {
    mine = StoredJob<std::uint32_t>(j, block, a.arena);
  } else if (vb == 2) {
    mine = StoredJob<std::uint16_t>(j, block, a.arena);
  } else {
    mine = StoredJob<std::uint8_t>(j, block, a.arena);
  }
  const std::uint32_t sum = BlockXor(mine, sum_word);
  if (s.checked && threadIdx.x == 0 && sum != j.checksum) atomicCAS(a.error, 0, bad);
}

__global__ void __launch_bounds__(1024, 2) JobKernel(JobArgs a) {
  extern __shared__ uint4 smem4[];
  std::uint32_t* lut_words = reinterpret_cast<std::uint32_t*>(smem4);
  std::uint32_t* scan = lut_words + kLutWords;
  std::uint32_t* bits = scan + kScanWords;
  const std::uint16_t* lut = reinterpret_cast<const std::uint16_t*>(lut_words);

  const CodecJob j = a.jobs[blockIdx.x];
  const CodecJobStream s = a.streams[j.stream];
  const int bad = static_cast<int>(a.first + blockIdx.x) + 1;
  if (s.stored_value_bytes != 0) return StoredJobKernel(a, j, s, scan + 33, bad);  // uniform
  const std::uint32_t t = threadIdx.x, T = s.sub_streams, n = j.values;
  const std::uint8_t* block = a.src + j.src;
  const std::uint64_t lengths_at = Align4Wide((std::uint64_t{n} * RawBitsOf(s.dtype) + 7) / 8);
  BlockLengths lengths{};
  const bool fits = T != 0 && T <= blockDim.x && lengths_at + 4 <= j.bytes &&
                    lengths.Read(block + lengths_at, T, s.packed_lengths);
  const std::uint64_t head = lengths_at + lengths.region;
  if (!fits || head > j.bytes || (j.bytes - head) / 4 > a.max_words) {
    if (t == 0) atomicCAS(a.error, 0, bad);  // uniform over the block: nobody reaches a sync
    return;
  }
  const std::uint32_t word_count = static_cast<std::uint32_t>((j.bytes - head) / 4);
  StageJob(a.luts + std::uint64_t{j.stream} * (kLutWords / 4), block + head, word_count, lut_words,
           bits);
  if (t == 0) scan[33] = 0;  // the lane checksum's word (the scan's barriers publish it)
  const std::uint32_t my_bits = t < T ? lengths.Of(t) : 0;
  const std::uint32_t start = BlockExclusiveScan(my_bits, scan, scan + 32);  // syncs
  const std::uint32_t total = scan[32];

  bool ok = total <= 32u * word_count;
  std::uint32_t h = codec::lane::Seed(t);
  if (ok && t < T) {
    BitReader reader(bits, start, my_bits);
    ok = DecodeJobRow(s.dtype, j, a.arena, reader, lut, block, T, &h);
  }
  if (!ok) atomicCAS(a.error, 0, bad);
  if (s.checked) {  // uniform over the block
    const std::uint32_t sum = BlockXor(t < T ? codec::lane::Finish(h) : 0, scan + 33);
    if (t == 0 && sum != j.checksum) atomicCAS(a.error, 0, bad);
  }
}

Status CudaFailed(const char* what, cudaError_t e) {
  return Status::Internal(std::string("codec decode: ") + what + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

// Sets the kernel of row R to `shared` bytes of shared memory and launches it over the stream.
template <class R>
Status LaunchDecodeKernel(const codec::StreamInfo& info, const Params& p, std::uint64_t shared,
                          cudaStream_t stream) {
  cudaError_t e =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(&DecodeKernel<R>),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (e != cudaSuccess) return CudaFailed("cudaFuncSetAttribute", e);
  DecodeKernel<R><<<dim3(info.block_count), dim3(info.sub_streams), shared, stream>>>(p);
  e = cudaGetLastError();
  return e == cudaSuccess ? Status::Ok() : CudaFailed("kernel launch", e);
}

}  // namespace

std::uint64_t CodecDecodeSharedBytes(const codec::StreamInfo& info) {
  return 4 * (kLutWords + kScanWords + info.max_block_bit_words + 2);
}

Status UploadCodecLut(const codec::StreamInfo& info, std::uint16_t* d_lut, void* cuda_stream) {
  const codec::DecodeLut lut = codec::BuildDecodeLut(info.code_lengths);
  cudaError_t e = cudaMemcpyAsync(d_lut, lut.data(), sizeof(lut), cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(cuda_stream));
  if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(cuda_stream));
  return e == cudaSuccess ? Status::Ok() : CudaFailed("cudaMemcpyAsync of the table", e);
}

Status LaunchCodecDecode(const codec::StreamInfo& info, const void* d_stream, void* d_out,
                         const std::uint16_t* d_lut, int* d_error, void* cuda_stream) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (info.block_count == 0) return Status::Ok();
  if (info.block_count > 0x7FFFFFFFu)
    return Status::InvalidArgument("codec decode: too many blocks");
  if (d_stream == nullptr || d_out == nullptr || d_error == nullptr ||
      reinterpret_cast<std::uintptr_t>(d_stream) % 8 != 0) {
    return Status::InvalidArgument("codec decode: null or unaligned device pointer");
  }
  const auto* src = static_cast<const std::uint8_t*>(d_stream);
  if (info.method == codec::Method::kStored) {
    const cudaError_t e = cudaMemcpyAsync(d_out, src + info.header_bytes, info.original_bytes,
                                          cudaMemcpyDeviceToDevice, stream);
    return e == cudaSuccess ? Status::Ok() : CudaFailed("cudaMemcpyAsync", e);
  }
  if (d_lut == nullptr || reinterpret_cast<std::uintptr_t>(d_out) % codec::DTypeSize(info.dtype) ||
      info.sub_streams % 32 != 0 || info.sub_streams > 1024) {
    return Status::InvalidArgument("codec decode: " + std::to_string(info.sub_streams) +
                                   " sub-streams (the kernel takes a multiple of 32 up to 1024)"
                                   ", or a null table or an output address not value-aligned");
  }
  int device = 0, max_shared = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return CudaFailed("shared memory query", e);
  const std::uint64_t shared = CodecDecodeSharedBytes(info);
  if (shared > static_cast<std::uint64_t>(max_shared)) {
    return Status::ResourceExhausted("codec decode: a block needs " + std::to_string(shared) +
                                     " bytes of shared memory, the device has " +
                                     std::to_string(max_shared));
  }
  const Params p{src,
                 reinterpret_cast<const std::uint64_t*>(src + codec::layout::kFixedHeaderBytes),
                 info.header_bytes,
                 info.values,
                 info.block_values,
                 reinterpret_cast<const std::uint32_t*>(d_lut),
                 static_cast<std::uint8_t*>(d_out),
                 d_error,
                 info.version > codec::layout::kU16LengthsVersion ? 1u : 0u};
  switch (info.dtype) {
    case codec::DType::kBF16:
      return LaunchDecodeKernel<Bf16Row>(info, p, shared, stream);
    case codec::DType::kF16:
      return LaunchDecodeKernel<F16Row>(info, p, shared, stream);
    case codec::DType::kF8E4M3:
      return LaunchDecodeKernel<E4M3Row>(info, p, shared, stream);
    case codec::DType::kF8E5M2:
      return LaunchDecodeKernel<E5M2Row>(info, p, shared, stream);
    default:
      return Status::InvalidArgument("codec decode: a coded " +
                                     std::string(codec::DTypeName(info.dtype)) + " stream");
  }
}

std::uint64_t CodecJobSharedBytes(std::uint64_t max_words) {
  return 4 * (kLutWords + kScanWords + max_words + 2);
}

namespace {

// One CUDA block of 256 threads per table: zero it, canonical codes on thread 0, then thread s
// writes symbol s's entries.
__global__ void BuildLutsKernel(const std::uint8_t* lengths, std::uint16_t* luts) {
  __shared__ std::uint8_t len[256];
  __shared__ std::uint16_t codes[256];
  const std::uint32_t s = threadIdx.x;
  len[s] = lengths[std::uint64_t{blockIdx.x} * 256 + s];
  std::uint16_t* table = luts + std::uint64_t{blockIdx.x} * codec::kLutEntries;
  constexpr std::uint32_t kEntries = codec::kLutEntries;
  for (std::uint32_t i = s; i < kEntries; i += blockDim.x) table[i] = 0;
  __syncthreads();
  if (s == 0) codec::lut::CanonicalCodes(len, codes);
  __syncthreads();
  const int n = len[s];  // valid lengths keep every code inside the table; this guards the rest
  if (n != 0 && n <= codec::kLutBits &&
      (std::uint32_t{codes[s]} + 1) << (codec::kLutBits - n) <= kEntries) {
    codec::lut::FillSymbol(static_cast<int>(s), n, codes[s], table);
  }
}

}  // namespace

Status BuildCodecLuts(const std::uint8_t* lengths, std::uint16_t* luts, std::uint64_t tables,
                      void* cuda_stream) {
  if (tables == 0) return Status::Ok();
  if (lengths == nullptr || luts == nullptr || tables > 0x7FFFFFFFu) {
    return Status::InvalidArgument("codec decode tables: null pointers or " +
                                   std::to_string(tables) + " tables");
  }
  BuildLutsKernel<<<dim3(static_cast<unsigned>(tables)), dim3(256), 0,
                    static_cast<cudaStream_t>(cuda_stream)>>>(lengths, luts);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::Ok() : CudaFailed("table kernel launch", e);
}

Status PrepareCodecJobs(std::uint64_t shared_bytes) {
  int device = 0, max_shared = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return CudaFailed("cudaGetDevice", e);
  e = cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess)
    return CudaFailed("cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)", e);
  if (shared_bytes > static_cast<std::uint64_t>(max_shared)) {
    return Status::ResourceExhausted(
        "codec decode: a block of this load needs " + std::to_string(shared_bytes) +
        " bytes of shared memory (its code table and coded words), the device allows " +
        std::to_string(max_shared));
  }
  // The device's limit, not this set's need: the same value for every set, so concurrent
  // decoders never lower it under each other's launches.
  e = cudaFuncSetAttribute(reinterpret_cast<const void*>(&JobKernel),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared);
  return e == cudaSuccess ? Status::Ok() : CudaFailed("cudaFuncSetAttribute", e);
}

Status LaunchCodecJobs(const CodecJobSet& set, std::uint64_t first, std::uint64_t count,
                       const void* src, void* arena, void* cuda_stream) {
  if (count == 0) return Status::Ok();
  if (first >= 0x7FFFFFFFu || count >= 0x7FFFFFFFu - first) {
    return Status::InvalidArgument("codec decode: jobs " + std::to_string(first) + " + " +
                                   std::to_string(count) + " (at most 2^31 - 2 in a set)");
  }
  if (set.jobs == nullptr || set.streams == nullptr || set.luts == nullptr ||
      set.error == nullptr || src == nullptr || arena == nullptr ||
      reinterpret_cast<std::uintptr_t>(arena) % 2 != 0 ||
      reinterpret_cast<std::uintptr_t>(set.luts) % 16 != 0) {
    return Status::InvalidArgument("codec decode: a null or unaligned device pointer");
  }
  if (set.threads == 0 || set.threads % 32 != 0 || set.threads > 1024) {
    return Status::InvalidArgument("codec decode: " + std::to_string(set.threads) +
                                   " threads a block (a multiple of 32 up to 1024)");
  }
  const JobArgs a{set.jobs + first,
                  set.streams,
                  reinterpret_cast<const uint4*>(set.luts),
                  static_cast<const std::uint8_t*>(src),
                  static_cast<std::uint8_t*>(arena),
                  set.error,
                  static_cast<std::uint32_t>(first),
                  set.max_words};
  const std::uint64_t shared = CodecJobSharedBytes(set.max_words);
  JobKernel<<<dim3(static_cast<unsigned>(count)), dim3(set.threads), shared,
              static_cast<cudaStream_t>(cuda_stream)>>>(a);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::Ok() : CudaFailed("decode kernel launch", e);
}

Status CodecDecodeError(int* d_error, std::string_view name) {
  int flag = 0;
  cudaError_t e = cudaMemcpy(&flag, d_error, sizeof(int), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaFailed("reading the error flag", e);
  if (flag == 0) return Status::Ok();
  e = cudaMemset(d_error, 0, sizeof(int));
  if (e != cudaSuccess) return CudaFailed("resetting the error flag", e);
  return Status::Corrupt(std::string(name) + ": codec stream: block " + std::to_string(flag - 1) +
                         " does not decode on the GPU (its sub-streams do not match its bits)");
}

namespace {

class DeviceMemory {  // cudaMalloc'ed bytes, freed on destruction
 public:
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  Status Allocate(std::uint64_t bytes) {
    const cudaError_t e = cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes);
    return e == cudaSuccess ? Status::Ok() : CudaFailed("cudaMalloc", e);
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

Status DecodeOnGpu(std::span<const std::uint8_t> stream, std::span<std::uint8_t> out,
                   std::string_view name) {
  HOIST_ASSIGN_OR_RETURN(codec::StreamInfo info, codec::ParseStream(stream, name));
  if (out.size() != info.original_bytes) {
    return Status::InvalidArgument(std::string(name) + ": codec stream decodes to " +
                                   std::to_string(info.original_bytes) + " bytes, not " +
                                   std::to_string(out.size()));
  }
  DeviceMemory d_stream, d_out, d_lut, d_error;
  HOIST_RETURN_IF_ERROR(d_stream.Allocate(stream.size()));
  HOIST_RETURN_IF_ERROR(d_out.Allocate(out.size()));
  HOIST_RETURN_IF_ERROR(d_lut.Allocate(sizeof(codec::DecodeLut)));
  HOIST_RETURN_IF_ERROR(d_error.Allocate(sizeof(int)));
  cudaError_t e = cudaMemcpy(d_stream.get(), stream.data(), stream.size(), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemset(d_error.get(), 0, sizeof(int));
  if (e != cudaSuccess) return CudaFailed("copying the stream", e);
  auto* lut = static_cast<std::uint16_t*>(d_lut.get());
  auto* error = static_cast<int*>(d_error.get());
  HOIST_RETURN_IF_ERROR(UploadCodecLut(info, lut, nullptr));
  HOIST_RETURN_IF_ERROR(LaunchCodecDecode(info, d_stream.get(), d_out.get(), lut, error, nullptr));
  e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return CudaFailed("decode kernel", e);
  HOIST_RETURN_IF_ERROR(CodecDecodeError(error, name));
  e = cudaMemcpy(out.data(), d_out.get(), out.size(), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaFailed("copying the result back", e);
  if (codec::Xxh64(out.data(), out.size()) != info.content_checksum) {
    return Status::Corrupt(std::string(name) +
                           ": codec stream: byte 32: GPU-decoded bytes fail the tensor checksum");
  }
  return Status::Ok();
}

Result<std::vector<codec::DecodeLut>> BuildCodecLutsOnGpu(
    std::span<const codec::CodeLengths> lengths) {
  std::vector<codec::DecodeLut> tables(lengths.size());
  if (lengths.empty()) return tables;
  DeviceMemory d_lengths, d_luts;
  HOIST_RETURN_IF_ERROR(d_lengths.Allocate(lengths.size_bytes()));
  HOIST_RETURN_IF_ERROR(d_luts.Allocate(tables.size() * sizeof(codec::DecodeLut)));
  cudaError_t e =
      cudaMemcpy(d_lengths.get(), lengths.data(), lengths.size_bytes(), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return CudaFailed("copying the code lengths", e);
  HOIST_RETURN_IF_ERROR(BuildCodecLuts(static_cast<const std::uint8_t*>(d_lengths.get()),
                                       static_cast<std::uint16_t*>(d_luts.get()), tables.size(),
                                       nullptr));
  e = cudaMemcpy(tables.data(), d_luts.get(), tables.size() * sizeof(codec::DecodeLut),
                 cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaFailed("copying the tables back", e);
  return tables;
}

}  // namespace hoist::transport::cuda
