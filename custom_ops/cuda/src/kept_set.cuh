// The explicit kept set of a row with top-k, top-p or min-p: the twin of the core's kept_set.cpp,
// the candidates found by the block (a radix select for top-k, a sorted sample for top-p's
// guess), then kept_set.h's scalar steps on one thread.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "logit_row.cuh"

namespace spec_edge {
namespace cuda {
namespace {

// ---- rows with top-k (then top-p, min-p): an explicit kept set (FilteredRow::candidates_top_k) -----

template <class T>
__device__ uint32_t scaled_key(const LogitRow<T>& r, int64_t j, float temperature) {
  return order_key(r.y(j) / temperature);
}

// The k-th largest key of the row, every token counted: select_by_weight with unit weights (the
// counts are exact either way), one 8-bit digit per pass over the row, a shared histogram.
template <class T>
__device__ uint32_t kth_largest_key(const LogitRow<T>& r, float temperature, int64_t k, Shared& sh) {
  uint32_t prefix = 0;
  int64_t above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) sh.hist[d] = 0u;
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
      const uint32_t key = scaled_key(r, j, temperature);
      if ((key & high) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (above + sh.hist[d] >= k) break;
        above += sh.hist[d];
      }
      sh.prefix = prefix | static_cast<uint32_t>(d) << shift;
      sh.above = above;
    }
    __syncthreads();
    prefix = sh.prefix;
    above = sh.above;
    __syncthreads();
  }
  return prefix;
}

// The candidates of a logit row, the tokens j where keep(j) holds, in index order: their ids,
// penalized logits, numerators and keys. Returns the count.
template <class T, class Keep>
__device__ int64_t collect_candidates(const LogitRow<T>& r, float ymax, float temp, const Keep& keep,
                                      const KeptRow& kr, Shared& sh) {
  const float inv_temp = 1.0f / temp;
  const int64_t n = compact(
      r.n, keep,
      [&](int64_t slot, int64_t j) {
        kr.id[slot] = static_cast<int32_t>(j);
        kr.y[slot] = r.y(j);
      },
      sh);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    kr.num[i] = exp_nonpositive((kr.y[i] - ymax) * inv_temp);
    kr.key[i] = order_key(kr.y[i] / temp);
  }
  __syncthreads();
  return n;
}

// FilteredRow::top_p_guess: the strided sample of the unpatched row, sorted descending by a
// bitonic sort in shared memory (ties are equal floats: any order is the core's), then
// kept_set.h's walk on one thread.
template <class T>
__device__ float top_p_guess(const LogitRow<T>& r, float ymax, float inv_temp, float top_p, Shared& sh) {
  const int64_t V = r.n, S = guess_sample_size(V, kTopPGuessSample);
  int64_t P = 1;
  while (P < S) P *= 2;
  for (int64_t i = threadIdx.x; i < P; i += kThreads) {
    const float d = i < S ? (r.raw(i * V / S) - ymax) * inv_temp : -kInf;
    sh.sample[i] = d < 0.0f ? d : 0.0f;  // std::min(0.0f, d)
  }
  for (int64_t size = 2; size <= P; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      __syncthreads();
      for (int64_t i = threadIdx.x; i < P; i += kThreads) {
        const int64_t j = i ^ stride;
        const float a = sh.sample[i], b = sh.sample[j];
        if (j > i && ((i & size) == 0 ? a < b : a > b)) {
          sh.sample[i] = b;
          sh.sample[j] = a;
        }
      }
    }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < S; i += kThreads) sh.sample_exp[i] = exp_nonpositive((sh.sample[i] - 0.0f) * 1.0f);
  __syncthreads();
  if (threadIdx.x == 0) sh.d = spec_edge::top_p_guess(sh.sample, sh.sample_exp, S, top_p);
  __syncthreads();
  const float guess = static_cast<float>(sh.d);
  __syncthreads();
  return guess;
}

