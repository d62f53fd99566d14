#include <cmath>
#include <limits>

#include "test_helpers.h"

namespace spec_edge {
namespace {

using namespace spec_edge::testing;

// p = [0.5, 0.5], q = [1, 0]: t = 0 is accepted with probability 0.5; the residual
// max(0, p - q) = [0, 0.5] always gives token 1.
TEST(Accept, HandComputedAcceptanceAndResidual) {
  const std::vector<float> p = {0.5f, 0.5f, 0.25f, 0.75f};
  const std::vector<float> q = {1.0f, 0.0f};
  const std::vector<int64_t> t = {0};
  Out o;
  ASSERT_TRUE(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens(t, 1, 1),
                     uniforms({0.4999, 0.9}, 1, 2), o.view())
                  .is_ok());
  EXPECT_EQ(o.n, 1);
  EXPECT_EQ(o.next, 1);  // bonus from p_1 = [0.25, 0.75] at u = 0.9
  ASSERT_TRUE(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens(t, 1, 1),
                     uniforms({0.5001, 0.0}, 1, 2), o.view())
                  .is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 1);  // residual is one-hot on token 1
  ASSERT_TRUE(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens(t, 1, 1),
                     uniforms({0.1, 0.2}, 1, 2), o.view())
                  .is_ok());
  EXPECT_EQ(o.next, 0);  // bonus from p_1 at u = 0.2 < 0.25
}

TEST(Accept, UnnormalizedRowsGiveTheSameResult) {
  const std::vector<float> p = {1, 2, 3, 4, 1, 1, 1, 1};
  const std::vector<float> q = {4, 3, 2, 1};
  std::vector<float> p3(p), q7(q);
  for (auto& v : p3) v *= 3;
  for (auto& v : q7) v *= 7;
  const std::vector<int64_t> t = {0};
  for (double u0 : {0.05, 0.2, 0.3, 0.9})
    for (double u1 : {0.0, 0.3, 0.6, 0.99}) {
      Out a, b;
      ASSERT_TRUE(accept(rows(p, 1, 2, 4), ptr(rows(q, 1, 1, 4)), tokens(t, 1, 1), uniforms({u0, u1}, 1, 2), a.view()).is_ok());
      ASSERT_TRUE(accept(rows(p3, 1, 2, 4), ptr(rows(q7, 1, 1, 4)), tokens(t, 1, 1), uniforms({u0, u1}, 1, 2), b.view()).is_ok());
      EXPECT_EQ(a.n, b.n);
      EXPECT_EQ(a.next, b.next);
      // p(0)/q(0) = 0.1/0.4: accepted iff u0 <= 0.25.
      EXPECT_EQ(a.n, u0 <= 0.25 ? 1 : 0);
    }
}

