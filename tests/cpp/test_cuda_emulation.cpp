// The CUDA build's kernels (custom_ops/cuda/src/ops.cu), run on the host (cuda_emulation.h),
// give the core's results: the same tokens, the same errors, on every op, dtype and tile edge.
// bench/gpu_check.sh runs the same comparison on a GPU (tests/test_cuda.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation.h"
#include "spec_edge/detail/kept_set.h"
#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/cuda_ops.h"
#include "spec_edge/ops.h"
#include "test_helpers.h"

namespace spec_edge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const int64_t kVocabs[] = {1, 2, 63, 64, 65, 300, 2100};
const DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// float32 at every size, the half dtypes at two (their loads are the only difference).
std::vector<DType> dtypes_for(int64_t V) {
  if (V == 65 || V == 300) return {std::begin(kDTypes), std::end(kDTypes)};
  return {DType::kFloat32};
}

// [B, R, V] scores in each dtype (values read back from the narrow dtypes, so all see the same).
using testing::Out;

struct Scores {
  std::vector<float> f32;
  std::vector<uint16_t> f16, bf16;
  int64_t B, R, V;
  Scores(std::vector<float> v, int64_t b, int64_t r, int64_t vocab) : f32(std::move(v)), B(b), R(r), V(vocab) {
    for (const float x : f32) {
      f16.push_back(testing::to_half_bits(x));
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      bf16.push_back(static_cast<uint16_t>(bits >> 16));
    }
  }
  Rows rows(DType d) const {
    const void* data = d == DType::kFloat32 ? static_cast<const void*>(f32.data())
                       : d == DType::kFloat16 ? static_cast<const void*>(f16.data())
                                              : static_cast<const void*>(bf16.data());
    return Rows::contiguous(data, d, B, R, V);
  }
};

std::vector<float> logits(std::mt19937& rng, int64_t n, float scale = 3.0f) {
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

std::vector<float> probs(std::mt19937& rng, int64_t B, int64_t R, int64_t V) {
  std::vector<float> v = logits(rng, B * R * V);
  for (int64_t r = 0; r < B * R; ++r) {
    float* row = v.data() + r * V;
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += row[j] = std::exp(row[j]);
    for (int64_t j = 0; j < V; ++j) row[j] = static_cast<float>(row[j] / sum);
  }
  return v;
}

// The argmax of each [R] row of `s` (f32 values) for the first K rows, perturbed in every second
// sequence at position 1: drafts that are accepted and rejected.
std::vector<int64_t> greedy_drafts(const std::vector<float>& s, int64_t B, int64_t R, int64_t V, int64_t K) {
  std::vector<int64_t> t(B * K);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < K; ++i) {
      const float* row = s.data() + (b * R + i) * V;
      t[b * K + i] = std::max_element(row, row + V) - row;
      if (i == 1 && b % 2 == 1) t[b * K + i] = (t[b * K + i] + 1) % V;
    }
  return t;
}

void expect_same_status(const Status& core, const Status& gpu) {
  EXPECT_EQ(core.code(), gpu.code());
  EXPECT_STREQ(core.message(), gpu.message());
}

TEST(CudaEmulation, VerifyGreedyGivesTheCoresTokens) {
  std::mt19937 rng(1);
  const int64_t B = 3, K = 3;
  for (const int64_t V : kVocabs) {
    const Scores p(probs(rng, B, K + 1, V), B, K + 1, V);
    const std::vector<int64_t> drafts = greedy_drafts(p.f32, B, K + 1, V, K);
    for (const DType d : dtypes_for(V)) {
      std::vector<int64_t> n0(B), t0(B), n1(B, -7), t1(B, -7);
      const Status a = verify_greedy(p.rows(d), testing::tokens(drafts, B, K), {n0.data(), t0.data()});
      const Status g = cuda::verify_greedy(p.rows(d), testing::tokens(drafts, B, K), {n1.data(), t1.data()}, nullptr);
      ASSERT_TRUE(a.is_ok()) << a.message();
      expect_same_status(a, g);
      EXPECT_EQ(n0, n1) << "V=" << V;
      EXPECT_EQ(t0, t1) << "V=" << V;
    }
  }
}

