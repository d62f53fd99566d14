// The core ops on every CPU path, without any framework around them, next to a bytes-read
// bound (a vectorized sum over the bytes the op must read), single thread, one process; in a
// cache-resident setting (the same inputs every call) and a DRAM-resident one (a pool of
// input copies twice the size of the last-level cache, at least 128 MiB, visited in turn).
// Usage: spec_edge_bench_core            (a Raspberry Pi owner runs the aarch64 build as is)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "spec_edge/dispatch.h"
#include "spec_edge/ops.h"

using namespace spec_edge;

namespace {

// Twice the last-level cache the C library reports (hosts range from a Pi's 2 MiB to 480 MiB),
// at least 128 MiB and at most 2 GiB.
size_t pool_bytes() {
  long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  return std::clamp<size_t>(llc > 0 ? 2 * static_cast<size_t>(llc) : 0, size_t{128} << 20,
                            size_t{2} << 30);
}

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

// A read of n floats at the core's full load rate: four vectors of independent accumulators
// (one vector would make the sum wait on each add's latency, not on the reads), vectorized by
// the compiler, with AVX2 or AVX-512 where the CPU has it (the bound must not be slower than
// the paths it bounds).
template <int kLanes>
__attribute__((always_inline)) inline float sum_lanes(const float* x, size_t n) {
  float acc[kLanes] = {0};
  for (size_t j = 0; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  float s = 0.0f;
  for (float a : acc) s += a;
  return s;
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) float sum_avx2(const float* x, size_t n) { return sum_lanes<32>(x, n); }
__attribute__((target("avx512f"))) float sum_avx512(const float* x, size_t n) { return sum_lanes<64>(x, n); }
#endif
float sum_baseline(const float* x, size_t n) { return sum_lanes<16>(x, n); }
float sum(const float* x, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_avx512(x, n);
  if (__builtin_cpu_supports("avx2")) return sum_avx2(x, n);
#endif
  return sum_baseline(x, n);
}

Rows rows_of(const float* d, int64_t batch, int64_t nrows, int64_t V) {
  return Rows::contiguous(d, DType::kFloat32, batch, nrows, V);
}

// Inputs for one shape: `copies` copies of one case laid out back to back, so that visiting
// copy i % copies walks through memory (copies = 1: cache-resident).
struct Pool {
  std::vector<float> data;
  size_t stride = 0, copies = 1;
  const float* at(size_t i) const { return data.data() + (i % copies) * stride; }
};

Pool make_pool(const std::vector<float>& one, bool dram) {
  Pool p;
  p.stride = one.size();
  static const size_t kPoolBytes = pool_bytes();
  p.copies = dram ? std::max<size_t>(2, kPoolBytes / (one.size() * 4)) : 1;
  p.data.resize(p.stride * p.copies);
  for (size_t c = 0; c < p.copies; ++c) std::copy(one.begin(), one.end(), p.data.begin() + c * p.stride);
  return p;
}

void report(const char* op, const char* isa, const char* shape, bool dram, double us, double bound, double mb) {
  std::printf("| %s | %s | %s | %s | %.1f | %.1f (%.2f MB) | %.2fx |\n", op, isa, shape,
              dram ? "DRAM" : "cache", us, bound, mb, us / bound);
}

}  // namespace

int main() {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::printf("| op | path | shape | resident | us | bytes-read bound us | vs bound |\n|---|---|---|---|---|---|---|\n");
  for (bool dram : {false, true}) {
    for (auto [V, K] : {std::pair<int64_t, int64_t>{32000, 4}, {128256, 5}}) {
      // Worst case for reads: every draft token accepted (draft == target, tokens = argmax).
      // One buffer per case: target rows, then draft rows.
      std::vector<float> one((2 * K + 1) * V);
      for (int64_t j = 0; j < (K + 1) * V; ++j) one[j] = std::exp(normal(rng) * 0.5f);
      std::copy(one.begin(), one.begin() + K * V, one.begin() + (K + 1) * V);
      std::vector<int64_t> tokens(K);
      for (int64_t i = 0; i < K; ++i)
        tokens[i] = std::max_element(one.begin() + i * V, one.begin() + (i + 1) * V) - (one.begin() + i * V);
      const Pool pool = make_pool(one, dram);
      std::vector<double> u(K + 1, 0.5);
      const Tokens t{tokens.data(), 1, K, K, 1};
      const Uniforms uv{u.data(), DType::kFloat64, 1, K + 1, K + 1, 1};
      char shape[64];
      std::snprintf(shape, sizeof shape, "V=%lld, K=%lld", (long long)V, (long long)K);
      size_t i = 0;
      const double greedy_bound = median_us([&] { g_sink = sum(pool.at(i++), (K + 1) * V); });
      const double accept_bound = median_us([&] { g_sink = sum(pool.at(i++), (2 * K + 1) * V); });
      for (const char* const* isa = available_isa_list(); *isa; ++isa) {
        if (!select_isa(*isa).is_ok()) continue;
        int64_t n, next;
        report("verify_greedy", *isa, shape, dram,
               median_us([&] { verify_greedy(rows_of(pool.at(i++), 1, K + 1, V), t, {&n, &next}); }),
               greedy_bound, (K + 1) * V * 4e-6);
        report("accept", *isa, shape, dram, median_us([&] {
                 const float* c = pool.at(i++);
                 const Rows q = rows_of(c + (K + 1) * V, 1, K, V);
                 accept(rows_of(c, 1, K + 1, V), &q, t, uv, {&n, &next});
               }),
               accept_bound, (2 * K + 1) * V * 4e-6);
      }
    }
    // The sampler at V = 128256, T = 0.8: unfiltered, top-p alone, and the full pipeline
    // (penalty 1.1 over 64 previous tokens, top-k 50, top-p 0.95, min-p 0.05).
    const int64_t top_k = 50;
    const float top_p = 0.95f, min_p = 0.05f, penalty = 1.1f;
    std::vector<int64_t> prev(64);
    for (auto& id : prev) id = static_cast<int64_t>(rng() % 128256);
    struct Pipeline {
      const char* name;
      Filters filters;
    } pipelines[3] = {{"sample", {}}, {"sample top-p", {}}, {"sample full pipeline", {}}};
    pipelines[1].filters.top_p = {&top_p, 1};
    pipelines[2].filters = Filters{{&top_k, 1}, {&top_p, 1}, {&min_p, 1}, {&penalty, 1},
                                   Tokens{prev.data(), 1, 64, 0, 1}};
    for (int64_t B : {1, 8}) {
      const int64_t V = 128256;
      std::vector<float> one(B * V);
      for (auto& x : one) x = normal(rng);
      const Pool pool = make_pool(one, dram);
      const float temp = 0.8f;
      const int64_t seed = 1, offset = 0;
      std::vector<int64_t> drawn(B);
      char shape[64];
      std::snprintf(shape, sizeof shape, "B=%lld, V=%lld, T=0.8", (long long)B, (long long)V);
      size_t i = 0;
      const double bound = median_us([&] { g_sink = sum(pool.at(i++), one.size()); });
      for (const Pipeline& pipeline : pipelines) {
        const SampleParams params{{&temp, 1}, {&seed, 1}, {&offset, 1}, pipeline.filters};
        for (const char* const* isa = available_isa_list(); *isa; ++isa) {
          if (!select_isa(*isa).is_ok()) continue;
          report(pipeline.name, *isa, shape, dram,
                 median_us([&] { sample(rows_of(pool.at(i++), B, 1, V), params, drawn.data()); }),
                 bound, one.size() * 4e-6);
        }
      }
    }
    // verify: every draft token accepted (draft == target), and a draft that differs (the
    // target plus noise: about half the tokens accepted, so most calls also compute the
    // residual). The offset advances every call, as in a decoding loop: the times average over
    // the uniforms (which decide how often the bounds leave a decision open).
    const int64_t V = 32000, K = 4;
    for (auto [B, noisy] : {std::pair<int64_t, bool>{1, false}, {8, false}, {64, false}, {1, true}}) {
      std::vector<float> one(B * (2 * K + 1) * V);  // target logits [B, K+1, V], then draft [B, K, V]
      float* tl = one.data();
      float* dl = one.data() + B * (K + 1) * V;
      for (int64_t j = 0; j < B * (K + 1) * V; ++j) tl[j] = normal(rng);
      std::vector<int64_t> tokens(B * K), len(B), out(B * (K + 1));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t k = 0; k < K; ++k) {
          float* d = dl + (b * K + k) * V;
          const float* x = tl + (b * (K + 1) + k) * V;
          for (int64_t j = 0; j < V; ++j) d[j] = noisy ? x[j] + 0.15f * normal(rng) : x[j];
          tokens[b * K + k] = std::max_element(d, d + V) - d;
        }
      const Pool pool = make_pool(one, dram);
      const float temp = 1.0f;
      const int64_t seed = 1;
      int64_t offset = 0;
      VerifyParams params;
      params.temperature = {&temp, 1};
      params.seed = {&seed, 1};
      params.offset = {&offset, 1};
      char shape[96];
      std::snprintf(shape, sizeof shape, "B=%lld, V=%lld, K=%lld, T=1%s", (long long)B, (long long)V,
                    (long long)K, noisy ? ", draft = target + noise" : "");
      size_t i = 0;
      const double bound = median_us([&] { g_sink = sum(pool.at(i++), one.size()); });
      for (const char* const* isa = available_isa_list(); *isa; ++isa) {
        if (!select_isa(*isa).is_ok()) continue;
        report("verify", *isa, shape, dram, median_us([&] {
                 const float* c = pool.at(i++);
                 ++offset;
                 verify(rows_of(c, B, K + 1, V), rows_of(c + B * (K + 1) * V, B, K, V),
                        Tokens{tokens.data(), B, K, K, 1}, params, {len.data(), out.data(), K + 1});
               }),
               bound, one.size() * 4e-6);
      }
    }
  }
  return 0;
}
