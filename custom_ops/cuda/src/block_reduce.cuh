// Block-wide reductions (every thread of a sequence's block calls them), in the orders of the
// core's block_reduce.h: maxima and first indices, the block-ordered mass and its inverse CDF,
// and the compaction of a predicate's hits in index order.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "launch.cuh"
#include "spec_edge/detail/block_reduce.h"

namespace spec_edge {
namespace cuda {
namespace {

// ---- block-wide reductions (every thread of the block calls them) -------------------------------

struct Shared {
  float f[kWarps];
  int64_t i[kWarps];
  int count[kWarps];
  unsigned hist[256];
  float sample[kTopPGuessSample], sample_exp[kTopPGuessSample];  // top-p's guess
  uint32_t prefix;
  int64_t above;
  double d;
  int64_t token;
  int flag;
};

__device__ inline float max_ignoring_nan(float m, float v) { return v > m ? v : m; }

__device__ float block_max(float v, Shared& sh) {
  for (int o = 16; o > 0; o /= 2) v = max_ignoring_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.f[warp] = v;
  __syncthreads();
  float r = -kInf;
  for (int w = 0; w < kWarps; ++w) r = max_ignoring_nan(r, sh.f[w]);
  __syncthreads();
  return r;
}

__device__ int64_t block_min(int64_t v, Shared& sh) {
  for (int o = 16; o > 0; o /= 2) v = min(v, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, v, o)));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.i[warp] = v;
  __syncthreads();
  int64_t r = kNone;
  for (int w = 0; w < kWarps; ++w) r = min(r, sh.i[w]);
  __syncthreads();
  return r;
}

// The first index of the maximum (NaN ignored), kNone for a row without a non-NaN value.
template <class Value>
__device__ int64_t block_argmax(int64_t n, const Value& value, Shared& sh) {
  float best = -kInf;
  int64_t at = kNone;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = value(j);
    if (v > best || (v == best && at == kNone)) {  // strided: the first hit is this thread's lowest
      best = v;
      at = j;
    }
  }
  const float m = block_max(best, sh);
  return block_min(best == m ? at : kNone, sh);
}

// Block sums of `fill` over [0, n) (halving fold per 64 values) into `sums`, and their total
// added left to right in double.
template <class Fill>
__device__ double block_mass(int64_t n, const Fill& fill, float* sums, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t blk = warp; blk < blocks; blk += kWarps) {
    const int64_t j = blk * kBlock + lane;
    float s = (j < n ? fill(j) : 0.0f) + (j + 32 < n ? fill(j + 32) : 0.0f);
    for (int h = 16; h >= 1; h /= 2) s = s + __shfl_down_sync(0xffffffffu, s, h);
    if (lane == 0) sums[blk] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int64_t blk = 0; blk < blocks; ++blk) total += static_cast<double>(sums[blk]);
    sh.d = total;
  }
  __syncthreads();
  const double total = sh.d;
  __syncthreads();
  return total;
}

// Inverse CDF over the block sums of block_mass, on one thread: the core's block_scan.
template <class Value>
__device__ int64_t inverse_cdf(int64_t n, const Value& value, const float* sums, double target) {
  using Block = float[kBlock];
  const auto fill = [&](int64_t base, int64_t m, Block& block) {
    for (int64_t j = 0; j < kBlock; ++j) block[j] = j < m ? value(base + j) : 0.0f;
  };
  const auto fold = [](const Block& block) { return fold_block(block); };
  return spec_edge::block_scan<Block>(n, fill, fold, target, sums);
}

// Calls out(slot, j) for the j < n where keep(j) holds, slots in index order; returns the count.
template <class Keep, class Out>
__device__ int64_t compact(int64_t n, const Keep& keep, const Out& out, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t total = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t j = base + threadIdx.x;
    const bool kept = j < n && keep(j);
    const unsigned ballot = __ballot_sync(0xffffffffu, kept);
    if (lane == 0) sh.count[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = total, tile = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? sh.count[w] : 0;
      tile += sh.count[w];
    }
    if (kept) out(before + __popc(ballot & ((1u << lane) - 1u)), j);
    total += tile;
    __syncthreads();
  }
  return total;
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
