// Every ISA path computes the same bits as the scalar reference, row pass by row pass, across
// tile edges, dtypes, value distributions and the NaN/inf policy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/numerics.h"
#include "spec_edge/dispatch.h"
#include "test_helpers.h"

namespace spec_edge {
namespace {

using testing::to_half_bits;

const int64_t kSizes[] = {1,  2,  3,  4,  5,  7,  8,   15,  16,  17,  31,   32,  33,
                          63, 64, 65, 96, 127, 128, 129, 255, 256, 257, 1000, 4099};

struct Row {
  std::vector<float> f32;
  std::vector<uint16_t> f16, bf16;
  const void* data(DType d) const {
    return d == DType::kFloat32 ? static_cast<const void*>(f32.data())
                                : d == DType::kFloat16 ? static_cast<const void*>(f16.data())
                                                       : static_cast<const void*>(bf16.data());
  }
};

// Values in the row's dtype, read back so that every dtype sees exactly representable data.
Row make_row(std::vector<float> v) {
  Row r;
  for (float x : v) {
    r.f16.push_back(to_half_bits(x));
    uint32_t b;
    std::memcpy(&b, &x, 4);
    r.bf16.push_back(static_cast<uint16_t>(b >> 16));  // truncation: still a valid bf16
  }
  r.f32 = std::move(v);
  return r;
}

enum class Dist { kProbs, kSparseProbs, kLogits, kMaskedLogits, kTies };

std::vector<float> values(std::mt19937& rng, int64_t n, Dist dist) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (dist) {
      case Dist::kProbs: x = u(rng); break;
      case Dist::kSparseProbs: x = u(rng) < 0.7f ? 0.0f : u(rng) * 1e-3f; break;
      case Dist::kLogits: x = g(rng); break;
      case Dist::kMaskedLogits: x = u(rng) < 0.5f ? -std::numeric_limits<float>::infinity() : g(rng); break;
      case Dist::kTies: x = std::floor(u(rng) * 4.0f); break;
    }
  }
  if (dist == Dist::kSparseProbs) v[rng() % n] = 0.5f;
  if (dist == Dist::kMaskedLogits) v[rng() % n] = 1.0f;
  return v;
}

class PathTest : public ::testing::TestWithParam<const char*> {};

// SPEC_EDGE_PATH_CASES sets the number of random cases (default 10^5; the slower emulated
// tiers may run fewer).
int64_t case_count() {
  const char* env = std::getenv("SPEC_EDGE_PATH_CASES");
  return env != nullptr ? std::atoll(env) : 100000;
}