TEST(CudaEmulation, AcceptGivesTheCoresTokens) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  const int64_t B = 4, K = 3;
  for (const int64_t V : kVocabs) {
    const Scores p(probs(rng, B, K + 1, V), B, K + 1, V);
    std::vector<float> qv = p.f32;  // the target's rows, perturbed: some drafts pass
    qv.resize(B * K * V);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j)
          qv[(b * K + i) * V + j] = p.f32[(b * (K + 1) + i) * V + j] * (0.5f + static_cast<float>(unif(rng)));
    const Scores q(qv, B, K, V);
    const std::vector<int64_t> drafts = greedy_drafts(q.f32, B, K, V, K);
    for (int rep = 0; rep < 1; ++rep) {
      std::vector<double> u(B * (K + 1));
      for (double& x : u) x = unif(rng);
      for (const DType d : dtypes_for(V))
        for (const bool draft_free : {false, true}) {
          const Rows qr = q.rows(d);
          const Rows* qp = draft_free ? nullptr : &qr;
          std::vector<int64_t> n0(B), t0(B), n1(B, -7), t1(B, -7);
          const Status a = accept(p.rows(d), qp, testing::tokens(drafts, B, K), testing::uniforms(u, B, K + 1),
                                  {n0.data(), t0.data()});
          const Status g = cuda::accept(p.rows(d), qp, testing::tokens(drafts, B, K),
                                        testing::uniforms(u, B, K + 1), {n1.data(), t1.data()}, nullptr);
          ASSERT_TRUE(a.is_ok()) << a.message();
          expect_same_status(a, g);
          EXPECT_EQ(n0, n1) << "V=" << V;
          EXPECT_EQ(t0, t1) << "V=" << V;
        }
    }
  }
}

TEST(CudaEmulation, VerifyGivesTheCoresTokens) {
  std::mt19937 rng(3);
  const int64_t B = 4, K = 3;
  for (const int64_t V : kVocabs) {
    std::vector<float> tv = logits(rng, B * (K + 1) * V), dv(B * K * V);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) dv[(b * K + i) * V + j] = tv[(b * (K + 1) + i) * V + j] + noise(rng);
    if (V > 1) {  // masked logits on both sides
      tv[5] = -kInf;
      dv[7] = -kInf;
    }
    const Scores t(tv, B, K + 1, V), dr(dv, B, K, V);
    const std::vector<int64_t> drafts = greedy_drafts(dr.f32, B, K, V, K);
    const std::vector<int64_t> num_draft = {3, 0, 2, 1}, prev = {0, 3 % V, -1, 0, 7 % V, 1 % V};
    const std::vector<int64_t> seeds = {11, 1ll << 40, 5, 123456789}, offsets = {0, 9, 1ll << 33, 2};
    for (const float T : {0.0f, 1.2f})
      for (const float penalty : {1.0f, 1.3f})
        for (const DType d : dtypes_for(V)) {
          VerifyParams params;
          params.temperature = {&T, 1};
          params.seed = {seeds.data(), B};
          params.offset = {offsets.data(), B};
          params.num_draft = num_draft.data();
          params.filters.repetition_penalty = {&penalty, 1};
          params.filters.prev_tokens = testing::tokens(prev, 1, static_cast<int64_t>(prev.size()));
          std::vector<int64_t> len0(B), out0(B * (K + 1)), len1(B, -7), out1(B * (K + 1), -7);
          const Status a = verify(t.rows(d), dr.rows(d), testing::tokens(drafts, B, K), params,
                                  {len0.data(), out0.data(), K + 1});
          const Status g = cuda::verify(t.rows(d), dr.rows(d), testing::tokens(drafts, B, K), params,
                                        {len1.data(), out1.data(), K + 1}, nullptr);
          ASSERT_TRUE(a.is_ok()) << a.message();
          expect_same_status(a, g);
          EXPECT_EQ(len0, len1) << "V=" << V << " T=" << T << " penalty=" << penalty;
          EXPECT_EQ(out0, out1) << "V=" << V << " T=" << T << " penalty=" << penalty;
        }
  }
}

