// The body of spec_edge::attention, compiled once per ISA (attention.cpp: the baseline,
// attention_avx2.cpp: -mavx2). Loops are written so the compiler vectorizes them without
// reassociating anything: every ISA computes the same operations in the same order (the core
// builds with -ffp-contract=off), so the bits match.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "spec_edge/attention.h"
#include "spec_edge/numerics.h"

namespace spec_edge {

using AttendFn = void (*)(const ConstHeads& q, const ConstHeads& k_cache, const ConstHeads& v_cache,
                          int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end);

// The kernel of the active ISA (dispatch.cpp).
AttendFn attention_kernel();

namespace {

// Eight float lanes on every ISA (two 128-bit registers on SSE2 and NEON, one on AVX2).
typedef float F8 __attribute__((vector_size(32)));

inline F8 load8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float combine(F8 s) {
  float t[8];
  std::memcpy(t, &s, sizeof t);
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// q . k: lane l sums q[d] * k[d] over d = l mod 8 in order; lanes combined pairwise.
inline float dot8(const float* q, const float* k, int64_t D) {
  F8 s = {};
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) s += load8(q + d) * load8(k + d);
  float t[8];
  std::memcpy(t, &s, sizeof t);
  for (int l = 0; d < D; ++d, ++l) t[l] += q[d] * k[d];
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// scores[j] = dot8(q, k_j) * scale for j < n. Four keys at a time when D is a multiple of 8:
// four independent dependency chains instead of one (the same operations per key).
inline void scores(const float* q, const ConstHeads& k_cache, int64_t b, int64_t kv, int64_t n,
                   float scale, float* out) {
  const int64_t D = k_cache.dim;
  int64_t j = 0;
  if (D % 8 == 0)
    for (; j + 4 <= n; j += 4) {
      const float* k0 = k_cache.at(b, j, kv);
      const int64_t stride = k_cache.seq_stride;
      F8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
      for (int64_t d = 0; d < D; d += 8) {
        const F8 x = load8(q + d);
        s0 += x * load8(k0 + d);
        s1 += x * load8(k0 + stride + d);
        s2 += x * load8(k0 + 2 * stride + d);
        s3 += x * load8(k0 + 3 * stride + d);
      }
      out[j] = combine(s0) * scale;
      out[j + 1] = combine(s1) * scale;
      out[j + 2] = combine(s2) * scale;
      out[j + 3] = combine(s3) * scale;
    }
  for (; j < n; ++j) out[j] = dot8(q, k_cache.at(b, j, kv), D) * scale;
}

// o[d] = (sum_j p[j] v_j[d]) / mass for d < D, each sum in position order. Thirty-two dims at a
// time in four registers (four independent chains), then eight, then one by one.
inline void weighted_sum(const float* p, const ConstHeads& v_cache, int64_t b, int64_t kv, int64_t n,
                         float mass, float* o) {
  const int64_t D = v_cache.dim;
  const F8 norm = F8{} + mass;
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t j = 0; j < n; ++j) {
      const float* v = v_cache.at(b, j, kv) + d;
      const F8 w = F8{} + p[j];
      a0 += w * load8(v);
      a1 += w * load8(v + 8);
      a2 += w * load8(v + 16);
      a3 += w * load8(v + 24);
    }
    const F8 r[4] = {a0 / norm, a1 / norm, a2 / norm, a3 / norm};
    std::memcpy(o + d, r, sizeof r);
  }
  for (; d + 8 <= D; d += 8) {
    F8 acc = {};
    for (int64_t j = 0; j < n; ++j) acc += (F8{} + p[j]) * load8(v_cache.at(b, j, kv) + d);
    const F8 r = acc / norm;
    std::memcpy(o + d, &r, sizeof r);
  }
  for (; d < D; ++d) {
    float acc = 0.0f;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * v_cache.at(b, j, kv)[d];
    o[d] = acc / mass;
  }
}

// Arguments already checked by spec_edge::attention; query heads head_begin..head_end - 1.
inline void attend(const ConstHeads& q, const ConstHeads& k_cache, const ConstHeads& v_cache,
                   int64_t start_pos, const Heads<float>& out, int64_t head_begin, int64_t head_end) {
  const int64_t D = q.dim, group = q.heads / k_cache.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  thread_local std::vector<float> weights;
  weights.resize(static_cast<size_t>(start_pos + q.seq));
  float* p = weights.data();
  for (int64_t b = 0; b < q.batch; ++b)
    for (int64_t i = 0; i < q.seq; ++i)
      for (int64_t h = head_begin; h < head_end; ++h) {
        const float* qi = q.at(b, i, h);
        const int64_t kv = h / group, n = start_pos + i + 1;
        scores(qi, k_cache, b, kv, n, scale, p);
        float m = p[0];
        for (int64_t j = 1; j < n; ++j) m = p[j] > m ? p[j] : m;
        for (int64_t j = 0; j < n; ++j) p[j] = exp_nonpositive(p[j] - m);
        float mass = 0.0f;
        for (int64_t j = 0; j < n; ++j) mass += p[j];
        weighted_sum(p, v_cache, b, kv, n, mass, out.at(b, i, h));
      }
}

}  // namespace
}  // namespace spec_edge
