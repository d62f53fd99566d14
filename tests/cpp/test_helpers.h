// Small builders for core views over std::vector storage.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "spec_edge/numerics.h"
#include "spec_edge/ops.h"

namespace spec_edge::testing {

inline Rows rows(const std::vector<float>& data, int64_t batch, int64_t nrows, int64_t vocab) {
  return Rows::contiguous(data.data(), DType::kFloat32, batch, nrows, vocab);
}

inline Tokens tokens(const std::vector<int64_t>& data, int64_t batch, int64_t len) {
  Tokens t;
  t.data = data.data();
  t.batch = batch;
  t.len = len;
  t.batch_stride = len;
  t.stride = 1;
  return t;
}

inline Uniforms uniforms(const std::vector<double>& data, int64_t batch, int64_t len) {
  Uniforms u;
  u.data = data.data();
  u.dtype = DType::kFloat64;
  u.batch = batch;
  u.len = len;
  u.batch_stride = len;
  return u;
}

// One sequence's (n_accepted, next_token), preset to values no op produces.
struct Out {
  int64_t n = -7, next = -7;
  VerifyResult view() { return {&n, &next}; }
};

// Address of a view that outlives the full expression (for optional arguments).
inline const Rows* ptr(const Rows& r) {
  static thread_local Rows slots[8];
  static thread_local int next = 0;
  Rows* slot = &slots[next++ % 8];
  *slot = r;
  return slot;
}

// The definition of a seeded draw from a softmax row (`sample`, and verify's draw after every
// draft token is accepted), restated in plain loops. With a = (1 / T) * kBoundScale and blocks
// of kBlock logits y: ref[b] is the running maximum through block b, the bounds of block b are
// exp_upper_bound(y - ref[b], a), their fold times exp_upper_bound(ref[b] - ymax, a) (1 when
// ref[b] = ymax) is the block's weight. A proposal: the first block whose running total of
// weights (double) exceeds u * total, then the first token whose running total of scaled bounds
// does (else the block's last). It is kept when v * bound < exp_nonpositive((y - ymax) / T), v
// the next uniform; after `max_proposals` rejections, the inverse CDF of the numerators
// (`accept` with K = 0) at the next uniform.
inline int64_t reference_draw(const std::vector<float>& y, float T,
                              const std::function<double()>& next_uniform, int max_proposals = 16) {
  const int64_t V = static_cast<int64_t>(y.size()), blocks = (V + kBlock - 1) / kBlock;
  const float inv_temp = 1.0f / T, a = inv_temp * kBoundScale;
  std::vector<float> ref(blocks), num(V);
  std::vector<double> weight(blocks);
  float running = -INFINITY;
  for (int64_t b = 0; b < blocks; ++b) {
    float s[kBlock] = {};
    for (int64_t j = b * kBlock; j < std::min(V, (b + 1) * kBlock); ++j) running = std::max(running, y[j]);
    ref[b] = running;
    for (int64_t j = b * kBlock; j < std::min(V, (b + 1) * kBlock); ++j)
      s[j - b * kBlock] = exp_upper_bound(y[j] - running, a);  // NaN (all -inf so far): -87's
    weight[b] = static_cast<double>(fold_block(s));
  }
  const float ymax = running;
  std::vector<double> scale(blocks);
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    scale[b] = ref[b] == ymax ? 1.0 : static_cast<double>(exp_upper_bound(ref[b] - ymax, a));
    total += weight[b] * scale[b];
  }
  for (int64_t j = 0; j < V; ++j) num[j] = exp_nonpositive((y[j] - ymax) * inv_temp);
  for (int i = 0; i < max_proposals; ++i) {
    const double u = next_uniform(), v = next_uniform(), target = u * total;
    double cum = 0.0;
    int64_t b = 0;
    for (; b < blocks - 1; cum += weight[b] * scale[b], ++b)
      if (cum + weight[b] * scale[b] > target) break;
    int64_t j = std::min(V, (b + 1) * kBlock) - 1;
    double bound = static_cast<double>(exp_upper_bound(y[j] - ref[b], a)) * scale[b];
    for (int64_t i2 = b * kBlock; i2 < std::min(V, (b + 1) * kBlock); ++i2) {
      const double w = static_cast<double>(exp_upper_bound(y[i2] - ref[b], a)) * scale[b];
      cum += w;
      if (cum > target) {
        j = i2;
        bound = w;
        break;
      }
    }
    if (v * bound < static_cast<double>(num[j])) return j;
  }
  int64_t n = -1, next = -1;
  EXPECT_TRUE(accept(rows(num, 1, 1, V), nullptr, tokens({}, 1, 0), uniforms({next_uniform()}, 1, 1),
                     {&n, &next})
                  .is_ok());
  return next;
}

// Asserts an InvalidArgument/InvalidDType status whose message contains `needle`.
inline void expect_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(std::string(s.message()).find(needle), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << needle;
}

}  // namespace spec_edge::testing
