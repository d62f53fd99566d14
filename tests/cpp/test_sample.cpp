#include <cmath>
#include <algorithm>
#include <limits>
#include <random>

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

// sample is accept with K = 0 on the softmax numerators, drawing with Philox draw 0 of its row.
TEST(Sample, IsTheBonusDrawOfAcceptOnSoftmaxNumerators) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t V : {1, 7, 64, 65, 1000}) {
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
      std::vector<float> e(x, x + V);
      if (T[b] > 0) {
        const float m = *std::max_element(x, x + V);
        for (int64_t j = 0; j < V; ++j) e[j] = exp_nonpositive((x[j] - m) * (1.0f / T[b]));
        int64_t n = -1, next = -1;
        ASSERT_TRUE(accept(rows(e, 1, 1, V), nullptr, tokens({}, 1, 0),
                           uniforms({philox_uniform(seed, offset, b, 0)}, 1, 1), {&n, &next})
                        .is_ok());
        EXPECT_EQ(drawn[b], next) << "b=" << b << " V=" << V;
      } else {
        EXPECT_EQ(drawn[b], std::max_element(x, x + V) - x);
      }
      EXPECT_NE(x[drawn[b]], -INFINITY);
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
