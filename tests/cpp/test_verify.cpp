#include <algorithm>
#include <cmath>
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

struct Case {
  int64_t B, K, V;
  std::vector<float> target, draft;
  std::vector<int64_t> tokens, num_draft;
  std::vector<float> temperature;
};

Case random_case(std::mt19937& rng, int64_t B, int64_t K, int64_t V, float spread) {
  Case c{B, K, V, {}, {}, {}, {}, {}};
  std::normal_distribution<float> normal(0.0f, spread);
  c.target.resize(B * (K + 1) * V);
  c.draft.resize(B * K * V);
  for (auto& x : c.target) x = normal(rng);
  for (size_t j = 0; j < c.draft.size(); ++j) c.draft[j] = 0.7f * c.target[(j / (K * V)) * (K + 1) * V + j % (K * V)] + 0.3f * normal(rng);
  std::uniform_int_distribution<int64_t> tok(0, V - 1), nd(0, K);
  for (int64_t i = 0; i < B * K; ++i) c.tokens.push_back(tok(rng));
  for (int64_t b = 0; b < B; ++b) {
    c.num_draft.push_back(nd(rng));
    c.temperature.push_back(b % 4 == 0 ? 0.0f : 0.5f * (b % 4));
  }
  return c;
}

VerifyParams params(const Case& c, const int64_t* seed, const int64_t* offset) {
  VerifyParams p;
  p.temperature = {c.temperature.data(), c.B};
  p.seed = {seed, 1};
  p.offset = {offset, 1};
  p.num_draft = c.num_draft.data();
  return p;
}

// verify is accept applied to softmax numerators at temperature T with Philox uniforms (its
// acceptance decisions and residual draws; the draw after a fully accepted draft is
// reference_draw), and verify_greedy at T = 0: the same bits, row by row, for ragged K and
// per-row temperature.
TEST(Verify, IsAcceptOnSoftmaxWithPhiloxUniforms) {
  std::mt19937 rng(11);
  for (int64_t V : {1, 5, 64, 65, 300}) {
    const int64_t B = 16, K = 4;
    const Case c = random_case(rng, B, K, V, V == 300 ? 4.0f : 1.5f);
    const int64_t seed = 1234, offset = 77;
    std::vector<int64_t> len(B), out(B * (K + 1));
    ASSERT_TRUE(verify(rows(c.target, B, K + 1, V), rows(c.draft, B, K, V), tokens(c.tokens, B, K),
                       params(c, &seed, &offset), {len.data(), out.data(), K + 1})
                    .is_ok());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = c.num_draft[b];
      const float T = c.temperature[b];
      std::vector<float> p((n + 1) * V), q(n * V);
      std::vector<int64_t> t(c.tokens.begin() + b * K, c.tokens.begin() + b * K + n);
      for (int64_t i = 0; i <= n; ++i) {
        const float* x = &c.target[(b * (K + 1) + i) * V];
        float m = -INFINITY;
        for (int64_t j = 0; j < V; ++j) m = std::max(m, x[j]);
        for (int64_t j = 0; j < V; ++j) p[i * V + j] = T == 0 ? x[j] : exp_nonpositive((x[j] - m) * (1.0f / T));
        if (i == n) break;
        const float* y = &c.draft[(b * K + i) * V];
        float mq = -INFINITY;
        for (int64_t j = 0; j < V; ++j) mq = std::max(mq, y[j]);
        for (int64_t j = 0; j < V; ++j) q[i * V + j] = T == 0 ? y[j] : exp_nonpositive((y[j] - mq) * (1.0f / T));
      }
      int64_t n_ref = -1, next_ref = -1;
      if (T == 0) {
        ASSERT_TRUE(verify_greedy(rows(p, 1, n + 1, V), tokens(t, 1, n), {&n_ref, &next_ref}).is_ok());
      } else {
        std::vector<double> u;
        for (int64_t j = 0; j <= n; ++j) u.push_back(philox_uniform(seed, offset, b, j));
        ASSERT_TRUE(accept(rows(p, 1, n + 1, V), ptr(rows(q, 1, n, V)), tokens(t, 1, n),
                           uniforms(u, 1, n + 1), {&n_ref, &next_ref})
                        .is_ok());
        if (n_ref == n) {  // every draft token accepted: the draw from row n, uniform n first
          const float* x = &c.target[(b * (K + 1) + n) * V];
          uint64_t draw = K + 1;
          bool first = true;
          const auto next = [&] {
            if (!first) return philox_uniform(seed, offset, b, draw++);
            first = false;
            return u[n];
          };
          next_ref = reference_draw(std::vector<float>(x, x + V), T, next);
        }
      }
      EXPECT_EQ(len[b], n_ref) << "b=" << b << " V=" << V;
      for (int64_t j = 0; j <= K; ++j) {
        const int64_t expected = j < n_ref ? t[j] : (j == n_ref ? next_ref : -1);
        EXPECT_EQ(out[b * (K + 1) + j], expected) << "b=" << b << " j=" << j;
      }
    }
  }
}

