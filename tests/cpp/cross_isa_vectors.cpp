// Writes the results of a fixed set of op cases, after checking that every CPU path of this
// build agrees on each. Run on x86-64 and (under qemu) on aarch64: the two outputs must be
// identical files, i.e. the same tokens and the same masses on every ISA.
// Usage: spec_edge_cross_isa_vectors > vectors.txt
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/attention.h"
#include "spec_edge/numerics.h"
#include "spec_edge/dispatch.h"
#include "spec_edge/ops.h"
#include "spec_edge/philox.h"

using namespace spec_edge;

namespace {

// Platform-independent data: Philox draws mapped by explicit arithmetic.
struct Draws {
  uint64_t seed, n = 0;
  double next() { return philox_uniform(seed, 0, 0, n++); }
};

uint16_t half_bits(float f) { return to_half(f).bits; }  // the core's, nearest even

struct Scores {
  std::vector<float> f32;
  std::vector<uint16_t> low;
  DType dtype;
  void assign(const std::vector<float>& v, DType d) {
    dtype = d;
    f32 = v;
    low.resize(v.size());
    for (size_t j = 0; j < v.size(); ++j) {
      uint32_t b;
      std::memcpy(&b, &v[j], 4);
      low[j] = d == DType::kFloat16 ? half_bits(v[j]) : static_cast<uint16_t>(b >> 16);
    }
  }
  Rows rows(int64_t batch, int64_t nrows, int64_t vocab) const {
    const void* data = dtype == DType::kFloat32 ? static_cast<const void*>(f32.data()) : low.data();
    return Rows::contiguous(data, dtype, batch, nrows, vocab);
  }
};

// Runs `op` on every path; returns the scalar result, or exits when a path disagrees.
template <class Op>
std::string on_every_path(const char* what, Op op) {
  std::string first, first_isa;
  for (const char* const* name = available_isa_list(); *name; ++name) {
    const std::string isa = *name;
    if (!select_isa(*name).is_ok()) continue;
    const std::string got = op();
    if (first_isa.empty()) {
      first = got;
      first_isa = isa;
    } else if (got != first) {
      std::fprintf(stderr, "%s: path %s gives '%s', %s gives '%s'\n", what, isa.c_str(),
                   got.c_str(), first_isa.c_str(), first.c_str());
      std::exit(1);
    }
  }
  return first;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof buf, f, args);
  va_end(args);
  return buf;
}

}  // namespace

