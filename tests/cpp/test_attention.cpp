// spec_edge::attention and update_cache: against a double-precision statement of causal
// attention, the same bits on every ISA path, and bad input refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "spec_edge/attention.h"
#include "spec_edge/dispatch.h"

namespace spec_edge {
namespace {

struct Tensor4 {
  std::vector<float> data;
  int64_t B, S, H, D;
  Tensor4(int64_t b, int64_t s, int64_t h, int64_t d) : data(b * s * h * d), B(b), S(s), H(h), D(d) {}
  ConstHeads view() const { return {data.data(), B, S, H, D, S * H * D, H * D, D}; }
  Heads<float> out() { return {data.data(), B, S, H, D, S * H * D, H * D, D}; }
  float& at(int64_t b, int64_t s, int64_t h, int64_t d) { return data[((b * S + s) * H + h) * D + d]; }
};

Tensor4 random(int64_t b, int64_t s, int64_t h, int64_t d, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor4 t(b, s, h, d);
  for (float& x : t.data) x = normal(rng);
  return t;
}

double reference(Tensor4& q, Tensor4& k, Tensor4& v, int64_t start, int64_t b, int64_t i, int64_t h, int64_t d) {
  const int64_t kv = h / (q.H / k.H), n = start + i + 1;
  std::vector<double> s(n);
  double m = -INFINITY, mass = 0.0, acc = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t e = 0; e < q.D; ++e) s[j] += static_cast<double>(q.at(b, i, h, e)) * k.at(b, j, kv, e);
    s[j] /= std::sqrt(static_cast<double>(q.D));
    m = std::max(m, s[j]);
  }
  for (int64_t j = 0; j < n; ++j) {
    mass += std::exp(s[j] - m);
    acc += std::exp(s[j] - m) * v.at(b, j, kv, d);
  }
  return acc / mass;
}

struct Case { int64_t B, S, Hq, Hkv, D, C, start; };

TEST(Attention, MatchesDoublePrecisionAndIsIdenticalOnEveryPath) {
  const Case cases[] = {{1, 1, 4, 4, 64, 16, 0}, {1, 5, 5, 5, 64, 40, 35}, {2, 3, 6, 2, 8, 9, 6},
                        {1, 2, 3, 1, 65, 12, 3}, {1, 4, 2, 2, 3, 4, 0},   {3, 1, 1, 1, 1, 5, 2},
                        {1, 7, 8, 8, 17, 40, 33}, {1, 3, 2, 1, 129, 300, 250}};
  std::mt19937 rng(7);
  const std::string before = active_isa();
  for (const Case& c : cases) {
    Tensor4 q = random(c.B, c.S, c.Hq, c.D, rng, 2.0f), k = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f),
            v = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f);
    std::vector<std::vector<float>> outputs;
    for (const char* const* isa = available_isa_list(); *isa != nullptr; ++isa) {
      ASSERT_TRUE(select_isa(*isa).is_ok());
      Tensor4 out(c.B, c.S, c.Hq, c.D);
      ASSERT_TRUE(attention(q.view(), k.view(), v.view(), c.start, out.out()).is_ok());
      outputs.push_back(out.data);
      EXPECT_EQ(std::memcmp(outputs.front().data(), out.data.data(), out.data.size() * sizeof(float)), 0)
          << *isa << " differs from " << available_isa_list()[0];
    }
    Tensor4 out(c.B, c.S, c.Hq, c.D);
    out.data = outputs.front();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.S; ++i)
        for (int64_t h = 0; h < c.Hq; ++h)
          for (int64_t d = 0; d < c.D; ++d)
            ASSERT_NEAR(out.at(b, i, h, d), reference(q, k, v, c.start, b, i, h, d), 2e-5);
  }
  ASSERT_TRUE(select_isa(before.c_str()).is_ok());
}