TEST(CudaEmulation, SampleGivesTheCoresTokens) {
  std::mt19937 rng(4);
  const int64_t B = 6;
  for (const int64_t V : kVocabs) {
    std::vector<float> x = logits(rng, B * V);
    for (int64_t j = 0; j < V; ++j) {
      x[j] = j == V / 2 ? 0.0f : -kInf;  // one allowed token
      x[V + j] = 1.0f;                   // a flat row
      if (j % 3 == 1) x[2 * V + j] = -kInf;
    }
    x[3 * V + V - 1] = 12.0f;  // the maximum in the last block
    const Scores s(x, B, 1, V);
    const std::vector<int64_t> prev = {1 % V, V - 1, -1, 0};
    for (const float T : {0.0f, 0.6f, 2.0f})
      for (const float penalty : {1.0f, 0.8f})
        for (const DType d : dtypes_for(V)) {
          const int64_t seed = 77 + V, offset = static_cast<int64_t>(T * 10);
          SampleParams params;
          params.temperature = {&T, 1};
          params.seed = {&seed, 1};
          params.offset = {&offset, 1};
          params.filters.repetition_penalty = {&penalty, 1};
          params.filters.prev_tokens = testing::tokens(prev, 1, 4);
          std::vector<int64_t> t0(B), t1(B, -7);
          const Status a = sample(s.rows(d), params, t0.data());
          const Status g = cuda::sample(s.rows(d), params, t1.data(), nullptr);
          ASSERT_TRUE(a.is_ok()) << a.message();
          expect_same_status(a, g);
          EXPECT_EQ(t0, t1) << "V=" << V << " T=" << T << " penalty=" << penalty;
        }
  }
}

// Tokens rarely depend on the last bit of a mass, so the acceptance test is put exactly at its
// threshold: rows whose block sums depend on the order of the fold (a 1 among values it absorbs
// one by one but not in pairs), and uniforms on either side of u * q(t) * P = p(t) * Q with the
// core's P and Q. A mass summed in another order moves one of the two decisions.
TEST(CudaEmulation, MassesAreSummedInTheReferenceOrder) {
  const int64_t V = 3 * 64 + 5, K = 1, t = 70;
  std::vector<float> x(2 * (K + 1) * V);
  for (int64_t r = 0; r < 2 * (K + 1); ++r)
    for (int64_t j = 0; j < V; ++j) x[r * V + j] = j % 64 == (r * 7) % 64 ? 1.0f : std::ldexp(1.0f, -25 - static_cast<int>(r));
  std::vector<float> q(x.begin() + (K + 1) * V, x.begin() + (K + 1) * V + K * V);
  q[t] = 2.0f * x[t];
  const Scores ps(std::vector<float>(x.begin(), x.begin() + (K + 1) * V), 1, K + 1, V), qs(q, 1, K, V);
  const RowKernels& k = reference_row_kernels(DType::kFloat32);
  const double P = k.prob_mass(ps.f32.data(), V, -1).mass, Q = k.prob_mass(qs.f32.data(), V, -1).mass;
  const double pt = ps.f32[t], qt = qs.f32[t];
  double u = pt * Q / (qt * P);
  while (!(u * qt * P <= pt * Q)) u = std::nextafter(u, 0.0);
  while (std::nextafter(u, 1.0) * qt * P <= pt * Q) u = std::nextafter(u, 1.0);
  ASSERT_LT(u, 1.0);
  const std::vector<int64_t> draft = {t};
  for (const double ui : {u, std::nextafter(u, 1.0)}) {
    const std::vector<double> uniforms = {ui, 0.5};
    Out core, gpu;
    const Rows qr = qs.rows(DType::kFloat32);
    ASSERT_TRUE(accept(ps.rows(DType::kFloat32), &qr, testing::tokens(draft, 1, K),
                       testing::uniforms(uniforms, 1, K + 1), core.view()).is_ok());
    ASSERT_TRUE(cuda::accept(ps.rows(DType::kFloat32), &qr, testing::tokens(draft, 1, K),
                             testing::uniforms(uniforms, 1, K + 1), gpu.view(), nullptr).is_ok());
    EXPECT_EQ(core.n, ui == u ? 1 : 0);
    EXPECT_EQ(gpu.n, core.n) << "u = " << ui;
    EXPECT_EQ(gpu.next, core.next);
  }
}