int main() {
  const int64_t sizes[] = {1, 3, 8, 17, 63, 64, 65, 129, 1000, 4099};
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  int cases = 0;
  for (int64_t V : sizes) {
    for (DType dtype : dtypes) {
      for (uint64_t seed = 1; seed <= 3; ++seed, ++cases) {
        const int64_t B = 4, K = 3;
        Draws d{seed * 1000003 + static_cast<uint64_t>(V) * 7 + static_cast<uint64_t>(dtype)};
        std::vector<float> logits(B * (K + 1) * V), draft(B * K * V), probs, dprobs;
        for (auto& x : logits) x = static_cast<float>(8.0 * d.next() - 4.0);
        for (size_t j = 0; j < draft.size(); ++j)
          draft[j] = logits[(j / (K * V)) * (K + 1) * V + j % (K * V)] + static_cast<float>(d.next() - 0.5);
        for (float x : logits) probs.push_back(x > 0 ? x : 0.0f);
        for (float x : draft) dprobs.push_back(x > 0 ? x + 0.01f : 0.01f);
        for (int64_t b = 0; b < B; ++b) probs[(b * (K + 1) + K) * V] += 0.5f;  // a positive bonus row
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < K; ++i) probs[(b * (K + 1) + i) * V] += 0.5f;
        Scores tl, dl, tp, dp;
        tl.assign(logits, dtype);
        dl.assign(draft, dtype);
        tp.assign(probs, dtype);
        dp.assign(dprobs, dtype);
        std::vector<int64_t> tokens(B * K), num_draft(B);
        for (auto& t : tokens) t = static_cast<int64_t>(d.next() * V) % V;
        for (auto& n : num_draft) n = static_cast<int64_t>(d.next() * (K + 1)) % (K + 1);
        std::vector<double> u(B * (K + 1));
        for (auto& x : u) x = d.next();
        const Tokens t{tokens.data(), B, K, K, 1};
        const Uniforms uv{u.data(), DType::kFloat64, B, K + 1, K + 1, 1};
        const std::string tag = fmt("V=%" PRId64 " dtype=%s seed=%" PRIu64, V, dtype_name(dtype), seed);

        auto pair_list = [&](const int64_t* n, const int64_t* next) {
          std::string s;
          for (int64_t b = 0; b < B; ++b) s += fmt(" %" PRId64 ":%" PRId64, n[b], next[b]);
          return s;
        };
        std::printf("%s verify_greedy%s\n", tag.c_str(), on_every_path("verify_greedy", [&] {
          int64_t n[4], next[4];
          const Status s = verify_greedy(tl.rows(B, K + 1, V), t, {n, next});
          return s.is_ok() ? pair_list(n, next) : std::string(s.message());
        }).c_str());
        std::printf("%s accept%s\n", tag.c_str(), on_every_path("accept", [&] {
          int64_t n[4], next[4];
          const Rows q = dp.rows(B, K, V);
          const Status s = accept(tp.rows(B, K + 1, V), &q, t, uv, {n, next});
          return s.is_ok() ? pair_list(n, next) : std::string(s.message());
        }).c_str());
        std::printf("%s accept_draft_free%s\n", tag.c_str(), on_every_path("accept_draft_free", [&] {
          int64_t n[4], next[4];
          const Status s = accept(tp.rows(B, K + 1, V), nullptr, t, uv, {n, next});
          return s.is_ok() ? pair_list(n, next) : std::string(s.message());
        }).c_str());
        const auto token_list = [](const std::vector<int64_t>& v) {
          std::string r;
          for (int64_t x : v) r += fmt(" %" PRId64, x);
          return r;
        };
        // verify and sample at temperature T, with filters f: the tokens, or the error.
        const auto run_verify = [&](float T, int64_t offset, const int64_t* lengths, const Filters& f) {
          const int64_t seed_v = static_cast<int64_t>(seed);
          VerifyParams params;
          params.temperature = {&T, 1};
          params.seed = {&seed_v, 1};
          params.offset = {&offset, 1};
          params.num_draft = lengths;
          params.filters = f;
          std::vector<int64_t> len(B), out(B * (K + 1));
          const Status s = verify(tl.rows(B, K + 1, V), dl.rows(B, K, V), t, params,
                                  {len.data(), out.data(), K + 1});
          return s.is_ok() ? token_list(out) : std::string(s.message());
        };
        const auto run_sample = [&](float T, int64_t offset, const Filters& f) {
          const int64_t seed_v = static_cast<int64_t>(seed);
          SampleParams params;
          params.temperature = {&T, 1};
          params.seed = {&seed_v, 1};
          params.offset = {&offset, 1};
          params.filters = f;
          std::vector<int64_t> drawn(B * (K + 1));
          const Status s = sample(tl.rows(B * (K + 1), 1, V), params, drawn.data());
          return s.is_ok() ? token_list(drawn) : std::string(s.message());
        };
        for (float T : {0.0f, 0.6f, 1.0f, 1.7f})
          std::printf("%s verify T=%g%s\n", tag.c_str(), T, on_every_path("verify", [&] {
            return run_verify(T, 11, num_draft.data(), Filters{});
          }).c_str());
        for (float T : {0.0f, 0.8f})
          std::printf("%s sample T=%g%s\n", tag.c_str(), T, on_every_path("sample", [&] {
            return run_sample(T, 3, Filters{});
          }).c_str());
        // The filters: each config in verify, sample and filter_logits (outputs hashed bit by bit).
        std::vector<int64_t> prev = {tokens[0], tokens[1], -1, tokens[5], static_cast<int64_t>(V / 2)};
        struct FilterConfig {
          const char* name;
          int64_t top_k;
          float top_p, min_p, penalty;
        };
        for (const FilterConfig& fc : {FilterConfig{"full", 5, 0.9f, 0.05f, 1.3f},
                                       FilterConfig{"top_p", 0, 0.7f, 0.0f, 1.0f},
                                       FilterConfig{"min_p_penalty", 0, 1.0f, 0.1f, 0.8f},
                                       FilterConfig{"top_k1", 1, 1.0f, 0.0f, 1.0f}}) {
          Filters f;
          const int64_t top_k = std::min<int64_t>(fc.top_k, V);
          f.top_k = {&top_k, 1};
          f.top_p = {&fc.top_p, 1};
          f.min_p = {&fc.min_p, 1};
          f.repetition_penalty = {&fc.penalty, 1};
          f.prev_tokens = Tokens{prev.data(), 1, static_cast<int64_t>(prev.size()), 0, 1};
          for (float T : {0.0f, 0.8f}) {
            std::printf("%s verify %s T=%g%s\n", tag.c_str(), fc.name, T, on_every_path("verify filtered", [&] {
              return run_verify(T, 5, nullptr, f);
            }).c_str());
            std::printf("%s sample %s T=%g%s\n", tag.c_str(), fc.name, T, on_every_path("sample filtered", [&] {
              return run_sample(T, 5, f);
            }).c_str());
            std::printf("%s filter_logits %s T=%g%s\n", tag.c_str(), fc.name, T, on_every_path("filter_logits", [&] {
              std::vector<float> out(B * (K + 1) * V);
              const Status s = filter_logits(tl.rows(B * (K + 1), 1, V), {&T, 1}, f, out.data(), V);
              if (!s.is_ok()) return std::string(s.message());
              uint64_t hash = 1469598103934665603ull;  // FNV-1a over the bits
              int64_t kept = 0;
              for (float v : out) {
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                hash = (hash ^ bits) * 1099511628211ull;
                kept += v != -__builtin_inff();
              }
              return fmt(" kept=%" PRId64 " bits=%016" PRIx64, kept, hash);
            }).c_str());
          }
        }
        // Masses in hex: the bits, not just the tokens.
        std::printf("%s masses%s\n", tag.c_str(), on_every_path("masses", [&] {
          const RowKernels& k = row_kernels(dtype);
          const Rows r = tp.rows(B, K + 1, V), l = tl.rows(B, K + 1, V);
          const size_t elem = dtype == DType::kFloat32 ? 4 : 2;
          const char* p = static_cast<const char*>(r.data);
          const char* x = static_cast<const char*>(l.data);
          const MaxResult mx = k.logit_max(x, V);
          const ExpMap e{mx.max, 1.0f / 0.7f, {}};
          std::vector<float> refs((V + 63) / 64), bounds(refs.size());
          k.bound_pass(x, V, {}, e.inv_temp * kBoundScale, refs.data(), bounds.data());
          double bound_total = 0.0;
          for (size_t b = 0; b < bounds.size(); ++b) bound_total += static_cast<double>(bounds[b]) * (b + 1) + refs[b];
          k.block_maxima(x, V, {}, refs.data());
          for (size_t b = 0; b < refs.size(); ++b) bound_total += static_cast<double>(refs[b]) * (b + 2);
          return fmt(" %a %a %a %a", k.prob_mass(p, V, -1).mass, k.prob_mass(p + elem * V, V, 0).mass,
                     k.exp_mass(x, V, e), bound_total);
        }).c_str());
      }
    }
  }
  // Attention over a KV cache (the exported models' own op): output bits hashed.
  struct AttentionCase { int64_t S, Hq, Hkv, D, C, start; };
  for (const AttentionCase& c : {AttentionCase{1, 5, 5, 64, 256, 200}, AttentionCase{5, 4, 2, 64, 40, 33},
                                 AttentionCase{3, 6, 2, 17, 20, 4}, AttentionCase{2, 2, 1, 40, 9, 7},
                                 AttentionCase{4, 3, 3, 8, 6, 0}}) {
    Draws d{static_cast<uint64_t>(c.D * 131 + c.S)};
    std::vector<float> q(c.S * c.Hq * c.D), k(c.C * c.Hkv * c.D), v(k.size());
    for (auto* t : {&q, &k, &v})
      for (float& x : *t) x = static_cast<float>(6.0 * d.next() - 3.0);
    const ConstHeads qv{q.data(), 1, c.S, c.Hq, c.D, c.S * c.Hq * c.D, c.Hq * c.D, c.D};
    const ConstHeads kv{k.data(), 1, c.C, c.Hkv, c.D, c.C * c.Hkv * c.D, c.Hkv * c.D, c.D};
    const ConstHeads vv{v.data(), 1, c.C, c.Hkv, c.D, c.C * c.Hkv * c.D, c.Hkv * c.D, c.D};
    std::printf("attention S=%" PRId64 " Hq=%" PRId64 " Hkv=%" PRId64 " D=%" PRId64 " start=%" PRId64 "%s\n", c.S,
                c.Hq, c.Hkv, c.D, c.start, on_every_path("attention", [&] {
                  std::vector<float> out(q.size());
                  const Status s = attention(qv, kv, vv, c.start, {out.data(), 1, c.S, c.Hq, c.D, c.S * c.Hq * c.D,
                                                                   c.Hq * c.D, c.D});
                  if (!s.is_ok()) return std::string(s.message());
                  uint64_t hash = 1469598103934665603ull;
                  for (float x : out) {
                    uint32_t bits;
                    std::memcpy(&bits, &x, 4);
                    hash = (hash ^ bits) * 1099511628211ull;
                  }
                  return fmt(" bits=%016" PRIx64, hash);
                }).c_str());
    ++cases;
  }
  std::fprintf(stderr, "%d cases, paths: %s, all paths agree\n", cases, available_isas());
  return 0;
}
