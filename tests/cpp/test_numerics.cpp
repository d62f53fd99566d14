#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/numerics.h"

namespace spec_edge {
namespace {

TEST(Numerics, HalfAndBFloat16Conversion) {
  EXPECT_EQ(to_float(Half{0x3c00}), 1.0f);
  EXPECT_EQ(to_float(Half{0xc000}), -2.0f);
  EXPECT_EQ(to_float(Half{0x7bff}), 65504.0f);
  EXPECT_EQ(to_float(Half{0x0001}), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(to_float(Half{0x03ff}), std::ldexp(1023.0f, -24));
  EXPECT_EQ(to_float(Half{0xfc00}), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(to_float(Half{0x7e00})));
  EXPECT_EQ(to_float(BFloat16{0x3f80}), 1.0f);
  EXPECT_EQ(to_float(BFloat16{0xc2f7}), -123.5f);
  // Every finite half round-trips through float exactly (checked by value ordering).
  float prev = -std::numeric_limits<float>::infinity();
  for (uint32_t bits = 0xfbff; bits > 0x8000; --bits) {  // negatives, most negative first
    const float v = to_float(Half{static_cast<uint16_t>(bits)});
    EXPECT_GT(v, prev);
    prev = v;
  }
}

TEST(Numerics, ExpAccuracyAgainstDouble) {
  double worst = 0;
  for (int i = 0; i <= 870000; ++i) {
    const float d = -static_cast<float>(i) * 1e-4f;
    const double exact = std::exp(static_cast<double>(d));
    const double rel = std::fabs(exp_nonpositive(d) - exact) / exact;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 2e-7) << "worst relative error " << worst;
  EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive(-87.5f), 0.0f);
  EXPECT_EQ(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
}

// exp_nonpositive(s / T) <= exp_upper_bound(s, kBoundScale / T) <= kExpBoundRatio * that: at
// T = 1 over every float near the points where the bound is tightest (s / ln 2 just below an
// integer, where 2^f and its chord meet) and a stride through the whole range (a sweep over
// all 1.1e9 floats of [-87, 0] passes too: worst ratio 1.0622), and at random temperatures.
TEST(Numerics, ExpUpperBoundBracketsExp) {
  double worst = 0.0;
  const auto check = [&](float s, float inv_temp) {
    const float e = exp_nonpositive(s * inv_temp), u = exp_upper_bound(s, inv_temp * kBoundScale);
    ASSERT_GE(u, e) << "s=" << s << " inv_temp=" << inv_temp;
    ASSERT_GT(u, 0.0f) << "s=" << s;
    if (e > 0.0f) worst = std::max(worst, static_cast<double>(u) / e);
  };
  for (uint32_t bits = float_to_bits(-0.0f); bits <= float_to_bits(-87.0f); bits += 4099)
    check(bits_to_float(bits), 1.0f);
  for (int n = 0; n <= 125; ++n) {
    const uint32_t bits = float_to_bits(static_cast<float>(-n * 0.693147180559945));
    for (int j = -3000; j <= 3000; ++j) {
      const float s = bits_to_float(bits + j);
      if (s <= 0.0f && s >= -87.0f) check(s, 1.0f);
    }
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> log_t(-4.0f, 3.0f), unit(0.0f, 1.0f);
  for (int i = 0; i < 200000; ++i) {
    const float inv_temp = 1.0f / std::exp(log_t(rng));
    check(-unit(rng) * 90.0f / inv_temp, inv_temp);
  }
  // Against double precision: the bound stays above exp itself (exp_nonpositive's own error,
  // under 2e-7, is covered by the margin).
  for (int i = 0; i <= 870000; ++i) {
    const float s = -static_cast<float>(i) * 1e-4f;
    ASSERT_GE(static_cast<double>(exp_upper_bound(s, kBoundScale)), std::exp(static_cast<double>(s)))
        << "s=" << s;
  }
  EXPECT_LE(worst, kExpBoundRatio) << "worst bound / exp " << worst;
  EXPECT_GT(worst, 1.06);  // the chord's gap is reached: the ratio constant is not loose
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_upper_bound(-inf, kBoundScale), exp_upper_bound(-87.0f, kBoundScale));
  EXPECT_EQ(exp_upper_bound(-1e30f, 1e3f * kBoundScale), exp_upper_bound(-87.0f, kBoundScale));
}

// The sampler's envelope (filters.cpp): the bound of a block's maximum bounds the numerator of
// every smaller logit of the block, computed the way the sampler computes it; that needs
// exp_nonpositive increasing up to far less than the bound's margin, which pairs of nearby
// logits probe (at T = 1 and at random temperatures), densely next to each power of two, where
// the bound's chord touches 2^u and only the margin is left.
TEST(Numerics, BoundOfTheMaximumBoundsEverySmallerNumerator) {
  std::mt19937 rng(9);
  for (int n = 0; n <= 125; ++n) {
    const uint32_t bits = float_to_bits(static_cast<float>(-n * 0.693147180559945));
    for (int j = -3000; j <= 3000; ++j) {
      const float m = bits_to_float(bits + j);
      if (!(m <= 0.0f && m >= -87.0f)) continue;
      const float bound = exp_upper_bound(m, kBoundScale);
      for (int k = 0; k < 4; ++k) {
        const float y = bits_to_float(float_to_bits(m) + (m < 0.0f ? 1 : 0) * static_cast<uint32_t>(rng() % 64));
        ASSERT_GE(bound, exp_nonpositive(y)) << "y=" << y << " m=" << m;
      }
    }
  }
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), log_t(-4.0f, 3.0f);
  for (int i = 0; i < 2000000; ++i) {
    const float inv_temp = i % 2 == 0 ? 1.0f : 1.0f / std::exp(log_t(rng));
    const float ymax = 20.0f * unit(rng) - 10.0f;
    const float m = ymax - unit(rng) * 90.0f / inv_temp;
    // y just below m (a few ulps, where monotonicity is tested) or anywhere below it
    const float y = i % 4 < 2 ? bits_to_float(float_to_bits(m) + (m > 0 ? -1 : 1) * static_cast<int>(rng() % 64))
                              : m - unit(rng) * 10.0f / inv_temp;
    if (!(y <= m)) continue;
    const float bound = exp_upper_bound(m - ymax, inv_temp * kBoundScale);
    ASSERT_GE(bound, exp_nonpositive((y - ymax) * inv_temp)) << "y=" << y << " m=" << m << " ymax=" << ymax;
  }
}

// The block-ordered mass is the exact sum to float-block precision, at any tile edge.
TEST(Numerics, ProbMassAtTileEdges) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  const RowKernels& k = reference_row_kernels(DType::kFloat32);
  for (int64_t n : {1, 2, 7, 8, 15, 16, 31, 32, 63, 64, 65, 127, 128, 129, 1000, 32000}) {
    std::vector<float> x(n);
    double exact = 0;
    for (auto& v : x) exact += (v = dist(rng));
    const MassResult r = k.prob_mass(x.data(), n, -1);
    EXPECT_TRUE(r.clean);
    EXPECT_NEAR(r.mass, exact, exact * 1e-6) << "n=" << n;
  }
}

TEST(Numerics, ScanFindsInverseCdfAndSkipsZeros) {
  const RowKernels& k = reference_row_kernels(DType::kFloat32);
  std::vector<float> x(200, 0.0f);
  x[3] = 1.0f;
  x[70] = 2.0f;
  x[199] = 1.0f;  // mass 4
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 0.0), 3);
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 0.999), 3);
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 1.0), 70);
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 2.999), 70);
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 3.0), 199);
  EXPECT_EQ(k.prob_scan(x.data(), 200, -1, 4.0), 199);  // at the top: last positive
  EXPECT_EQ(k.prob_scan(x.data(), 200, 70, 1.5), 199);  // excluded index is skipped
  std::vector<float> zeros(100, 0.0f);
  EXPECT_EQ(k.prob_scan(zeros.data(), 100, -1, 0.0), -1);
}

}  // namespace
}  // namespace spec_edge