// Each bad row: the same error (code and message) from both builds.
TEST(CudaEmulation, ValueErrorsMatchTheCore) {
  const int64_t B = 2, V = 130, K = 1;
  const std::vector<int64_t> drafts = {3, 4};
  const float T = 0.8f, penalty = 0.5f;
  const int64_t seed = 1, offset = 0;
  const std::vector<int64_t> prev = {4};
  for (int c = 0; c < 6; ++c) {
    std::vector<float> x(B * (K + 1) * V, 0.5f);
    float pen = 1.0f;
    switch (c) {
      case 0: x[(1 * (K + 1) + 0) * V + 17] = std::nanf(""); break;  // NaN in sequence 1, row 0
      case 1: x[70] = kInf; break;
      case 2: std::fill(x.begin() + 2 * V, x.begin() + 3 * V, -kInf); break;  // a masked row
      case 3: x[4] = 3e38f; pen = penalty; break;                             // the penalty overflows
      case 4: x[V + 9] = -0.25f; break;                                       // a negative probability
      case 5: std::fill(x.begin(), x.begin() + V, 0.0f); break;               // a zero mass
    }
    const Scores s(x, B, K + 1, V);
    if (c >= 4) {
      const std::vector<double> u = {0.5, 0.5, 0.5, 0.5};
      std::vector<int64_t> n(B), t(B);
      expect_same_status(accept(s.rows(DType::kFloat32), nullptr, testing::tokens(drafts, B, K),
                                testing::uniforms(u, B, K + 1), {n.data(), t.data()}),
                         cuda::accept(s.rows(DType::kFloat32), nullptr, testing::tokens(drafts, B, K),
                                      testing::uniforms(u, B, K + 1), {n.data(), t.data()}, nullptr));
      continue;
    }
    VerifyParams params;
    params.temperature = {&T, 1};
    params.seed = {&seed, 1};
    params.offset = {&offset, 1};
    params.filters.repetition_penalty = {&pen, 1};
    params.filters.prev_tokens = testing::tokens(prev, 1, 1);
    const Rows target = s.rows(DType::kFloat32);
    Rows draft = target;
    draft.rows = K;
    std::vector<int64_t> len(B), out(B * (K + 1));
    const Status a = verify(target, draft, testing::tokens(drafts, B, K), params, {len.data(), out.data(), K + 1});
    EXPECT_FALSE(a.is_ok()) << "case " << c;
    expect_same_status(a, cuda::verify(target, draft, testing::tokens(drafts, B, K), params,
                                       {len.data(), out.data(), K + 1}, nullptr));
    SampleParams sp{params.temperature, params.seed, params.offset, params.filters};
    Rows first = target;
    first.rows = 1;
    first.row_stride = 0;
    std::vector<int64_t> tokens(B);
    expect_same_status(sample(first, sp, tokens.data()), cuda::sample(first, sp, tokens.data(), nullptr));
  }
}

// The edges of docs/OPS.md's row rule, in every op: a row with no finite logit is an error at
// T = 0 as at T > 0 (also when the penalty takes its last finite logit); filter_logits refuses
// a finite row whose y / T overflows float. Both builds, the same message.
TEST(CudaEmulation, EdgeRowsMatchTheCore) {
  const int64_t V = 70, K = 1;
  const std::vector<int64_t> drafts = {3}, prev = {5};
  const int64_t seed = 1, offset = 0;
  for (const float T : {0.0f, 0.8f}) {
    for (int c = 0; c < 2; ++c) {
      std::vector<float> x((K + 1) * V, -kInf);
      float pen = 1.0f;
      if (c == 1) x[5] = -3e38f, pen = 2.0f;  // the penalty makes the only finite logit -inf
      const Scores s(x, 1, K + 1, V);
      VerifyParams params;
      params.temperature = {&T, 1};
      params.seed = {&seed, 1};
      params.offset = {&offset, 1};
      params.filters.repetition_penalty = {&pen, 1};
      params.filters.prev_tokens = testing::tokens(prev, 1, 1);
      const Rows target = s.rows(DType::kFloat32);
      Rows draft = target, first = target;
      draft.rows = K;
      first.rows = 1;
      std::vector<int64_t> len(1), out(K + 1), tokens(1);
      const Status a = verify(target, draft, testing::tokens(drafts, 1, K), params, {len.data(), out.data(), K + 1});
      EXPECT_NE(std::string(a.message()).find("target_logits[0, 0] has no finite logit"), std::string::npos)
          << "T = " << T << ", case " << c << ": " << a.message();
      expect_same_status(a, cuda::verify(target, draft, testing::tokens(drafts, 1, K), params,
                                         {len.data(), out.data(), K + 1}, nullptr));
      const SampleParams sp{params.temperature, params.seed, params.offset, params.filters};
      const Status b = sample(first, sp, tokens.data());
      EXPECT_NE(std::string(b.message()).find("logits[0] has no finite logit"), std::string::npos) << b.message();
      expect_same_status(b, cuda::sample(first, sp, tokens.data(), nullptr));
      std::vector<float> y(V);
      expect_same_status(filter_logits(first, params.temperature, params.filters, y.data(), V),
                         cuda::filter_logits(first, params.temperature, params.filters, y.data(), V, nullptr));
      if (c == 0) {
        std::vector<int64_t> n(1), t(1);
        const Status g = verify_greedy(target, testing::tokens(drafts, 1, K), {n.data(), t.data()});
        EXPECT_NE(std::string(g.message()).find("target_probs[0, 0] has no finite logit"), std::string::npos);
        expect_same_status(g, cuda::verify_greedy(target, testing::tokens(drafts, 1, K), {n.data(), t.data()}, nullptr));
      }
    }
  }
  // Finite logits near float max: y / T overflows at T < 1, filtered or not; T = 1 is fine.
  std::vector<float> x(V, 3e38f);
  x[0] = -3e38f;
  const Scores s(x, 1, 1, V);
  const int64_t top_k = 3;
  for (const float T : {0.5f, 1.0f}) {
    for (bool filtered : {false, true}) {
      Filters f;
      if (filtered) f.top_k = {&top_k, 1};
      std::vector<float> y(V);
      const Status a = filter_logits(s.rows(DType::kFloat32), {&T, 1}, f, y.data(), V);
      EXPECT_EQ(a.is_ok(), T == 1.0f) << a.message();
      if (!a.is_ok())
        EXPECT_NE(std::string(a.message()).find("logits[0, 1] = 3e+38: divided by the temperature 0.5 it overflows"),
                  std::string::npos) << a.message();
      expect_same_status(a, cuda::filter_logits(s.rows(DType::kFloat32), {&T, 1}, f, y.data(), V, nullptr));
    }
  }
  // The output takes the logits' dtype: 6e4 / 0.1 overflows float16, whose output would be inf.
  std::vector<float> h(V, 0.0f);
  h[3] = 6e4f;
  const Scores s16(h, 1, 1, V);
  const float T = 0.1f;
  std::vector<float> y(V);
  const Status a = filter_logits(s16.rows(DType::kFloat16), {&T, 1}, Filters{}, y.data(), V);
  EXPECT_NE(std::string(a.message()).find("logits[0, 3] = 60000: divided by the temperature 0.1 it overflows float16"),
            std::string::npos) << a.message();
  expect_same_status(a, cuda::filter_logits(s16.rows(DType::kFloat16), {&T, 1}, Filters{}, y.data(), V, nullptr));
}

