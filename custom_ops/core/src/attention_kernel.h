// The body of spec_edge::attention, compiled once per ISA (attention.cpp: the baseline,
// attention_avx2.cpp: -mavx2, attention_avx512.cpp: -mavx512vl). Loops are written so the
// compiler vectorizes them without reassociating anything: every ISA computes the same
// operations in the same order (the core builds with -ffp-contract=off), so the bits match.
//
// The work is arranged around the bandwidth bound: the query heads that share a KV head and all
// the rows of a step are computed together, a block of cache positions at a time, so each block
// of keys and values is read from memory once per call and then from L1 for every query. The
// arithmetic of each output is the one attention.h states, whatever the arrangement.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "spec_edge/attention.h"
#include "spec_edge/numerics.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace spec_edge {

template <class C>  // the caches' element: float or Half
using AttendFn = void (*)(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache,
                          int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end);

// One ISA's build of the kernel, for each cache type.
struct AttendKernels {
  AttendFn<float> f32;
  AttendFn<Half> f16;
};

// The kernels of the active ISA (dispatch.cpp).
const AttendKernels& attention_kernels();

template <class C>
AttendFn<C> attention_kernel() {
  if constexpr (std::is_same_v<C, float>) return attention_kernels().f32;
  else return attention_kernels().f16;
}

namespace {

// At most this many queries (rows x query heads of one KV head) are computed together; more
// take further passes over the caches.
constexpr int64_t kAttentionQueries = 64;

// Registers for tiles: 32 of 256 bits with AVX-512 (F8 in ymm0-31), 16 with AVX2 or NEON (32 of
// 128 bits), 8 with SSE2 (16 of 128 bits). The tiles change no operation of any output.
#if defined(__AVX512VL__)
constexpr int64_t kMaxWeighQueries = 4;
#elif defined(__x86_64__) && !defined(__AVX__)
constexpr int64_t kMaxWeighQueries = 1;
#else
constexpr int64_t kMaxWeighQueries = 2;
#endif

// The NaN every NaN output is (the default quiet NaN, positive).
const float kCanonicalNaN = bits_to_float(0x7fc00000u);

// Eight float lanes on every ISA (two 128-bit registers on SSE2 and NEON, one on AVX2).
typedef float F8 __attribute__((vector_size(32)));

inline F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Eight halves as floats, exactly: F16C, NEON's conversion or the scalar one give the same
// floats, so 16-bit caches keep every path's bits equal.
inline F8 load8(const Half* p) {
#if defined(__F16C__)
  const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  F8 v;
  std::memcpy(&v, &x, sizeof v);
  return v;
#elif defined(__aarch64__)
  typedef __fp16 H8 __attribute__((vector_size(16)));
  H8 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, F8);
#else
  F8 v;
  for (int l = 0; l < 8; ++l) v[l] = to_float(p[l]);
  return v;
#endif
}

inline void store8(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }

// [a0 + a1, a2 + a3, b0 + b1, b2 + b3, a4 + a5, a6 + a7, b4 + b5, b6 + b7]
inline F8 pair_sums(F8 a, F8 b) {
  return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) +
         __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
}

// The lane sums of eight accumulators, each ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7)):
// the pairwise combination of dot8, eight at a time.
inline F8 combine8(const F8* s) {
  const F8 lo = pair_sums(pair_sums(s[0], s[1]), pair_sums(s[2], s[3]));
  const F8 hi = pair_sums(pair_sums(s[4], s[5]), pair_sums(s[6], s[7]));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(lo, hi, 4, 5, 6, 7, 12, 13, 14, 15);
}

// q . k: lane l sums q[d] * k[d] over d = l mod 8 in order; lanes combined pairwise.
template <class C>
inline float dot8(const float* q, const C* k, int64_t D) {
  F8 s = {};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) s += load8(q + d) * load8(k + d);
  float t[8];
  std::memcpy(t, &s, sizeof t);
  for (int l = 0; d < D; ++d, ++l) t[l] += q[d] * to_float(k[d]);
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// The queries of one KV head computed together: query r is row rows[r] at position
// start_pos + rows[r] and reads positions 0..n[r] - 1.
struct QueryGroup {
  int64_t count = 0;
  const float* q[kAttentionQueries];
  float* out[kAttentionQueries];
  int64_t n[kAttentionQueries];
};

