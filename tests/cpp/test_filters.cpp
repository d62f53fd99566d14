// The filter rules of docs/FILTERS.md, checked against a plain sort-based statement of them on
// random rows (ties included), and the filtered draw against filter_logits' kept set.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "spec_edge/numerics.h"
#include "test_helpers.h"

namespace spec_edge {
namespace {

using namespace spec_edge::testing;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Config {
  float T;
  int64_t top_k;
  float top_p, min_p, penalty;
};

// The rules with a full sort and double-precision masses of spec_edge's own numerators.
std::vector<bool> sorted_rule(std::vector<float> y, const Config& c, const std::vector<int64_t>& prev) {
  const int64_t V = static_cast<int64_t>(y.size());
  std::vector<int64_t> ids(prev);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int64_t id : ids)
    if (id >= 0) y[id] = y[id] < 0 ? y[id] * c.penalty : y[id] / c.penalty;
  std::vector<float> s(V);
  for (int64_t j = 0; j < V; ++j) s[j] = y[j] / c.T;
  std::vector<bool> keep(V, true);
  if (c.top_k > 0) {
    std::vector<float> sorted(s);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (int64_t j = 0; j < V; ++j) keep[j] = s[j] >= sorted[c.top_k - 1];
  }
  float ymax = -kInf;
  for (int64_t j = 0; j < V; ++j) ymax = std::max(ymax, y[j]);
  std::vector<double> e(V);
  double Z = 0;
  for (int64_t j = 0; j < V; ++j) {
    e[j] = keep[j] ? exp_nonpositive((y[j] - ymax) * (1.0f / c.T)) : 0.0;
    Z += e[j];
  }
  if (c.top_p < 1.0f) {
    std::vector<bool> next(keep);
    for (int64_t j = 0; j < V; ++j) {
      if (!keep[j]) continue;
      double above = 0;
      for (int64_t i = 0; i < V; ++i)
        if (keep[i] && s[i] > s[j]) above += e[i];
      next[j] = above < c.top_p * Z;
    }
    keep = next;
  }
  if (c.min_p > 0.0f) {
    float worst = -kInf;
    for (int64_t j = 0; j < V; ++j)
      if (keep[j] && e[j] < c.min_p) worst = std::max(worst, s[j]);
    for (int64_t j = 0; j < V; ++j) keep[j] = keep[j] && s[j] > worst;
  }
  return keep;
}

TEST(Filters, KeptSetsFollowTheSortedStatementOfTheRules) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const Config configs[] = {{0.8f, 5, 1.0f, 0.0f, 1.0f},  {1.0f, 0, 0.7f, 0.0f, 1.0f},
                            {0.6f, 0, 1.0f, 0.1f, 1.0f},  {1.3f, 12, 0.9f, 0.05f, 1.4f},
                            {0.9f, 0, 0.5f, 0.02f, 0.7f}, {1.0f, 3, 0.3f, 0.0f, 1.2f}};
  int64_t compared = 0;
  for (int64_t V : {7, 64, 65, 300, 1000}) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> x(V);
      for (auto& v : x) v = rep % 3 == 0 ? std::round(normal(rng)) : normal(rng);  // ties too
      std::vector<int64_t> prev = {static_cast<int64_t>(rng() % V), -1, static_cast<int64_t>(rng() % V)};
      prev.push_back(prev[0]);
      for (const Config& c : configs) {
        const int64_t k = std::min<int64_t>(c.top_k, V), L = static_cast<int64_t>(prev.size());
        Filters f;
        f.top_k = {&k, 1};
        f.top_p = {&c.top_p, 1};
        f.min_p = {&c.min_p, 1};
        f.repetition_penalty = {&c.penalty, 1};
        f.prev_tokens = Tokens{prev.data(), 1, L, 0, 1};
        std::vector<float> out(V);
        ASSERT_TRUE(filter_logits(rows(x, 1, 1, V), {&c.T, 1}, f, out.data(), V).is_ok());
        Config ck = c;
        ck.top_k = k;
        const std::vector<bool> want = sorted_rule(x, ck, prev);
        for (int64_t j = 0; j < V; ++j) {
          ASSERT_EQ(out[j] != -kInf, want[j]) << "V=" << V << " rep=" << rep << " j=" << j;
          ++compared;
        }
        // The draw comes from the kept set, every time.
        const int64_t seed = rep, offset = V;
        int64_t token = -1;
        SampleParams sp;
        sp.temperature = {&c.T, 1};
        sp.seed = {&seed, 1};
        sp.offset = {&offset, 1};
        sp.filters = f;
        ASSERT_TRUE(sample(rows(x, 1, 1, V), sp, &token).is_ok());
        ASSERT_TRUE(token >= 0 && token < V && want[token]);
      }
    }
  }
  EXPECT_GT(compared, 100000);
}

TEST(Filters, NeutralFiltersLeaveSampleUnchanged) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int64_t V = 1000, B = 16;
  std::vector<float> x(B * V);
  for (auto& v : x) v = normal(rng);
  const float T = 0.7f, one = 1.0f, zero = 0.0f;
  const int64_t seed = 9, offset = 2;
  SampleParams plain;
  plain.temperature = {&T, 1};
  plain.seed = {&seed, 1};
  plain.offset = {&offset, 1};
  std::vector<int64_t> a(B);
  ASSERT_TRUE(sample(rows(x, B, 1, V), plain, a.data()).is_ok());
  std::vector<float> fa(B * V);
  ASSERT_TRUE(filter_logits(rows(x, B, 1, V), plain.temperature, plain.filters, fa.data(), V).is_ok());
  // top_k of V or more keeps every token, as transformers' warper (which clamps k to V) does.
  for (const int64_t k : {int64_t{0}, V, V + 1, std::numeric_limits<int64_t>::max()}) {
    SampleParams neutral = plain;
    neutral.filters.top_k = {&k, 1};
    neutral.filters.top_p = {&one, 1};
    neutral.filters.min_p = {&zero, 1};
    neutral.filters.repetition_penalty = {&one, 1};
    std::vector<int64_t> b(B);
    ASSERT_TRUE(sample(rows(x, B, 1, V), neutral, b.data()).is_ok());
    EXPECT_EQ(a, b) << "top_k=" << k;
    std::vector<float> fb(B * V);
    ASSERT_TRUE(filter_logits(rows(x, B, 1, V), neutral.temperature, neutral.filters, fb.data(), V).is_ok());
    EXPECT_EQ(fa, fb) << "top_k=" << k;
  }
}

TEST(Filters, BadParametersNameTheArgument) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f};
  std::vector<float> out(3);
  const float T = 1.0f, bad_p = 0.0f;
  Filters f;
  f.top_p = {&bad_p, 1};
  const Status s = filter_logits(rows(x, 1, 1, 3), {&T, 1}, f, out.data(), 3);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(std::string(s.message()).find("top_p[0] = 0"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace spec_edge