// Top-k, top-p and min-p, alone and together: the kept sets, the draws and filter_logits' rows
// equal the core's.
struct FilterCase {
  int64_t top_k;
  float top_p, min_p, penalty;
};
const FilterCase kFilterCases[] = {{1, 1.0f, 0.0f, 1.0f},     {5, 1.0f, 0.0f, 1.0f},   {40, 0.9f, 0.0f, 1.0f},
                                   {40, 0.6f, 0.05f, 1.2f},   {300, 0.95f, 0.1f, 0.9f}, {7, 1.0f, 0.3f, 1.0f},
                                   {0, 0.9f, 0.0f, 1.0f},     {0, 0.5f, 0.02f, 1.3f},  {0, 1.0f, 0.2f, 1.0f},
                                   {0, 0.999f, 0.0f, 0.8f}};

// A row that top-p's strided sample misjudges: its sampled tokens (kept_set.h's
// guess_sample_size) at 0, the others at -2, so the candidates above the guess fall short of the
// top-p mass and every token becomes a candidate.
void plant_misleading_sample(float* row, int64_t V) {
  const int64_t S = guess_sample_size(V, kTopPGuessSample);
  for (int64_t j = 0; j < V; ++j) row[j] = -2.0f;
  for (int64_t i = 0; i < S; ++i) row[i * V / S] = 0.0f;
}

void set_filters(const FilterCase& c, Filters& f, const std::vector<int64_t>& prev) {
  f.top_k = {&c.top_k, 1};
  f.top_p = {&c.top_p, 1};
  f.min_p = {&c.min_p, 1};
  f.repetition_penalty = {&c.penalty, 1};
  f.prev_tokens = testing::tokens(prev, 1, static_cast<int64_t>(prev.size()));
}