// scores[q][j] = dot8(x_q, k_j) * scale for j in [j0, j1) and Q queries x_q (rows of `scores`
// ld apart), D a multiple of 8: Q queries against four keys at a time, 4Q independent chains,
// each key loaded once for the Q queries.
template <int Q, class C>
inline void score_tile(const float* const* x, const C* k, int64_t k_stride, int64_t D, float scale,
                       int64_t j0, int64_t j1, float* scores, int64_t ld) {
  constexpr int kAcc = Q * 4 < 8 ? 8 : Q * 4;
  const F8 scale8 = F8{} + scale;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const C* kj = k + j * k_stride;
    F8 acc[kAcc] = {};
    for (int64_t d = 0; d < D; d += 8) {
      F8 xq[Q];
      for (int q = 0; q < Q; ++q) xq[q] = load8(x[q] + d);
      for (int key = 0; key < 4; ++key) {
        const F8 y = load8(kj + key * k_stride + d);
        for (int q = 0; q < Q; ++q) acc[4 * q + key] += xq[q] * y;
      }
    }
    float t[kAcc];
    for (int c = 0; c < kAcc; c += 8) {
      const F8 sums = combine8(acc + c) * scale8;
      std::memcpy(t + c, &sums, sizeof sums);
    }
    for (int q = 0; q < Q; ++q) std::memcpy(scores + q * ld + j, t + 4 * q, 4 * sizeof(float));
  }
  for (; j < j1; ++j)
    for (int q = 0; q < Q; ++q) scores[q * ld + j] = dot8(x[q], k + j * k_stride, D) * scale;
}

// scores[r][j] = dot8(q_r, k_j) * scale for j in [j0, j1) and every query r whose n[r] > j0
// (positions from n[r] to j1 are computed too, and never used): four queries at a time, then
// two, then one, so each block of keys is read from memory once and then from L1.
template <class C>
inline void score_block(const QueryGroup& g, const C* k, int64_t k_stride, int64_t D, float scale,
                        int64_t j0, int64_t j1, float* scores, int64_t ld) {
  int64_t r = 0;
  if (D % 8 == 0) {
    for (; r + 4 <= g.count; r += 4)
      if (g.n[r + 3] > j0) score_tile<4>(g.q + r, k, k_stride, D, scale, j0, j1, scores + r * ld, ld);
    for (; r + 2 <= g.count; r += 2)
      if (g.n[r + 1] > j0) score_tile<2>(g.q + r, k, k_stride, D, scale, j0, j1, scores + r * ld, ld);
    for (; r < g.count; ++r)
      if (g.n[r] > j0) score_tile<1>(g.q + r, k, k_stride, D, scale, j0, j1, scores + r * ld, ld);
  }
  for (; r < g.count; ++r)
    if (g.n[r] > j0)
      for (int64_t j = j0; j < j1; ++j) scores[r * ld + j] = dot8(g.q[r], k + j * k_stride, D) * scale;
}

// a_q[d..d + 32) += p_q[j] * v_j[d..d + 32) for j in [j0, end) and Q queries at once, each lane's
// sum in position order: 4Q independent chains sharing the values' loads.
template <int Q, class C>
inline void weigh32(const C* v, int64_t v_stride, int64_t j0, int64_t end, const float* p, int64_t ld,
                    float* a, int64_t D) {
  F8 x[Q][4];
  for (int q = 0; q < Q; ++q)
    for (int c = 0; c < 4; ++c) x[q][c] = load8(a + q * D + 8 * c);
  for (int64_t j = j0; j < end; ++j) {
    const C* vj = v + j * v_stride;
    F8 w[Q];
    for (int q = 0; q < Q; ++q) w[q] = F8{} + p[q * ld + j];
    for (int c = 0; c < 4; ++c) {
      const F8 value = load8(vj + 8 * c);
      for (int q = 0; q < Q; ++q) x[q][c] += w[q] * value;
    }
  }
  for (int q = 0; q < Q; ++q)
    for (int c = 0; c < 4; ++c) store8(a + q * D + 8 * c, x[q][c]);
}

// acc[r][d] += p_r[j] * v_j[d] for j in [j0, min(j1, n[r])): each dim's sum runs in position order
// across blocks, as if in one loop. Thirty-two dims at a time (up to kMaxWeighQueries queries
// together where they read the same positions), then eight, then one by one.
template <class C>
inline void weigh_block(const QueryGroup& g, const C* v, int64_t v_stride, int64_t D, int64_t j0,
                        int64_t j1, const float* probs, int64_t ld, float* acc) {
  for (int64_t r = 0; r < g.count;) {
    const int64_t end = std::min(j1, g.n[r]);
    int64_t same = 1;  // queries from r on that read the same positions
    while (same < kMaxWeighQueries && r + same < g.count && g.n[r + same] == g.n[r]) ++same;
    const int64_t Q = same == 3 ? 2 : same;
    const float* p = probs + r * ld;
    float* a = acc + r * D;
    int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
      if (Q == 4) weigh32<4>(v + d, v_stride, j0, end, p, ld, a + d, D);
      else if (Q == 2) weigh32<2>(v + d, v_stride, j0, end, p, ld, a + d, D);
      else weigh32<1>(v + d, v_stride, j0, end, p, ld, a + d, D);
    }
    for (int64_t q = 0; q < Q; ++q, p += ld, a += D) {
      for (int64_t e = d; e + 8 <= D; e += 8) {
        F8 s = load8(a + e);
        for (int64_t j = j0; j < end; ++j) s += (F8{} + p[j]) * load8(v + j * v_stride + e);
        store8(a + e, s);
      }
      for (int64_t e = D / 8 * 8; e < D; ++e) {
        float s = a[e];
        for (int64_t j = j0; j < end; ++j) s += p[j] * to_float(v[j * v_stride + e]);
        a[e] = s;
      }
    }
    r += Q;
  }
}

