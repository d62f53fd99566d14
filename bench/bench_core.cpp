// The core ops on every ISA path, without any framework around them, next to a bytes-read
// bound (a vectorized sum over the bytes the op must read), single thread, one process.
// Usage: spec_edge_bench_core [--markdown]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "spec_edge/dispatch.h"
#include "spec_edge/ops.h"

using namespace spec_edge;

namespace {

template <class F>
double median_us(F&& fn) {
  fn();
  int iters = 1;
  for (;;) {  // calibrate to ~20 ms per sample
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.02 || iters > (1 << 24)) break;
    iters *= 2;
  }
  std::vector<double> samples;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    samples.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  std::nth_element(samples.begin(), samples.begin() + 3, samples.end());
  return samples[3];
}

volatile float g_sink;

// The bound: 8 independent float accumulators over n floats (vectorizes at -O3).
double bound_us(const std::vector<float>& buf) {
  return median_us([&] {
    float acc[8] = {0};
    const size_t n = buf.size() & ~size_t{7};
    for (size_t j = 0; j < n; j += 8)
      for (int l = 0; l < 8; ++l) acc[l] += buf[j + l];
    g_sink = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
  });
}

Rows rows_of(const std::vector<float>& d, int64_t batch, int64_t nrows, int64_t V) {
  Rows r;
  r.data = d.data();
  r.batch = batch;
  r.rows = nrows;
  r.vocab = V;
  r.row_stride = V;
  r.batch_stride = nrows * V;
  return r;
}

void row(const char* op, const char* isa, const char* shape, double us, double bound, double mb) {
  std::printf("| %s | %s | %s | %.1f | %.1f (%.2f MB) | %.2fx |\n", op, isa, shape, us, bound, mb, us / bound);
}

}  // namespace

int main() {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::printf("| op | path | shape | us | bytes-read bound us | vs bound |\n|---|---|---|---|---|---|\n");
  // Every path this build and CPU can run, best first.
  std::vector<std::string> isas;
  for (const char *p = available_isas(), *q = p;; ++q)
    if (*q == ',' || *q == '\0') {
      isas.emplace_back(p, q);
      if (*q == '\0') break;
      p = q + 1;
    }
  for (auto [V, K] : {std::pair<int64_t, int64_t>{32000, 4}, {128256, 5}}) {
    // Worst case for reads: every draft token accepted (draft == target, tokens = argmax).
    std::vector<float> p((K + 1) * V);
    for (auto& x : p) x = std::exp(normal(rng) * 0.5f);
    std::vector<int64_t> tokens(K);
    for (int64_t i = 0; i < K; ++i)
      tokens[i] = std::max_element(p.begin() + i * V, p.begin() + (i + 1) * V) - (p.begin() + i * V);
    std::vector<float> q(p.begin(), p.begin() + K * V), both(p);
    both.insert(both.end(), q.begin(), q.end());
    std::vector<double> u(K + 1, 0.5);
    Tokens t{tokens.data(), 1, K, K, 1};
    Uniforms uv{u.data(), DType::kFloat64, 1, K + 1, K + 1, 1};
    char shape[64];
    std::snprintf(shape, sizeof shape, "V=%lld, K=%lld", (long long)V, (long long)K);
    const double greedy_bound = bound_us(p), accept_bound = bound_us(both);
    for (const std::string& name : isas) {
      const char* isa = name.c_str();
      if (!select_isa(isa).is_ok()) continue;
      int64_t n, next;
      row("verify_greedy", isa, shape,
          median_us([&] { verify_greedy(rows_of(p, 1, K + 1, V), t, {&n, &next}); }), greedy_bound,
          p.size() * 4e-6);
      const Rows qr = rows_of(q, 1, K, V);
      row("accept", isa, shape,
          median_us([&] { accept(rows_of(p, 1, K + 1, V), &qr, t, uv, {&n, &next}); }), accept_bound,
          both.size() * 4e-6);
    }
  }
  const int64_t V = 32000, K = 4;
  for (int64_t B : {1, 8, 64}) {
    std::vector<float> tl(B * (K + 1) * V), dl(B * K * V), both;
    for (auto& x : tl) x = normal(rng);
    for (int64_t b = 0; b < B; ++b)
      std::copy(tl.begin() + b * (K + 1) * V, tl.begin() + b * (K + 1) * V + K * V, dl.begin() + b * K * V);
    std::vector<int64_t> tokens(B * K, 0), len(B), out(B * (K + 1));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < K; ++i) {
        const float* r = &dl[(b * K + i) * V];
        tokens[b * K + i] = std::max_element(r, r + V) - r;
      }
    both = tl;
    both.insert(both.end(), dl.begin(), dl.end());
    const float temp = 1.0f;
    const int64_t seed = 1, offset = 0;
    VerifyParams params;
    params.temperature = {&temp, 1};
    params.seed = {&seed, 1};
    params.offset = {&offset, 1};
    char shape[64];
    std::snprintf(shape, sizeof shape, "B=%lld, V=%lld, K=%lld, T=1", (long long)B, (long long)V, (long long)K);
    const double b_us = bound_us(both);
    for (const std::string& name : isas) {
      const char* isa = name.c_str();
      if (!select_isa(isa).is_ok()) continue;
      row("verify", isa, shape,
          median_us([&] {
            verify(rows_of(tl, B, K + 1, V), rows_of(dl, B, K, V), Tokens{tokens.data(), B, K, K, 1},
                   params, {len.data(), out.data(), K + 1});
          }),
          b_us, both.size() * 4e-6);
    }
  }
  return 0;
}
