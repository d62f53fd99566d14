// Small builders for core views over std::vector storage.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// Asserts an InvalidArgument/InvalidDType status whose message contains `needle`.
inline void expect_error(const Status& s, const std::string& needle) {
  ASSERT_FALSE(s.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(std::string(s.message()).find(needle), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << needle;
}

}  // namespace spec_edge::testing
