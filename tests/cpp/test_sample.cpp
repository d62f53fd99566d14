#include <cmath>
#include <algorithm>
#include <limits>
#include <random>

#include "filters.h"
#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/numerics.h"
#include "spec_edge/philox.h"
#include "test_helpers.h"

namespace spec_edge {
namespace {

using namespace spec_edge::testing;

SampleParams params(const std::vector<float>& T, const int64_t* seed, const int64_t* offset) {
  SampleParams p;
  p.temperature = {T.data(), static_cast<int64_t>(T.size())};
  p.seed = {seed, 1};
  p.offset = {offset, 1};
  return p;
}

// sample is reference_draw on the row's scaled logits with the Philox draws 0, 1, 2, ... of its
// row.
TEST(Sample, IsTheReferenceDrawWithPhiloxUniforms) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t V : {1, 7, 64, 65, 1000, 5000}) {  // 5000: three runs of 32 blocks
    const int64_t B = 12;
    std::vector<float> logits(B * V);
    for (auto& x : logits) x = normal(rng);
    if (V > 1)
      for (int64_t b = 0; b < B; b += 3) logits[b * V + (b % V)] = -INFINITY;  // some masked tokens
    std::vector<float> T;
    for (int64_t b = 0; b < B; ++b) T.push_back(b % 4 == 0 ? 0.0f : 0.4f * (b % 4));
    const int64_t seed = 77, offset = 5;
    std::vector<int64_t> drawn(B);
    ASSERT_TRUE(sample(rows(logits, B, 1, V), params(T, &seed, &offset), drawn.data()).is_ok());
    for (int64_t b = 0; b < B; ++b) {
      const float* x = &logits[b * V];
      if (T[b] > 0) {
        uint64_t draw = 0;
        const auto next = [&] { return philox_uniform(seed, offset, b, draw++); };
        EXPECT_EQ(drawn[b], reference_draw(std::vector<float>(x, x + V), T[b], next))
            << "b=" << b << " V=" << V;
      } else {
        EXPECT_EQ(drawn[b], std::max_element(x, x + V) - x);
      }
      EXPECT_NE(x[drawn[b]], -INFINITY);
    }
  }
}

// The rejection step and its fallback: on rows where most proposals are rejected (one logit
// far above the rest of its block, at a fraction of a power of two where the bound is also
// loosest), sample still matches the definition, including rows that reach the exact fallback.
TEST(Sample, RejectionsAndTheFallbackFollowTheDefinition) {
  const int64_t V = 200, B = 64;
  // d / ln 2 with fractional part about 0.53 maximizes bound / exp (about 1.0615).
  std::vector<float> logits(B * V);
  std::mt19937 rng(4);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < V; ++j)
      logits[b * V + j] = j == 0 ? 0.0f : -0.6931472f * (static_cast<float>(rng() % 8) + 0.53f);
  const std::vector<float> T(1, 1.0f);
  int rejected = 0;
  for (int64_t offset = 0; offset < 40; ++offset) {
    const int64_t seed = 3;
    std::vector<int64_t> drawn(B);
    SampleParams p;
    p.temperature = {T.data(), 1};
    p.seed = {&seed, 1};
    p.offset = {&offset, 1};
    ASSERT_TRUE(sample(rows(logits, B, 1, V), p, drawn.data()).is_ok());
    for (int64_t b = 0; b < B; ++b) {
      std::vector<float> d(logits.begin() + b * V, logits.begin() + (b + 1) * V);
      uint64_t draw = 0;
      const auto next = [&] { return philox_uniform(seed, offset, b, draw++); };
      ASSERT_EQ(drawn[b], reference_draw(d, 1.0f, next)) << "b=" << b << " offset=" << offset;
      rejected += draw > 2;
    }
  }
  EXPECT_GT(rejected, 0);
  // The fallback (after 0, 1 or 2 rejected proposals here; 1024 in the ops), on every path.
  for (const char* isa : {"scalar", "sse2", "avx2", "avx512", "neon"}) {
    const RowKernels* k = row_kernels_for(isa, DType::kFloat32);
    if (k == nullptr) continue;
    for (int max_proposals : {0, 1, 2})
      for (int64_t b = 0; b < B; ++b) {
        std::vector<float> d(logits.begin() + b * V, logits.begin() + (b + 1) * V);
        RowSampling rs;
        FilteredRow row;
        ASSERT_TRUE(row.build(*k, d.data(), V, rs, {}, {"logits", b, -1}, RowUse::kDraw).is_ok());
        DrawStream stream{5, static_cast<uint64_t>(b), 0, philox_uniform(5, b, 0, 0), 1};
        uint64_t draw = 0;
        const auto next = [&] { return philox_uniform(5, b, 0, draw++); };
        ASSERT_EQ(row.sample(*k, stream, max_proposals), reference_draw(d, 1.0f, next, max_proposals))
            << isa << " b=" << b << " max_proposals=" << max_proposals;
      }
  }
}

TEST(Sample, BadInput) {
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f};
  const int64_t seed = 0, offset = 0;
  int64_t out[2];
  expect_error(sample(rows(logits, 2, 1, 2), params({-1.0f}, &seed, &offset), out),
               "temperature[0] = -1: expected a finite value >= 0");
  expect_error(sample(rows(logits, 2, 1, 2), params({1.0f, 1.0f, 1.0f}, &seed, &offset), out),
               "temperature: expected one value or one per batch row (B=2), got 3");
  expect_error(sample(rows(logits, 1, 2, 2), params({1.0f}, &seed, &offset), out),
               "logits: expected one row per batch entry, got 2");
  std::vector<float> bad = logits;
  bad[3] = std::nanf("");
  expect_error(sample(rows(bad, 2, 1, 2), params({1.0f}, &seed, &offset), out),
               "logits[1, 1] = nan: logits must not be NaN or +inf");
  expect_error(sample(rows(bad, 2, 1, 2), params({0.0f}, &seed, &offset), out), "logits[1, 1] is NaN");
  std::vector<float> masked = {-INFINITY, -INFINITY, 0.0f, 1.0f};
  expect_error(sample(rows(masked, 2, 1, 2), params({1.0f}, &seed, &offset), out),
               "logits[0] has no finite logit");
}

}  // namespace
}  // namespace spec_edge
