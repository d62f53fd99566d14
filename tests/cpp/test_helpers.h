// Small builders for core views over std::vector storage.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

inline uint16_t to_half_bits(float f) { return to_half(f).bits; }  // the core's, nearest even

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
// draft token is accepted), restated in plain loops. Numerators num[j] = exp_nonpositive((y[j] -
// ymax) / T); blocks of kBlock logits; c[b] = exp_upper_bound(max of block b - ymax, (1 / T) *
// kBoundScale). Block b's weight is n_b * c[b], except the top block (the first holding ymax):
// the sum of its numerators. Running totals: left to right within runs of 32 blocks, plus the
// total of the runs before. A proposal (uniforms u, v): the first block whose running total
// exceeds u * total (the last if none), offset = u * total less the total before it; in the top
// block, the first token whose running numerator sum exceeds the offset (kept); elsewhere the
// token at min(n_b - 1, offset / c[b]), kept when v * c[b] < num. After `max_proposals`
// rejections, the inverse CDF of the numerators (`accept` with K = 0) at the next uniform.
inline int64_t reference_draw(const std::vector<float>& y, float T,
                              const std::function<double()>& next_uniform, int max_proposals = 1024) {
  const int64_t V = static_cast<int64_t>(y.size()), blocks = (V + kBlock - 1) / kBlock, run = 32;
  const float inv_temp = 1.0f / T, a = inv_temp * kBoundScale;
  float ymax = -INFINITY;
  for (float v : y) ymax = std::max(ymax, v);
  std::vector<float> num(V), c(blocks);
  for (int64_t j = 0; j < V; ++j) num[j] = exp_nonpositive((y[j] - ymax) * inv_temp);
  std::vector<double> weight(blocks);
  int64_t top = -1;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t base = b * kBlock, n = std::min(kBlock, V - base);
    float m = -INFINITY;
    for (int64_t j = base; j < base + n; ++j) m = std::max(m, y[j]);
    c[b] = exp_upper_bound(m - ymax, a);
    weight[b] = static_cast<double>(n) * static_cast<double>(c[b]);
    if (m == ymax && top < 0) {
      top = b;
      weight[b] = 0.0;
      for (int64_t j = base; j < base + n; ++j) weight[b] += static_cast<double>(num[j]);
    }
  }
  // end[b]: the running total at the end of block b.
  std::vector<double> end(blocks);
  double before_run = 0.0;
  for (int64_t r = 0; r * run < blocks; ++r) {
    double sum = 0.0;
    for (int64_t b = r * run; b < std::min(blocks, (r + 1) * run); ++b) {
      sum += weight[b];
      end[b] = before_run + sum;
    }
    before_run = before_run + sum;
  }
  for (int i = 0; i < max_proposals; ++i) {
    const double u = next_uniform(), v = next_uniform(), target = u * end[blocks - 1];
    int64_t b = 0;
    while (b < blocks - 1 && !(end[b] > target)) ++b;
    // The total before block b, as the sampler forms it: its run's start plus the run's sum.
    const int64_t r0 = b / run * run;
    double start = r0 == 0 ? 0.0 : end[r0 - 1], sum = 0.0;
    for (int64_t b2 = r0; b2 < b; ++b2) sum += weight[b2];
    const double offset = target - (start + sum);
    const int64_t base = b * kBlock, n = std::min(kBlock, V - base);
    if (b == top) {
      double cum = 0.0;
      int64_t last = -1;
      for (int64_t j = base; j < base + n; ++j) {
        if (!(num[j] > 0.0f)) continue;
        cum += static_cast<double>(num[j]);
        last = j;
        if (cum > offset) break;
      }
      return last;
    }
    const double slot = std::min(std::max(0.0, offset / static_cast<double>(c[b])), static_cast<double>(n - 1));
    const int64_t j = base + static_cast<int64_t>(slot);
    if (v * static_cast<double>(c[b]) < static_cast<double>(num[j])) return j;
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