// For L queries: p_j = exp_nonpositive(s_j - max s) in place over s[l][0..n[l]), and mass[l] =
// sum_j p_j in position order. The L queries' max and sum chains run interleaved: the same
// operations per query as one at a time, without waiting on one chain's latency.
template <int L>
inline void softmax_weights(float* const* s, const int64_t* n, float* mass) {
  int64_t common = n[0];
  for (int l = 1; l < L; ++l) common = std::min(common, n[l]);
  float m[L], sum[L] = {};
  for (int l = 0; l < L; ++l) m[l] = s[l][0];
  for (int64_t j = 1; j < common; ++j)
    for (int l = 0; l < L; ++l) m[l] = s[l][j] > m[l] ? s[l][j] : m[l];
  for (int l = 0; l < L; ++l) {
    for (int64_t j = common; j < n[l]; ++j) m[l] = s[l][j] > m[l] ? s[l][j] : m[l];
    for (int64_t j = 0; j < n[l]; ++j) s[l][j] = exp_nonpositive(s[l][j] - m[l]);
  }
  for (int64_t j = 0; j < common; ++j)
    for (int l = 0; l < L; ++l) sum[l] += s[l][j];
  for (int l = 0; l < L; ++l) {
    for (int64_t j = common; j < n[l]; ++j) sum[l] += s[l][j];
    mass[l] = sum[l];
  }
}

// Cache positions per block: about 16 KiB of keys (and then of values), a multiple of four.
inline int64_t positions_per_block(int64_t D) { return std::max<int64_t>(4, 4096 / D / 4 * 4); }

// One group of queries over one KV head's caches (k, v: position 0 of that head).
template <class C>
inline void attend_group(const QueryGroup& g, const C* k, int64_t k_stride, const C* v,
                         int64_t v_stride, int64_t D, float scale) {
  thread_local std::vector<float> scores, acc;
  const int64_t n_max = g.n[g.count - 1], block = positions_per_block(D);
  scores.resize(static_cast<size_t>(g.count * n_max));
  acc.assign(static_cast<size_t>(g.count * D), 0.0f);
  for (int64_t j0 = 0; j0 < n_max; j0 += block)
    score_block(g, k, k_stride, D, scale, j0, std::min(j0 + block, n_max), scores.data(), n_max);
  float mass[kAttentionQueries];
  float* rows[kAttentionQueries];
  for (int64_t r = 0; r < g.count; ++r) rows[r] = scores.data() + r * n_max;
  int64_t r = 0;
  for (; r + 4 <= g.count; r += 4) softmax_weights<4>(rows + r, g.n + r, mass + r);
  for (; r < g.count; ++r) softmax_weights<1>(rows + r, g.n + r, mass + r);
  for (int64_t j0 = 0; j0 < n_max; j0 += block)
    weigh_block(g, v, v_stride, D, j0, std::min(j0 + block, n_max), scores.data(), n_max, acc.data());
  for (r = 0; r < g.count; ++r) {
    const float* a = acc.data() + r * D;
    float* o = g.out[r];
    const F8 norm = F8{} + mass[r];
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) store8(o + d, load8(a + d) / norm);
    for (; d < D; ++d) o[d] = a[d] / mass[r];
    // NaN in the inputs: the sign and payload a NaN carries through depend on the operand order
    // a compiler picks for each ISA; one NaN for all keeps the paths' bits equal there too.
    for (d = 0; d < D; ++d) o[d] = o[d] == o[d] ? o[d] : kCanonicalNaN;
  }
}

// Arguments already checked by spec_edge::attention; query heads head_begin..head_end - 1. The
// heads of the range that share a KV head, with every row, form one group (several where they
// are more than kAttentionQueries).
template <class C>
void attend(const ConstHeads& q, const Heads<const C>& k_cache, const Heads<const C>& v_cache, int64_t start_pos,
            const Heads<float>& out, int64_t head_begin, int64_t head_end) {
  const int64_t D = q.dim, group = q.heads / k_cache.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int64_t b = 0; b < q.batch; ++b)
    for (int64_t h0 = head_begin; h0 < head_end;) {
      const int64_t kv = h0 / group;
      const int64_t h1 = std::min({head_end, (kv + 1) * group, h0 + kAttentionQueries});
      const int64_t rows_per_group = kAttentionQueries / (h1 - h0);
      for (int64_t i0 = 0; i0 < q.seq; i0 += rows_per_group) {
        QueryGroup g;
        for (int64_t i = i0; i < std::min(q.seq, i0 + rows_per_group); ++i)
          for (int64_t h = h0; h < h1; ++h, ++g.count) {
            g.q[g.count] = q.at(b, i, h);
            g.out[g.count] = out.at(b, i, h);
            g.n[g.count] = start_pos + i + 1;
          }
        attend_group(g, k_cache.at(b, 0, kv), k_cache.seq_stride, v_cache.at(b, 0, kv), v_cache.seq_stride, D,
                     scale);
      }
      h0 = h1;
    }
}

}  // namespace
}  // namespace spec_edge