// Long contexts with every grouped-query shape a verify step takes: 1-8 query heads per KV head,
// 1-9 rows, positions across many blocks, and a prefill chunk with more queries per KV head than
// one pass computes together.
TEST(Attention, LongContextsAndQueryGroupsMatchDoublePrecisionOnEveryPath) {
  std::mt19937 rng(5);
  const std::string before = active_isa();
  std::vector<Case> cases;
  for (int64_t group = 1; group <= 8; ++group)
    for (int64_t rows = 1; rows <= 9; ++rows)
      cases.push_back({1, rows, 2 * group, 2, group % 2 ? 24 : 16, 800 + 37 * rows, 700 + 37 * rows + group});
  cases.push_back({1, 40, 12, 2, 32, 300, 200});  // 240 queries per KV head: several passes
  cases.push_back({1, 2, 4, 2, 40, 4200, 4150});  // a long block tail and 8-dim tails
  for (const Case& c : cases) {
    Tensor4 q = random(c.B, c.S, c.Hq, c.D, rng, 2.0f), k = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f),
            v = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f);
    std::vector<float> first;
    for (const char* const* isa = available_isa_list(); *isa != nullptr; ++isa) {
      ASSERT_TRUE(select_isa(*isa).is_ok());
      Tensor4 out(c.B, c.S, c.Hq, c.D);
      ASSERT_TRUE(attention(q.view(), k.view(), v.view(), c.start, out.out()).is_ok());
      if (first.empty()) {
        first = out.data;
        for (int64_t i = 0; i < c.S; ++i)
          for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t d = 0; d < c.D; d += 7)
              ASSERT_NEAR(out.at(0, i, h, d), reference(q, k, v, c.start, 0, i, h, d), 2e-5)
                  << "S=" << c.S << " Hq=" << c.Hq << " row " << i << " head " << h;
      }
      ASSERT_EQ(std::memcmp(first.data(), out.data.data(), first.size() * sizeof(float)), 0)
          << *isa << " differs from " << available_isa_list()[0] << " at S=" << c.S << " Hq=" << c.Hq;
    }
  }
  ASSERT_TRUE(select_isa(before.c_str()).is_ok());
}

// 16-bit caches: update_cache rounds to nearest even; attention reads each half as the float it
// holds, so its output has the bits of the float32 op over those floats, on every path.
TEST(Attention, HalfCachesGiveTheBitsOfFloatCachesHoldingTheSameValues) {
  std::mt19937 rng(9);
  const std::string before = active_isa();
  const Case cases[] = {{1, 5, 12, 2, 128, 700, 650}, {1, 9, 16, 2, 64, 300, 250}, {2, 3, 6, 3, 17, 40, 30},
                        {1, 1, 4, 1, 40, 2100, 2090}, {1, 2, 2, 2, 3, 9, 4}};
  for (const Case& c : cases) {
    const Tensor4 q = random(c.B, c.S, c.Hq, c.D, rng, 2.0f), k = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f),
                  v = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f);
    // The caches written through update_cache, as the programs write them.
    std::vector<Half> k16(k.data.size()), v16(v.data.size());
    const auto half_view = [&](std::vector<Half>& data) {
      return Heads<Half>{data.data(), c.B, c.C, c.Hkv, c.D, c.C * c.Hkv * c.D, c.Hkv * c.D, c.D};
    };
    ASSERT_TRUE(update_cache(k.view(), half_view(k16), 0).is_ok());
    ASSERT_TRUE(update_cache(v.view(), half_view(v16), 0).is_ok());
    Tensor4 k32 = k, v32 = v;
    for (size_t i = 0; i < k16.size(); ++i) {
      k32.data[i] = to_float(k16[i]);
      v32.data[i] = to_float(v16[i]);
      ASSERT_EQ(k16[i].bits, to_half(k.data[i]).bits);
    }
    const auto const_half = [&](const std::vector<Half>& data) {
      return ConstHalfHeads{data.data(), c.B, c.C, c.Hkv, c.D, c.C * c.Hkv * c.D, c.Hkv * c.D, c.D};
    };
    Tensor4 want(c.B, c.S, c.Hq, c.D);
    ASSERT_TRUE(attention(q.view(), k32.view(), v32.view(), c.start, want.out()).is_ok());
    for (const char* const* isa = available_isa_list(); *isa != nullptr; ++isa) {
      ASSERT_TRUE(select_isa(*isa).is_ok());
      Tensor4 got(c.B, c.S, c.Hq, c.D);
      ASSERT_TRUE(attention(q.view(), const_half(k16), const_half(v16), c.start, got.out()).is_ok());
      ASSERT_EQ(std::memcmp(want.data.data(), got.data.data(), want.data.size() * sizeof(float)), 0)
          << *isa << " at S=" << c.S << " D=" << c.D;
    }
  }
  ASSERT_TRUE(select_isa(before.c_str()).is_ok());
}

TEST(Attention, ToHalfRoundsToNearestEven) {
  // Every half survives the round trip; the point halfway between two neighbours goes to the even
  // one, and a hair above it to the upper one.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const Half x{static_cast<uint16_t>(h)};
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {  // NaN: a quiet NaN of the same sign
      const Half y = to_half(to_float(x));
      ASSERT_EQ(y.bits & 0xfe00u, (h & 0x8000u) | 0x7e00u) << h;
      continue;
    }
    ASSERT_EQ(to_half(to_float(x)).bits, h) << h;
    if ((h & 0x7fffu) >= 0x7bffu) continue;  // the largest finite half and inf: no upper neighbour here
    const double lo = to_float(x), hi = to_float(Half{static_cast<uint16_t>(h + 1)});
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 significant bits
    ASSERT_EQ(to_half(mid).bits, (h & 1u) ? h + 1 : h) << h;
    ASSERT_EQ(to_half(std::nextafter(mid, static_cast<float>(hi))).bits, h + 1) << h;
    ASSERT_EQ(to_half(std::nextafter(mid, static_cast<float>(lo))).bits, h) << h;
  }
  EXPECT_EQ(to_half(65519.99f).bits, 0x7bffu);  // the largest half
  EXPECT_EQ(to_half(65520.0f).bits, 0x7c00u);   // rounds past it: inf
  EXPECT_EQ(to_half(-1e30f).bits, 0xfc00u);
  EXPECT_EQ(to_half(std::ldexp(1.0f, -25)).bits, 0u);  // half the smallest subnormal: ties to even (0)
  EXPECT_EQ(to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 1u);
}

