// The seeded draw from a row without top-k, top-p or min-p: the twin of the core's
// envelope_draw.cpp (FilteredRow::sample), the envelope built by the block, the proposals on one
// thread.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "logit_row.cuh"

namespace spec_edge {
namespace cuda {
namespace {

// The seeded draw from a softmax row (docs/OPS.md; FilteredRow::sample): rejection from the
// envelope of block maxima. Checks the row first; false on a fault.
template <class T>
__device__ bool envelope_draw(const LogitRow<T>& r, float inv_temp, DrawStream uniforms,
                              const Scratch& s, int64_t row, RowFault* fault, int64_t* token,
                              Shared& sh) {
  const int64_t n = r.n, blocks = (n + kBlock - 1) / kBlock;
  const int64_t supers = (blocks + kEnvelopeRun - 1) / kEnvelopeRun;
  float ymax;
  if (!check_logits(r, 0, row, fault, &ymax, sh)) return false;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t blk = warp; blk < blocks; blk += kWarps) {
    const int64_t j = blk * kBlock + lane;
    float m = j < n ? r.y(j) : -kInf;
    if (j + 32 < n) m = max_ignoring_nan(m, r.y(j + 32));
    for (int o = 16; o > 0; o /= 2) m = max_ignoring_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) s.block_max[blk] = m;
  }
  __syncthreads();
  int64_t top = kNone;
  for (int64_t blk = threadIdx.x; blk < blocks; blk += kThreads)
    if (s.block_max[blk] == ymax) top = min(top, blk);
  top = block_min(top, sh);
  const ExpRow<T> e{r, ymax, inv_temp};
  const float a = inv_temp * kBoundScale;
  for (int64_t blk = threadIdx.x; blk < blocks; blk += kThreads) {
    const float c = exp_upper_bound(s.block_max[blk] - ymax, a);
    s.block_c[blk] = c;
    const int64_t count = blk == blocks - 1 ? n - blk * kBlock : kBlock;
    s.weight[blk] = static_cast<double>(count) * static_cast<double>(c);
  }
  __syncthreads();
  const int64_t top_base = top * kBlock, top_n = min(kBlock, n - top_base);
  if (threadIdx.x == 0) {
    double top_mass = 0.0;
    for (int64_t j = 0; j < top_n; ++j) top_mass += static_cast<double>(e(top_base + j));
    s.weight[top] = top_mass;
  }
  __syncthreads();
  for (int64_t sb = threadIdx.x; sb < supers; sb += kThreads) {
    double run = 0.0;
    for (int64_t blk = sb * kEnvelopeRun; blk < min(blocks, (sb + 1) * kEnvelopeRun); ++blk) run += s.weight[blk];
    s.run[sb] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    s.super_total[0] = 0.0;
    for (int64_t sb = 0; sb < supers; ++sb) s.super_total[sb + 1] = s.super_total[sb] + s.run[sb];
    sh.token = -1;
    for (int p = 0; p < kMaxProposals && sh.token < 0; ++p) {
      const double u = uniforms(), v = uniforms();
      const double target = u * s.super_total[supers];
      // envelope_block: binary search over the run totals, then a walk of one run.
      int64_t lo = 0, hi = supers - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (s.super_total[mid + 1] > target) hi = mid;
        else lo = mid + 1;
      }
      const int64_t end = min(blocks, (lo + 1) * kEnvelopeRun);
      double run = 0.0;
      int64_t b = lo * kEnvelopeRun;
      for (; b < end - 1; ++b) {
        const double next = run + s.weight[b];
        if (s.super_total[lo] + next > target) break;
        run = next;
      }
      const double offset = target - (s.super_total[lo] + run);
      const int64_t base = b * kBlock, m = min(kBlock, n - base);
      if (b == top) {
        double cum = 0.0;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          const float num = e(base + j);
          if (!(num > 0.0f)) continue;
          cum += static_cast<double>(num);
          last = base + j;
          if (cum > offset) break;
        }
        sh.token = last;
        break;
      }
      const float c = s.block_c[b];
      const double slot = fmin(fmax(0.0, offset / static_cast<double>(c)), static_cast<double>(m - 1));
      const int64_t j = base + static_cast<int64_t>(slot);
      if (v * static_cast<double>(c) < static_cast<double>(e(j))) sh.token = j;
    }
    sh.flag = sh.token < 0;
    sh.d = sh.flag ? uniforms() : 0.0;  // the fallback's uniform
  }
  __syncthreads();
  const bool fallback = sh.flag != 0;
  const double u_fallback = sh.d;
  __syncthreads();
  if (fallback) {  // the exact inverse CDF after kMaxProposals rejections
    const double P = block_mass(n, e, s.sums_p, sh);
    if (threadIdx.x == 0) sh.token = inverse_cdf(n, e, s.sums_p, u_fallback * P);
    __syncthreads();
  }
  *token = sh.token;
  __syncthreads();
  return true;
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