TEST(CudaEmulation, FilteredSampleAndFilterLogitsGiveTheCoresResults) {
  std::mt19937 rng(6);
  const int64_t B = 4;
  for (const int64_t V : {int64_t{1}, int64_t{65}, int64_t{300}, int64_t{2100}}) {
    std::vector<float> x = logits(rng, B * V);
    for (int64_t j = 0; j < V; ++j) {
      x[V + j] = std::floor(x[V + j]);  // many ties, at the top-k boundary too
      if (j % 2 == 1) x[3 * V + j] = -kInf;
    }
    plant_misleading_sample(&x[2 * V], V);
    const Scores s(x, B, 1, V);
    const std::vector<int64_t> prev = {0, (V - 1) / 2, -1};
    for (const FilterCase& c : kFilterCases) {
      for (const float T : {0.0f, 0.7f, 1.5f})
        for (const DType d : dtypes_for(V)) {
          if (T == 0.0f && c.top_k != 5) continue;  // greedy ignores the filters: one case
          SampleParams params;
          const int64_t seed = 5, offset = c.top_k;
          params.temperature = {&T, 1};
          params.seed = {&seed, 1};
          params.offset = {&offset, 1};
          set_filters(c, params.filters, prev);
          std::vector<int64_t> t0(B), t1(B, -7);
          const Status a = sample(s.rows(d), params, t0.data());
          ASSERT_TRUE(a.is_ok()) << a.message();
          expect_same_status(a, cuda::sample(s.rows(d), params, t1.data(), nullptr));
          EXPECT_EQ(t0, t1) << "V=" << V << " T=" << T << " top_k=" << c.top_k;
          std::vector<float> f0(B * V), f1(B * V, 1.0f);
          expect_same_status(filter_logits(s.rows(d), params.temperature, params.filters, f0.data(), V),
                             cuda::filter_logits(s.rows(d), params.temperature, params.filters, f1.data(), V, nullptr));
          EXPECT_EQ(0, std::memcmp(f0.data(), f1.data(), f0.size() * sizeof(float)))
              << "V=" << V << " T=" << T << " top_k=" << c.top_k;
        }
    }
  }
}

TEST(CudaEmulation, FilteredVerifyGivesTheCoresTokens) {
  std::mt19937 rng(7);
  const int64_t B = 4, K = 3;
  for (const int64_t V : {int64_t{65}, int64_t{300}, int64_t{2100}}) {
    std::vector<float> tv = logits(rng, B * (K + 1) * V), dv(B * K * V);
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) dv[(b * K + i) * V + j] = tv[(b * (K + 1) + i) * V + j] + noise(rng);
    for (int64_t i = 0; i <= K; ++i) plant_misleading_sample(&tv[(K + 1 + i) * V], V);  // sequence 1
    plant_misleading_sample(&dv[K * V], V);
    for (int64_t i = 0; i <= K; ++i) plant_misleading_sample(&tv[(K + 1 + i) * V], V);  // sequence 1
    plant_misleading_sample(&dv[K * V], V);
    const Scores t(tv, B, K + 1, V), dr(dv, B, K, V);
    const std::vector<int64_t> drafts = greedy_drafts(dr.f32, B, K, V, K);
    const std::vector<int64_t> num_draft = {3, 2, 0, 3}, prev = {1, 2, -1};
    const std::vector<int64_t> seeds = {3, 4, 5, 6}, offsets = {0, 1, 2, 3};
    for (const FilterCase& c : kFilterCases)
      for (const float T : {c.top_k % 2 ? 0.8f : 1.4f}) {
          VerifyParams params;
        params.temperature = {&T, 1};
        params.seed = {seeds.data(), B};
        params.offset = {offsets.data(), B};
        params.num_draft = num_draft.data();
        set_filters(c, params.filters, prev);
        std::vector<int64_t> len0(B), out0(B * (K + 1)), len1(B, -7), out1(B * (K + 1), -7);
        const Status a = verify(t.rows(DType::kFloat32), dr.rows(DType::kFloat32), testing::tokens(drafts, B, K),
                                params, {len0.data(), out0.data(), K + 1});
        ASSERT_TRUE(a.is_ok()) << a.message();
        expect_same_status(a, cuda::verify(t.rows(DType::kFloat32), dr.rows(DType::kFloat32),
                                           testing::tokens(drafts, B, K), params,
                                           {len1.data(), out1.data(), K + 1}, nullptr));
        EXPECT_EQ(len0, len1) << "V=" << V << " T=" << T << " top_k=" << c.top_k;
        EXPECT_EQ(out0, out1) << "V=" << V << " T=" << T << " top_k=" << c.top_k;
      }
  }
}

// The emulation's own negative control: threads waiting at different barriers (half of each warp
// at __syncthreads, half at a shuffle) stop the run.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x % 32 < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

TEST(CudaEmulationDeathTest, ThreadsAtDifferentBarriersStopTheRun) {
  std::vector<int> out(64);
  EXPECT_DEATH(emulation::launch(divergent_barrier_kernel, 1, 64, out.data()), "deadlocks");
}

}  // namespace
}  // namespace spec_edge
