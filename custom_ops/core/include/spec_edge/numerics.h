// The reductions and the exp approximation that define every op's bits.
//
// All paths (scalar, NEON, AVX2, CUDA) must compute exactly these operations in exactly this
// order, with no FMA contraction (the core builds with -ffp-contract=off), so that the same
// inputs and seed give the same tokens everywhere. Functions are static: translation units
// compiled for different ISAs keep their own copies.
#pragma once

#include <cmath>
#include <cstdint>

#include "spec_edge/types.h"

namespace spec_edge {

// Row masses are sums over blocks of kBlock values. A block is summed in float by a halving
// fold (s[j] += s[j + h] for h = 32, 16, ..., 1; a short tail block is padded with zeros);
// block sums are converted to double and accumulated left to right. The inverse-CDF scan walks
// the same block sums, so its running total ends exactly at the mass it is scaled by.
constexpr int64_t kBlock = 64;

// Sum of one block s[0..kBlock) by the halving fold; `s` is left unchanged.
SPEC_EDGE_HD static inline float fold_block(const float* s) {
  float t[kBlock / 2];
  for (int64_t j = 0; j < kBlock / 2; ++j) t[j] = s[j] + s[j + kBlock / 2];
  for (int64_t h = kBlock / 4; h >= 1; h /= 2)
    for (int64_t j = 0; j < h; ++j) t[j] = t[j] + t[j + h];
  return t[0];
}

// e^d for d <= 0 (d may be -inf): n = rint(d / ln 2) by the 1.5 * 2^23 rounding trick (two
// float adds, the same on every ISA), Cody-Waite reduction, a degree-6 polynomial. Relative
// error below 2e-7; exactly 0 below -87. Branch-free, so it vectorizes.
SPEC_EDGE_HD static inline float exp_nonpositive(float d) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float x = d >= -87.0f ? d : -87.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r;
  p = p + 1.0f;
  const float scale = bits_to_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return d >= -87.0f ? p * scale : 0.0f;
}

// An upper bound of exp_nonpositive(s * inv_temp) for s = y - ymax <= 0 (s may be -inf), cheap
// enough that a pass over a row costs little more than reading it (five vector operations per
// lane): the float whose bits are trunc(t) + bias, t = max(s * a, -87 * a0), a = inv_temp * a0,
// a0 = 2^23 / ln 2 (rounded down), bias = the exponent bias plus 2^-10 * 2^23. That float is
// 2^floor(u) * (1 + frac(u)) at u = s * inv_temp / ln 2 + 2^-10; the chord 1 + f lies above 2^f
// on [0, 1], and the 2^-10 margin covers every rounding (of t, of the truncation, of
// exp_nonpositive itself: all below 3e-5 in u), so
//   exp_nonpositive(d) <= bound <= kExpBoundRatio * exp_nonpositive(d),  d = s * inv_temp,
// wherever exp_nonpositive(d) is nonzero (tested). The proposal weights of the rejection sampler
// (filters.cpp) and the bounds of a row's mass.
constexpr double kExpBoundRatio = 1.0625;
constexpr float kBoundScale = 12102203.0f;           // a0
constexpr float kBoundFloor = -87.0f * kBoundScale;  // t at d = -87, below which exp is 0
constexpr int32_t kBoundBias = (127 << 23) + 8192;
SPEC_EDGE_HD static inline float exp_upper_bound(float s, float a) {
  const float t = s * a;
  const float clamped = t > kBoundFloor ? t : kBoundFloor;
  return bits_to_float(static_cast<uint32_t>(static_cast<int32_t>(clamped) + kBoundBias));
}

}  // namespace spec_edge