// verify decides most acceptances from bounds of the two row masses and computes the masses
// only when the bounds leave it open: decisions near the boundary (draft close to target, so
// p/q near 1 and many uniforms close to it) must equal the exact rule's. Rows of several
// blocks, the maximum in a late block (blocks before it carry a scale).
TEST(Verify, DecisionsFromMassBoundsEqualTheExactRule) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t B = 256, K = 1, V = 200, seed = 5;
  std::vector<float> target(B * 2 * V), draft(B * V), T(1, 1.0f);
  std::vector<int64_t> tokens(B);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < 2 * V; ++j) target[b * 2 * V + j] = 0.5f * normal(rng) + (j % V == 150 ? 2.0f : 0.0f);
    for (int64_t j = 0; j < V; ++j) draft[b * V + j] = target[b * 2 * V + j] + 0.1f * normal(rng);
    tokens[b] = static_cast<int64_t>(rng() % V);
  }
  int64_t checked = 0, rejected = 0;
  for (int64_t offset = 0; offset < 16; ++offset) {
    VerifyParams p;
    p.temperature = {T.data(), 1};
    p.seed = {&seed, 1};
    p.offset = {&offset, 1};
    std::vector<int64_t> len(B), out(B * 2);
    ASSERT_TRUE(verify(rows(target, B, 2, V), rows(draft, B, 1, V), testing::tokens(tokens, B, 1), p,
                       {len.data(), out.data(), 2})
                    .is_ok());
    for (int64_t b = 0; b < B; ++b) {
      std::vector<float> e(2 * V), f(V);
      for (int64_t i = 0; i < 2; ++i) {
        const float* x = &target[(b * 2 + i) * V];
        const float m = *std::max_element(x, x + V);
        for (int64_t j = 0; j < V; ++j) e[i * V + j] = exp_nonpositive((x[j] - m) * 1.0f);
      }
      const float* y = &draft[b * V];
      const float mq = *std::max_element(y, y + V);
      for (int64_t j = 0; j < V; ++j) f[j] = exp_nonpositive((y[j] - mq) * 1.0f);
      int64_t n = -1, next = -1;
      ASSERT_TRUE(accept(rows(e, 1, 2, V), ptr(rows(f, 1, 1, V)), testing::tokens({tokens[b]}, 1, 1),
                         uniforms({philox_uniform(seed, offset, b, 0), philox_uniform(seed, offset, b, 1)}, 1, 2),
                         {&n, &next})
                      .is_ok());
      ASSERT_EQ(len[b], n) << "b=" << b << " offset=" << offset;
      if (n == 0) ASSERT_EQ(out[b * 2], next) << "b=" << b << " offset=" << offset;
      ++checked;
      rejected += n == 0;
    }
  }
  EXPECT_EQ(checked, 16 * B);
  EXPECT_GT(rejected, checked / 50);  // the test exercises both outcomes
}

// A decision row's mass bounds, tightened block by block (refine): every interval holds the
// exact mass, each is inside the last, and the last step gives mass()'s bits and numerators.
// Flat, spread and peaked rows, the maximum early or late (blocks before it carry a scale),
// a padded vocabulary (-inf blocks: numerators 0, bounds tiny but positive), repetition-penalty
// patches, f16 rows, every path.
TEST(Verify, RefinedMassBoundsHoldTheExactMass) {
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t multi_step_rows = 0;
  for (const char* isa : {"scalar", "sse2", "avx2", "avx512", "neon"}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
      const RowKernels* k = row_kernels_for(isa, dtype);
      if (k == nullptr) continue;
      for (int64_t V : {1, 64, 1000, 32000}) {
        for (int shape = 0; shape < 5; ++shape) {
          std::vector<float> x(V);
          for (int64_t j = 0; j < V; ++j) {
            const float sd = shape == 1 ? 3.0f : 1.0f;
            x[j] = sd * normal(rng) + (shape == 3 ? 8.0f * j / V : 0.0f);  // 3: the maximum late
            if (shape == 4 && V >= 64 && j >= V - V / 5) x[j] = -INFINITY;
          }
          if (shape == 2) x[rng() % V] += 15.0f;  // one token holds most of the mass
          std::vector<uint16_t> half(V);
          for (int64_t j = 0; j < V; ++j) half[j] = testing::to_half_bits(x[j]);
          const void* row = dtype == DType::kFloat16 ? static_cast<const void*>(half.data()) : x.data();
          RowSampling rs;
          rs.temperature = shape == 1 ? 0.7f : 1.3f;
          rs.penalty = V > 1 && shape % 2 == 0 ? 1.3f : 1.0f;
          std::vector<int64_t> prev;
          for (int64_t j = 0; j < std::min<int64_t>(V, 40); ++j) prev.push_back(static_cast<int64_t>(rng() % V));
          std::sort(prev.begin(), prev.end());
          prev.erase(std::unique(prev.begin(), prev.end()), prev.end());
          FilteredRow exact, refined;
          ASSERT_TRUE(exact.build(*k, row, V, rs, prev, {"x", 0, 0}, RowUse::kDecide).is_ok());
          ASSERT_TRUE(refined.build(*k, row, V, rs, prev, {"x", 0, 0}, RowUse::kDecide).is_ok());
          const double P = exact.mass(*k);
          const std::string where = std::string(isa) + " V=" + std::to_string(V) + " shape " + std::to_string(shape);
          MassBounds last{0.0, std::numeric_limits<double>::infinity()};
          int steps = 0;
          do {
            const MassBounds m = refined.mass_bounds();
            ASSERT_LE(m.lo, P) << where << " step " << steps;
            ASSERT_GE(m.hi, P) << where << " step " << steps;
            ASSERT_GE(m.lo, last.lo) << where << " step " << steps;
            ASSERT_LE(m.hi, last.hi) << where << " step " << steps;
            last = m;
            ++steps;
          } while (refined.refine(*k));
          multi_step_rows += steps > 3;
          ASSERT_EQ(refined.mass(*k), P) << where;
          ASSERT_TRUE(std::equal(exact.numerators(), exact.numerators() + V, refined.numerators())) << where;
        }
      }
    }
  }
  EXPECT_GT(multi_step_rows, 0);
}

