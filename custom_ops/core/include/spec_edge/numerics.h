// The reductions and the exp approximation that define every op's bits.
//
// All paths (scalar, NEON, AVX2, CUDA) must compute exactly these operations in exactly this
// order, with no FMA contraction (the core builds with -ffp-contract=off), so that the same
// inputs and seed give the same tokens everywhere.
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

inline float fold_block(float* s) {
  for (int64_t h = kBlock / 2; h >= 1; h /= 2)
    for (int64_t j = 0; j < h; ++j) s[j] = s[j] + s[j + h];
  return s[0];
}

// e^d for d <= 0 (d may be -inf): Cephes-style range reduction and a degree-6 polynomial,
// relative error below 2e-7; exactly 0 below -87.
inline float exp_nonpositive(float d) {
  if (!(d >= -87.0f)) return 0.0f;
  const float n = std::floor(d * 1.44269504088896341f + 0.5f);
  float r = d - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r;
  p = p + 1.0f;
  const uint32_t scale = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * bits_to_float(scale);
}

}  // namespace spec_edge