TEST(Attention, HeadRangesComputeTheirHeadsAloneWithTheBitsOfOneCall) {
  std::mt19937 rng(11);
  const Case c{2, 5, 6, 2, 40, 50, 33};
  Tensor4 q = random(c.B, c.S, c.Hq, c.D, rng, 2.0f), k = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f),
          v = random(c.B, c.C, c.Hkv, c.D, rng, 1.0f);
  Tensor4 whole(c.B, c.S, c.Hq, c.D), split(c.B, c.S, c.Hq, c.D);
  ASSERT_TRUE(attention(q.view(), k.view(), v.view(), c.start, whole.out()).is_ok());
  std::fill(split.data.begin(), split.data.end(), 7.0f);
  ASSERT_TRUE(attention(q.view(), k.view(), v.view(), c.start, split.out(), 1, 4).is_ok());
  for (int64_t b = 0; b < c.B; ++b)  // heads outside the range untouched
    for (int64_t i = 0; i < c.S; ++i)
      for (int64_t h : {0, 4, 5})
        for (int64_t d = 0; d < c.D; ++d) ASSERT_EQ(split.at(b, i, h, d), 7.0f);
  // ranges that do not follow the groups of query heads sharing a KV head (3 here)
  for (const auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {4, 4}, {4, 6}})
    ASSERT_TRUE(attention(q.view(), k.view(), v.view(), c.start, split.out(), begin, end).is_ok());
  EXPECT_EQ(std::memcmp(whole.data.data(), split.data.data(), whole.data.size() * sizeof(float)), 0);
}

TEST(Attention, UpdateCacheWritesTheRowsAtThePosition) {
  std::mt19937 rng(3);
  Tensor4 cache = random(2, 10, 3, 5, rng, 1.0f), value = random(2, 4, 3, 5, rng, 1.0f);
  const Tensor4 before = cache;
  ASSERT_TRUE(update_cache(value.view(), cache.out(), 6).is_ok());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 10; ++s)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 0; d < 5; ++d) {
          const float want = s >= 6 ? value.at(b, s - 6, h, d) : before.data[((b * 10 + s) * 3 + h) * 5 + d];
          ASSERT_EQ(cache.at(b, s, h, d), want);
        }
}

TEST(Attention, BadInputIsRefusedByName) {
  std::mt19937 rng(1);
  Tensor4 q = random(1, 3, 4, 8, rng, 1.0f), cache = random(1, 10, 2, 8, rng, 1.0f), out(1, 3, 4, 8);
  const auto fails = [](const Status& s, const char* what) {
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(std::string(s.message()).find(what), std::string::npos) << s.message();
  };
  fails(attention(q.view(), cache.view(), cache.view(), 8, out.out()), "start_pos");
  fails(attention(q.view(), cache.view(), cache.view(), -1, out.out()), "start_pos");
  Tensor4 three_heads(1, 10, 3, 8);
  fails(attention(q.view(), three_heads.view(), three_heads.view(), 0, out.out()), "k_cache");
  Tensor4 wrong_out(1, 3, 4, 7);
  fails(attention(q.view(), cache.view(), cache.view(), 0, wrong_out.out()), "out");
  fails(update_cache(q.view(), cache.out(), 0), "cache: expected 4 heads");
  Tensor4 value(1, 3, 2, 8);
  fails(update_cache(value.view(), cache.out(), 8), "start_pos");
  ConstHeads empty;
  fails(attention(empty, cache.view(), cache.view(), 0, out.out()), "q");
  fails(attention(q.view(), cache.view(), cache.view(), 0, out.out(), 2, 5), "head_begin, head_end: expected 0 <=");
  fails(attention(q.view(), cache.view(), cache.view(), 0, out.out(), 3, 2), "head_begin, head_end");
  fails(attention(q.view(), cache.view(), cache.view(), 0, out.out(), -1, 2), "head_begin, head_end");
  fails(attention(q.view(), cache.view(), cache.view(), 8, out.out(), 0, 0), "start_pos");  // checked, none computed
}

}  // namespace
}  // namespace spec_edge
