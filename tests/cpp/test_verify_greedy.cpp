#include <cmath>
#include <limits>

#include "test_helpers.h"

namespace spec_edge {
namespace {

using namespace spec_edge::testing;

// Row i's argmax is argmaxes[i].
std::vector<float> peaked(const std::vector<int64_t>& argmaxes, int64_t V) {
  std::vector<float> x(argmaxes.size() * V, 0.1f);
  for (size_t i = 0; i < argmaxes.size(); ++i) x[i * V + argmaxes[i]] = 0.9f;
  return x;
}

TEST(VerifyGreedy, AllAcceptedEmitsBonus) {
  const auto p = peaked({2, 0, 4, 1}, 5);
  const std::vector<int64_t> t = {2, 0, 4};
  Out o;
  ASSERT_TRUE(verify_greedy(rows(p, 1, 4, 5), tokens(t, 1, 3), o.view()).is_ok());
  EXPECT_EQ(o.n, 3);
  EXPECT_EQ(o.next, 1);
}

TEST(VerifyGreedy, FirstMissEmitsCorrection) {
  const auto p = peaked({2, 0, 4, 1}, 5);
  const std::vector<int64_t> t = {2, 3, 4};
  Out o;
  ASSERT_TRUE(verify_greedy(rows(p, 1, 4, 5), tokens(t, 1, 3), o.view()).is_ok());
  EXPECT_EQ(o.n, 1);
  EXPECT_EQ(o.next, 0);
}

TEST(VerifyGreedy, TiesResolveToLowestIndex) {
  const std::vector<float> p = {0.1f, 0.4f, 0.4f, 0.1f};
  const std::vector<int64_t> t = {2};  // tied with 1, which wins
  Out o;
  ASSERT_TRUE(verify_greedy(rows(p, 1, 1, 4), tokens(t, 1, 0), o.view()).is_ok());
  EXPECT_EQ(o.next, 1);
  const std::vector<float> p2 = {0.1f, 0.4f, 0.4f, 0.1f, 0.4f, 0.4f, 0.1f, 0.1f};
  ASSERT_TRUE(verify_greedy(rows(p2, 1, 2, 4), tokens(t, 1, 1), o.view()).is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 1);
}

TEST(VerifyGreedy, KZeroEmitsFromRowZero) {
  const auto p = peaked({3}, 6);
  Out o;
  ASSERT_TRUE(verify_greedy(rows(p, 1, 1, 6), tokens({}, 1, 0), o.view()).is_ok());
  EXPECT_EQ(o.n, 0);
  EXPECT_EQ(o.next, 3);
}

TEST(VerifyGreedy, ReadsNoRowPastTheFirstMiss) {
  auto p = peaked({2, 0, 4, 1}, 5);
  p[2 * 5 + 1] = std::nanf("");  // row 2 is never read: the miss is at row 1
  const std::vector<int64_t> t = {2, 3, 4};
  Out o;
  ASSERT_TRUE(verify_greedy(rows(p, 1, 4, 5), tokens(t, 1, 3), o.view()).is_ok());
  EXPECT_EQ(o.n, 1);
}

TEST(VerifyGreedy, LogitsWithMaskedTokens) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {ninf, -3.0f, ninf, -1.0f, ninf, ninf};
  Out o;
  ASSERT_TRUE(verify_greedy(rows(logits, 1, 1, 6), tokens({}, 1, 0), o.view()).is_ok());
  EXPECT_EQ(o.next, 3);
}

TEST(VerifyGreedy, BatchWithBroadcastTarget) {
  const auto p = peaked({2, 0, 4}, 5);
  Rows r = rows(p, 3, 3, 5);
  r.batch_stride = 0;  // one target for every sequence
  const std::vector<int64_t> t = {2, 0, 2, 1, 0, 0};
  int64_t n[3], next[3];
  ASSERT_TRUE(verify_greedy(r, tokens(t, 3, 2), {n, next}).is_ok());
  EXPECT_EQ(n[0], 2);
  EXPECT_EQ(next[0], 4);
  EXPECT_EQ(n[1], 1);
  EXPECT_EQ(next[1], 0);
  EXPECT_EQ(n[2], 0);
  EXPECT_EQ(next[2], 2);
}

TEST(VerifyGreedy, HalfAndBFloat16) {
  // 1.0 = 0x3c00 (half) / 0x3f80 (bf16); 0.5 = 0x3800 / 0x3f00.
  const std::vector<uint16_t> half = {0x3800, 0x3c00, 0x3800, 0x3c00, 0x3800, 0x3800};
  const std::vector<uint16_t> bf16 = {0x3f00, 0x3f80, 0x3f00, 0x3f80, 0x3f00, 0x3f00};
  const std::vector<int64_t> t = {1};
  for (auto [data, dtype] : {std::pair{&half, DType::kFloat16}, std::pair{&bf16, DType::kBFloat16}}) {
    Rows r;
    r.data = data->data();
    r.dtype = dtype;
    r.batch = 1;
    r.rows = 2;
    r.vocab = 3;
    r.row_stride = 3;
    r.batch_stride = 6;
    Out o;
    ASSERT_TRUE(verify_greedy(r, tokens(t, 1, 1), o.view()).is_ok());
    EXPECT_EQ(o.n, 1);
    EXPECT_EQ(o.next, 0);
  }
}

TEST(VerifyGreedy, BadInput) {
  const auto p = peaked({2, 0, 4}, 5);
  Out o;
  expect_error(verify_greedy(rows(p, 1, 3, 5), tokens({1, 2, 3}, 1, 3), o.view()),
               "draft_tokens: expected K=2 tokens");
  expect_error(verify_greedy(rows(p, 1, 3, 5), tokens({1, 2, 3, 4}, 2, 2), o.view()),
               "draft_tokens: batch size 2 does not match");
  expect_error(verify_greedy(rows(p, 1, 3, 5), tokens({1, 5}, 1, 2), o.view()),
               "draft_tokens[0, 1] = 5 is outside the vocabulary [0, 5)");
  expect_error(verify_greedy(rows(p, 1, 3, 5), tokens({-1, 0}, 1, 2), o.view()),
               "draft_tokens[0, 0] = -1");
  expect_error(verify_greedy(rows(p, 1, 0, 5), tokens({}, 1, 0), o.view()),
               "target_probs: expected K+1 >= 1 rows");
  expect_error(verify_greedy(rows(p, 1, 3, 0), tokens({1, 1}, 1, 2), o.view()),
               "target_probs: expected a non-empty vocabulary");
  Rows d = rows(p, 1, 3, 5);
  d.dtype = DType::kFloat64;
  const Status s = verify_greedy(d, tokens({1, 1}, 1, 2), o.view());
  expect_error(s, "target_probs: unsupported dtype float64");
  EXPECT_EQ(s.code(), Code::kInvalidDType);
  auto nan = p;
  nan[3] = std::nanf("");
  expect_error(verify_greedy(rows(nan, 1, 3, 5), tokens({2, 0}, 1, 2), o.view()),
               "target_probs[0, 0, 3] is NaN");
}

}  // namespace
}  // namespace spec_edge