// FilteredRow::candidates_by_mass: the candidates above the guess, or, when they do not carry the
// top-p mass, every token that can pass min-p. Returns the count; *Z: the row's mass (top-p).
template <class T>
__device__ int64_t candidates_by_mass(const LogitRow<T>& r, float ymax, const RowParams& rp, const KeptRow& kr,
                                      const Scratch& s, double* Z, Shared& sh) {
  const float temp = rp.temperature, inv_temp = 1.0f / temp;
  const bool top_p = rp.top_p < 1.0f;
  *Z = top_p ? block_mass(r.n, ExpRow<T>{r, ymax, inv_temp}, s.sums_p, sh) : 0.0;
  const float guesses[2] = {top_p ? top_p_guess(r, ymax, inv_temp, rp.top_p, sh) : -kInf, -kInf};
  int64_t n = 0;
  for (const float guess : guesses) {
    const float threshold = guess < rp.min_p_floor ? rp.min_p_floor : guess;  // std::max
    n = collect_candidates(
        r, ymax, temp, [&](int64_t j) { return (r.y(j) - ymax) * inv_temp >= threshold; }, kr, sh);
    if (threadIdx.x == 0)
      sh.flag = !top_p || candidate_mass(kr.num, n) >= static_cast<double>(rp.top_p) * *Z ||
                threshold <= rp.min_p_floor;
    __syncthreads();
    const bool done = sh.flag != 0;
    __syncthreads();
    if (done) break;
  }
  return n;
}

// The kept set of a logit row (FilteredRow::build with filters): the candidates (under top-k, the
// exact top-k set; else candidates_by_mass), then top-p and min-p over them (FilteredRow::finish),
// with the row's checks first; false on a fault.
template <class T>
__device__ bool build_kept(const LogitRow<T>& r, const RowParams& rp, const KeptRow& kr, const Scratch& s,
                           int tensor, int64_t row, RowFault* fault, Shared& sh) {
  float ymax;
  if (!check_logits(r, tensor, row, fault, &ymax, sh)) return false;
  int64_t n;
  double Z = 0.0;  // what top-p normalizes by: the top-k set's mass, or the row's
  if (rp.top_k > 0) {
    const float temp = rp.temperature;
    const uint32_t kth = kth_largest_key(r, temp, rp.top_k, sh);
    n = collect_candidates(r, ymax, temp, [&](int64_t j) { return scaled_key(r, j, temp) >= kth; }, kr, sh);
  } else {
    n = candidates_by_mass(r, ymax, rp, kr, s, &Z, sh);
  }
  if (threadIdx.x == 0) {
    if (rp.top_k > 0) Z = candidate_mass(kr.num, n);
    const uint32_t lowest = lowest_kept_key(kr.key, kr.num, n, rp.top_p, rp.min_p, Z, s.key_tmp, s.weight_tmp);
    int64_t w = 0;
    for (int64_t i = 0; i < n; ++i)
      if (kr.key[i] >= lowest) {
        kr.id[w] = kr.id[i];
        kr.y[w] = kr.y[i];
        kr.num[w] = kr.num[i];
        kr.key[w] = kr.key[i];
        ++w;
      }
    kr.head->n = w;
    kr.head->mass = candidate_mass(kr.num, w);
  }
  __syncthreads();
  return true;
}

// The numerator of token t in a kept set (0 outside it).
__device__ float kept_numerator(const KeptRow& kr, int64_t t) {
  int64_t lo = 0, hi = kr.head->n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (kr.id[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo < kr.head->n && kr.id[lo] == t ? kr.num[lo] : 0.0f;
}

// FilteredRow::draw on a kept set (one thread).
__device__ int64_t kept_draw(const KeptRow& kr, double target) {
  double cum = 0.0;
  int64_t last = -1;
  for (int64_t i = 0; i < kr.head->n; ++i) {
    if (!(kr.num[i] > 0.0f)) continue;
    cum += kr.num[i];
    last = kr.id[i];
    if (cum > target) return last;
  }
  return last;
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