// Residual for p = [.1 .2 .3 .4], q = [.4 .3 .2 .1] is [0 0 .1 .3] / .4.
TEST(Accept, ResidualInverseCdf) {
  const std::vector<float> p = {0.1f, 0.2f, 0.3f, 0.4f, 1, 1, 1, 1};
  const std::vector<float> q = {0.4f, 0.3f, 0.2f, 0.1f};
  const std::vector<int64_t> t = {0};
  Out o;
  ASSERT_TRUE(accept(rows(p, 1, 2, 4), ptr(rows(q, 1, 1, 4)), tokens(t, 1, 1), uniforms({0.9, 0.24}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 2);
  ASSERT_TRUE(accept(rows(p, 1, 2, 4), ptr(rows(q, 1, 1, 4)), tokens(t, 1, 1), uniforms({0.9, 0.26}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.next, 3);
}

TEST(Accept, DraftFreeMode) {
  const std::vector<float> p = {0.2f, 0.3f, 0.5f, 1, 1, 1};
  const std::vector<int64_t> t = {2};
  Out o;
  ASSERT_TRUE(accept(rows(p, 1, 2, 3), nullptr, tokens(t, 1, 1), uniforms({0.49, 0.0}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 1);
  ASSERT_TRUE(accept(rows(p, 1, 2, 3), nullptr, tokens(t, 1, 1), uniforms({0.51, 0.39}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 0);  // [.2 .3 0] / .5 at u = .39
  ASSERT_TRUE(accept(rows(p, 1, 2, 3), nullptr, tokens(t, 1, 1), uniforms({0.51, 0.41}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.next, 1);
  ASSERT_TRUE(accept(rows(p, 1, 2, 3), nullptr, tokens(t, 1, 1), uniforms({0.51, 0.9999}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.next, 1);  // never the removed draft token
}

TEST(Accept, NeverEmitsAZeroProbabilityToken) {
  // The draft proposes a token the target rules out; u = 0 must not accept it.
  const std::vector<float> p = {0.0f, 1.0f, 0.5f, 0.5f};
  const std::vector<float> q = {1.0f, 0.0f};
  Out o;
  ASSERT_TRUE(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens({0}, 1, 1), uniforms({0.0, 0.5}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 1);
  // A draft probability of 0 for the proposed token (underflow) accepts iff p(t) > 0.
  const std::vector<float> p2 = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> q2 = {0.0f, 1.0f};
  ASSERT_TRUE(accept(rows(p2, 1, 2, 2), ptr(rows(q2, 1, 1, 2)), tokens({0}, 1, 1), uniforms({0.99, 0.5}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 1);
}

TEST(Accept, IdenticalRowsAlwaysAccept) {
  const std::vector<float> p = {0.3f, 0.7f, 1, 1};
  const std::vector<float> q = {0.3f, 0.7f};
  Out o;
  ASSERT_TRUE(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens({1}, 1, 1), uniforms({0.5, 0.1}, 1, 2), o.view()).is_ok());
  EXPECT_EQ(o.n, 1);  // p == q: u * q(t) <= p(t) for every u < 1
}

TEST(Accept, BadInput) {
  const std::vector<float> p = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> q = {0.5f, 0.5f};
  Out o;
  auto run = [&](const std::vector<float>& pp, const std::vector<float>& qq, std::vector<double> u) {
    return accept(rows(pp, 1, 2, 2), ptr(rows(qq, 1, 1, 2)), tokens({0}, 1, 1), uniforms(u, 1, 2), o.view());
  };
  expect_error(run(p, q, {1.0, 0.5}), "uniforms[0, 0] = 1 is outside [0, 1)");
  expect_error(run(p, q, {0.5, -0.1}), "uniforms[0, 1] = -0.1 is outside [0, 1)");
  expect_error(run(p, q, {0.5, std::nan("")}), "uniforms[0, 1] = nan");
  expect_error(run({-0.5f, 0.5f, 0.5f, 0.5f}, q, {0.5, 0.5}),
               "target_probs[0, 0, 0] = -0.5: probabilities must be finite and >= 0");
  expect_error(run({0.5f, std::nanf(""), 0.5f, 0.5f}, q, {0.5, 0.5}), "target_probs[0, 0, 1] = nan");
  expect_error(run(p, {INFINITY, 0.5f}, {0.5, 0.5}), "draft_probs[0, 0, 0] = inf");
  expect_error(run({0.0f, 0.0f, 0.5f, 0.5f}, q, {0.5, 0.5}), "target_probs[0, 0] has mass 0");
  expect_error(run(p, {0.0f, 0.0f}, {0.5, 0.5}), "draft_probs[0, 0] has mass 0");
  expect_error(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens({0}, 1, 1), uniforms({0.5}, 1, 1), o.view()),
               "uniforms: expected shape [B=1, K+1=2], got [1, 1]");
  expect_error(accept(rows(p, 1, 2, 2), ptr(rows(p, 1, 2, 2)), tokens({0}, 1, 1), uniforms({0.5, 0.5}, 1, 2), o.view()),
               "draft_probs: expected K=1 rows");
  expect_error(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 1)), tokens({0}, 1, 1), uniforms({0.5, 0.5}, 1, 2), o.view()),
               "draft_probs: vocabulary size 1 does not match target_probs's V=2");
  expect_error(accept(rows(p, 1, 2, 2), ptr(rows(q, 2, 1, 1)), tokens({0}, 1, 1), uniforms({0.5, 0.5}, 1, 2), o.view()),
               "draft_probs: batch size 2 does not match");
  Rows half = rows(q, 1, 1, 2);
  half.dtype = DType::kFloat16;
  expect_error(accept(rows(p, 1, 2, 2), &half, tokens({0}, 1, 1), uniforms({0.5, 0.5}, 1, 2), o.view()),
               "draft_probs: dtype float16 does not match target_probs's dtype float32");
  expect_error(accept(rows(p, 1, 2, 2), ptr(rows(q, 1, 1, 2)), tokens({2}, 1, 1), uniforms({0.5, 0.5}, 1, 2), o.view()),
               "draft_tokens[0, 0] = 2 is outside the vocabulary [0, 2)");
}

}  // namespace
}  // namespace spec_edge