TEST_P(PathTest, IdenticalToReference) {
  const char* isa = GetParam();
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    if (row_kernels_for(isa, dtype) == nullptr) GTEST_SKIP() << isa << " is not available on this CPU/build";
  std::mt19937 rng(1234);
  const int64_t total = case_count();
  int64_t cases = 0;
  for (; cases < total; ++cases) {
    const DType dtype = static_cast<DType>(cases % 3);
    const RowKernels* k = row_kernels_for(isa, dtype);
    const RowKernels& ref = reference_row_kernels(dtype);
    // Mostly tile edges up to a few blocks; 2% long rows.
    const int64_t n = rng() % 50 == 0 ? kSizes[23 + rng() % 2] : kSizes[rng() % 23];
    {
      {
        const int rep = static_cast<int>(cases / 3);
        const Dist dist = static_cast<Dist>(rep % 5);
        const Row p = make_row(values(rng, n, dist));
        const Row q = make_row(values(rng, n, dist == Dist::kMaskedLogits ? Dist::kLogits : dist));
        const void *pd = p.data(dtype), *qd = q.data(dtype);
        const std::string where = std::string(isa) + " dtype=" + dtype_name(dtype) + " n=" + std::to_string(n) + " rep=" + std::to_string(rep);
        const ArgmaxResult a = k->argmax(pd, n), ar = ref.argmax(pd, n);
        ASSERT_EQ(a.index, ar.index) << where;
        ASSERT_EQ(a.nan_at, ar.nan_at) << where;
        const MaxResult mx = k->logit_max(pd, n), mxr = ref.logit_max(pd, n);
        ASSERT_EQ(mx.clean, mxr.clean) << where;
        if (mxr.clean) ASSERT_EQ(mx.max, mxr.max) << where;
        std::uniform_real_distribution<double> u(0.0, 1.0);
        if (dist == Dist::kProbs || dist == Dist::kSparseProbs || dist == Dist::kTies) {
          const int64_t exclude = rep % 3 == 0 ? -1 : static_cast<int64_t>(rng() % n);
          const MassResult m = k->prob_mass(pd, n, exclude), mr = ref.prob_mass(pd, n, exclude);
          ASSERT_EQ(m.mass, mr.mass) << where;
          for (int d = 0; d < 4; ++d) {
            const double t = u(rng) * mr.mass;
            ASSERT_EQ(k->prob_scan(pd, n, exclude, t), ref.prob_scan(pd, n, exclude, t)) << where;
          }
          const float a1 = 1.0f / static_cast<float>(ref.prob_mass(pd, n, -1).mass + 1e-30);
          const float b1 = 1.0f / static_cast<float>(ref.prob_mass(qd, n, -1).mass + 1e-30);
          const double R = ref.prob_residual_mass(pd, qd, n, a1, b1);
          ASSERT_EQ(k->prob_residual_mass(pd, qd, n, a1, b1), R) << where;
          const double t = u(rng) * R;
          ASSERT_EQ(k->prob_residual_scan(pd, qd, n, a1, b1, t), ref.prob_residual_scan(pd, qd, n, a1, b1, t)) << where;
        }
        if (mxr.clean && mxr.max > -std::numeric_limits<float>::infinity()) {
          const MaxResult mq = ref.logit_max(qd, n);
          // Patches (the repetition penalty's) on every other case: ascending indices, dense or
          // (one case in four) sparse, which splits the runs of patch-free blocks.
          std::vector<int64_t> patch_index;
          std::vector<float> patch_value;
          const uint32_t spacing = rep % 4 == 3 ? 700 : 40;
          if (rep % 2 == 1)
            for (int64_t j = static_cast<int64_t>(rng() % 3); j < n; j += 1 + static_cast<int64_t>(rng() % spacing)) {
              patch_index.push_back(j);
              patch_value.push_back(ref.load(pd, j) * 1.5f - 0.5f);
            }
          const Patches patches{patch_index.data(), patch_value.data(), static_cast<int64_t>(patch_index.size())};
          const float pmax = ref.patched_max(pd, n, patches);
          ASSERT_EQ(k->patched_max(pd, n, patches), pmax) << where;
          std::vector<int64_t> got(n), want(n);
          std::vector<float> got_values(n), want_values(n), sums((n + 63) / 64);
          std::vector<float> maxima(sums.size()), maxima_got(sums.size());
          const MaxResult mm = ref.block_maxima(pd, n, patches, maxima.data());
          const MaxResult mg = k->block_maxima(pd, n, patches, maxima_got.data());
          ASSERT_TRUE(mm.clean && mg.clean) << where;
          ASSERT_EQ(mm.max, pmax) << where;
          ASSERT_EQ(mg.max, pmax) << where;
          ASSERT_EQ(maxima_got, maxima) << where;
          for (float T : {0.3f, 1.0f, 1.7f}) {
            const ExpMap ep{pmax, 1.0f / T, patches}, eq{mq.max, 1.0f / T};
            const float threshold = -static_cast<float>(u(rng) * 6.0);
            const CollectResult c = k->collect(pd, n, ep, threshold, got.data(), got_values.data()),
                                cr = ref.collect(pd, n, ep, threshold, want.data(), want_values.data());
            ASSERT_EQ(c.count, cr.count) << where;
            ASSERT_EQ(c.clean, cr.clean) << where;
            ASSERT_TRUE(std::equal(want.begin(), want.begin() + cr.count, got.begin())) << where;
            ASSERT_TRUE(std::equal(want_values.begin(), want_values.begin() + cr.count, got_values.begin())) << where;
            k->exp_values(want_values.data(), cr.count, ep, got_values.data());
            ref.exp_values(want_values.data(), cr.count, ep, want_values.data());
            ASSERT_TRUE(std::equal(want_values.begin(), want_values.begin() + cr.count, got_values.begin())) << where;
            const double P = ref.exp_mass(pd, n, ep);
            ASSERT_EQ(k->exp_mass(pd, n, ep), P) << where << " T=" << T;
            ref.exp_blocks(pd, n, ep, nullptr, static_cast<int64_t>(sums.size()), sums.data(), nullptr);
            const double t = u(rng) * P;
            const int64_t drawn = ref.exp_scan(pd, n, ep, nullptr, t);
            ASSERT_EQ(k->exp_scan(pd, n, ep, nullptr, t), drawn) << where;
            ASSERT_EQ(k->exp_scan(pd, n, ep, sums.data(), t), drawn) << where;
            const float a = (1.0f / T) * kBoundScale;
            std::vector<float> refs(sums.size()), bounds(sums.size()), refs_got(sums.size()), bounds_got(sums.size());
            const MaxResult bp = ref.bound_pass(pd, n, patches, a, refs.data(), bounds.data());
            const MaxResult bg = k->bound_pass(pd, n, patches, a, refs_got.data(), bounds_got.data());
            ASSERT_TRUE(bp.clean && bg.clean) << where;
            ASSERT_EQ(bp.max, pmax) << where;
            ASSERT_EQ(bg.max, pmax) << where;
            ASSERT_EQ(refs_got, refs) << where;
            ASSERT_EQ(bounds_got, bounds) << where << " T=" << T;
            // exp_blocks: exp_mass's block sums, every block or some, and the numerators.
            std::vector<float> block_sums(sums.size(), -1.0f), numerators(n, -1.0f);
            std::vector<int64_t> some;
            for (int64_t b = static_cast<int64_t>(rng() % 3); b < static_cast<int64_t>(sums.size()); b += 1 + static_cast<int64_t>(rng() % 3))
              some.push_back(b);
            k->exp_blocks(pd, n, ep, some.data(), static_cast<int64_t>(some.size()), block_sums.data(), numerators.data());
            for (const int64_t b : some) ASSERT_EQ(block_sums[b], sums[b]) << where << " block " << b;
            k->exp_blocks(pd, n, ep, nullptr, static_cast<int64_t>(sums.size()), block_sums.data(), numerators.data());
            ASSERT_EQ(block_sums, sums) << where;
            std::vector<float> patched(n), want_numerators(n);
            for (int64_t j = 0; j < n; ++j) patched[j] = ref.load(pd, j);
            for (int64_t i = 0; i < patches.count; ++i) patched[patches.index[i]] = patches.value[i];
            ref.exp_values(patched.data(), n, ep, want_numerators.data());
            ASSERT_EQ(numerators, want_numerators) << where;
          }
        }
      }
    }
  }
  EXPECT_GE(cases, total);
}

