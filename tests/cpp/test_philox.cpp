#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "spec_edge/philox.h"

namespace spec_edge {
namespace {

struct Kat {
  Philox4x32 ctr;
  uint32_t k0, k1;
  Philox4x32 expected;
};

// Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(Philox, KnownAnswers) {
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& kat : kats) {
    const Philox4x32 out = philox4x32_10(kat.ctr, kat.k0, kat.k1);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out.v[w], kat.expected.v[w]) << "word " << w;
  }
}

TEST(Philox, UniformLayout) {
  const uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
  for (uint64_t draw = 0; draw < 9; ++draw) {
    const Philox4x32 ctr{{0x76543210u, 0xfedcba98u, 7u, static_cast<uint32_t>(draw / 4)}};
    const Philox4x32 out = philox4x32_10(ctr, 0x89abcdefu, 0x01234567u);
    EXPECT_EQ(philox_uniform(seed, offset, 7, draw), out.v[draw % 4] * 0x1p-32);
  }
}

TEST(Philox, UniformRange) {
  double lo = 1, hi = 0, sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = philox_uniform(42, 3, 1, i);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(sum / n, 0.5, 5 * 0.2887 / std::sqrt(n));
}

}  // namespace
}  // namespace spec_edge