TEST(Verify, SameSeedSameTokensOtherOffsetOtherTokens) {
  std::mt19937 rng(5);
  Case c = random_case(rng, 256, 3, 40, 1.0f);
  std::fill(c.temperature.begin(), c.temperature.end(), 1.0f);
  std::fill(c.num_draft.begin(), c.num_draft.end(), 3);
  const int64_t seed = 9;
  std::vector<int64_t> runs[3];
  for (int r = 0; r < 3; ++r) {
    const int64_t offset = r == 2 ? 1 : 0;
    std::vector<int64_t> len(256), out(256 * 4);
    ASSERT_TRUE(verify(rows(c.target, 256, 4, 40), rows(c.draft, 256, 3, 40), tokens(c.tokens, 256, 3),
                       params(c, &seed, &offset), {len.data(), out.data(), 4})
                    .is_ok());
    runs[r] = out;
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
}

TEST(Verify, BadInput) {
  std::mt19937 rng(3);
  Case c = random_case(rng, 2, 2, 8, 1.0f);
  const int64_t seed = 0, offset = 0;
  std::vector<int64_t> len(2), out(6);
  auto run = [&](const Case& cc) {
    return verify(rows(cc.target, 2, 3, 8), rows(cc.draft, 2, 2, 8), tokens(cc.tokens, 2, 2),
                  params(cc, &seed, &offset), {len.data(), out.data(), 3});
  };
  Case bad = c;
  bad.temperature = {1.0f, -0.5f};
  expect_error(run(bad), "temperature[1] = -0.5: expected a finite value >= 0");
  bad.temperature = {std::nanf(""), 1.0f};
  expect_error(run(bad), "temperature[0] = nan");
  bad.temperature = {1e-39f, 1.0f};
  expect_error(run(bad), "temperature[0] = 1e-39 is too small");
  bad = c;
  bad.num_draft = {3, 0};
  expect_error(run(bad), "num_draft[0] = 3 is outside [0, K=2]");
  bad.num_draft = {0, -1};
  expect_error(run(bad), "num_draft[1] = -1");
  bad = c;
  bad.temperature = {1.0f, 1.0f};
  bad.num_draft = {2, 2};
  bad.target[5] = std::nanf("");
  expect_error(run(bad), "target_logits[0, 0, 5] = nan: logits must not be NaN or +inf");
  bad.target[5] = INFINITY;
  expect_error(run(bad), "target_logits[0, 0, 5] = inf");
  bad = c;
  bad.temperature = {1.0f, 1.0f};
  bad.num_draft = {2, 2};
  for (int j = 0; j < 8; ++j) bad.draft[j] = -INFINITY;
  expect_error(run(bad), "draft_logits[0, 0] has no finite logit");
  bad = c;
  bad.tokens[3] = 8;
  bad.num_draft = {2, 2};
  expect_error(run(bad), "draft_tokens[1, 1] = 8 is outside the vocabulary [0, 8)");
  VerifyParams p = params(c, &seed, &offset);
  p.temperature.count = 3;
  expect_error(verify(rows(c.target, 2, 3, 8), rows(c.draft, 2, 2, 8), tokens(c.tokens, 2, 2), p,
                      {len.data(), out.data(), 3}),
               "temperature: expected one value or one per batch row (B=2), got 3");
  expect_error(verify(rows(c.target, 2, 3, 8), rows(c.draft, 2, 3, 8), tokens(c.tokens, 2, 2),
                      params(c, &seed, &offset), {len.data(), out.data(), 3}),
               "draft_logits: expected K=2 rows");
}

}  // namespace
}  // namespace spec_edge