TEST_P(PathTest, NanAndInfinityPolicy) {
  const char* isa = GetParam();
  const RowKernels* k = row_kernels_for(isa, DType::kFloat32);
  if (k == nullptr) GTEST_SKIP();
  const RowKernels& ref = reference_row_kernels(DType::kFloat32);
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 5, 64, 65, 200, 1100, 2100}) {  // the last two: whole groups of blocks
    for (int64_t at = 0; at < n; at += std::max<int64_t>(1, n / 7)) {
      for (float bad : {nan, inf, -inf, -1.0f, -0.0f}) {
        std::vector<float> v(n, 0.25f);
        v[at] = bad;
        const ArgmaxResult a = k->argmax(v.data(), n), ar = ref.argmax(v.data(), n);
        EXPECT_EQ(a.index, ar.index);
        EXPECT_EQ(a.nan_at, ar.nan_at);
        EXPECT_EQ(k->logit_max(v.data(), n).clean, ref.logit_max(v.data(), n).clean);
        std::vector<float> refs((n + 63) / 64), sums(refs.size());
        const bool bound_clean = k->bound_pass(v.data(), n, {}, kBoundScale, refs.data(), sums.data()).clean;
        EXPECT_EQ(bound_clean, ref.bound_pass(v.data(), n, {}, kBoundScale, refs.data(), sums.data()).clean);
        EXPECT_EQ(bound_clean, !(bad != bad || bad == inf)) << "n=" << n << " at=" << at;
        const bool maxima_clean = k->block_maxima(v.data(), n, {}, refs.data()).clean;
        EXPECT_EQ(maxima_clean, ref.block_maxima(v.data(), n, {}, refs.data()).clean);
        EXPECT_EQ(maxima_clean, bound_clean) << "n=" << n << " at=" << at;
        std::vector<int64_t> idx(n);
        std::vector<float> val(n);
        EXPECT_EQ(k->collect(v.data(), n, ExpMap{}, 0.0f, idx.data(), val.data()).clean,
                  ref.collect(v.data(), n, ExpMap{}, 0.0f, idx.data(), val.data()).clean);
        // prob_mass's flag may be conservative, but never misses a bad value
        const bool really_bad = !(bad >= 0.0f && bad <= 3.4e38f);
        if (really_bad) EXPECT_FALSE(k->prob_mass(v.data(), n, -1).clean) << "n=" << n << " at=" << at;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, PathTest, ::testing::Values("avx512", "avx2", "sse2", "neon", "vec128"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace spec_edge
