// The scalar steps that turn a row's candidates (ids ascending, the keys of their scaled scores,
// their numerators) into its kept set: one definition for the CPU core (filters.cpp) and the CUDA
// build (which runs them on one thread of the row's block).
#pragma once

#include <cmath>
#include <cstdint>

#include "spec_edge/types.h"

namespace spec_edge {

// An unsigned key with the order of the float (no NaN here); -0 and +0 are one key.
SPEC_EDGE_HD inline uint32_t order_key(float s) {
  if (s == 0.0f) s = 0.0f;
  const uint32_t u = float_to_bits(s);
  return (u >> 31) != 0 ? ~u : u | 0x80000000u;
}

// The largest key K with W(> K) < target <= W(>= K), W the total weight of keys in a range:
// a most-significant-digit-first radix select (four 8-bit digits), no sort. Each level keeps
// only the items of the bucket that holds the boundary. Needs target > 0; `key_tmp` and
// `weight_tmp` have room for n.
template <class Weight>
SPEC_EDGE_HD uint32_t select_by_weight(const uint32_t* keys, const Weight* weights, int64_t n,
                                       double target, uint32_t* key_tmp, double* weight_tmp) {
  uint32_t prefix = 0;
  double above = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const bool first = shift == 24;
    const uint32_t* k = first ? keys : key_tmp;
    const auto w_at = [&](int64_t i) { return first ? static_cast<double>(weights[i]) : weight_tmp[i]; };
    // Four interleaved histograms: runs of equal digits do not chain their additions.
    double bucket[4][256] = {};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int h = 0; h < 4; ++h) bucket[h][(k[i + h] >> shift) & 255u] += w_at(i + h);
    for (; i < n; ++i) bucket[0][(k[i] >> shift) & 255u] += w_at(i);
    int d = 255;
    for (; d > 0; --d) {
      const double b = (bucket[0][d] + bucket[1][d]) + (bucket[2][d] + bucket[3][d]);
      if (above + b >= target) break;
      above += b;
    }
    prefix |= static_cast<uint32_t>(d) << shift;
    if (shift == 0) break;
    // Keep the items of bucket d for the next digit (branch-free, in place).
    const uint32_t high = ~0u << shift;
    int64_t w = 0;
    for (i = 0; i < n; ++i) {
      const uint32_t ki = k[i];
      const double wi = w_at(i);
      key_tmp[w] = ki;
      weight_tmp[w] = wi;
      w += (ki & high) == prefix;
    }
    n = w;
  }
  return prefix;
}

// The sum of term(0 .. n) in four interleaved double partial sums (so the additions do not
// form one long dependency chain), combined as (s0 + s1) + (s2 + s3): the same order on every
// path.
template <class Term>
SPEC_EDGE_HD double interleaved_sum(int64_t n, const Term& term) {
  double s[4] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) s[l] += term(i + l);
  for (; i < n; ++i) s[0] += term(i);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The sum of numerators in index order.
SPEC_EDGE_HD inline double candidate_mass(const float* num, int64_t n) {
  return interleaved_sum(n, [num](int64_t i) { return static_cast<double>(num[i]); });
}

// Top-p over the candidates (Z: the mass they are normalized by), then min-p: the lowest key the
// row keeps (everything at or below the largest score that fails min-p goes).
SPEC_EDGE_HD inline uint32_t lowest_kept_key(const uint32_t* keys, const float* num, int64_t n,
                                             float top_p, float min_p, double Z, uint32_t* key_tmp,
                                             double* weight_tmp) {
  uint32_t lowest = 0;
  if (top_p < 1.0f) lowest = select_by_weight(keys, num, n, static_cast<double>(top_p) * Z, key_tmp, weight_tmp);
  if (min_p > 0.0f) {
    uint32_t worst_failing = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t failing = num[i] < min_p ? keys[i] + 1 : 0u;
      worst_failing = failing > worst_failing ? failing : worst_failing;
    }
    lowest = worst_failing > lowest ? worst_failing : lowest;
  }
  return lowest;
}

// ---- the candidates of top-p and min-p without top-k (FilteredRow::candidates_by_mass) ----------

// Elements of the strided sample that seeds a first threshold: a sixteenth of the row, at least
// 64 and at most `cap`, so that on small vocabularies the guess stays cheap next to the pass it
// saves. Sample element i is token i * V / S.
SPEC_EDGE_HD inline int64_t guess_sample_size(int64_t V, int64_t cap) {
  const int64_t s = V / 16 < 64 ? 64 : V / 16 > cap ? cap : V / 16;
  return s < V ? s : V;
}
constexpr int64_t kTopPGuessSample = 1024;  // the cap of top-p's sample

// The first top-p threshold from the sample: `d` its scaled distances (y - ymax) / T, sorted
// descending, `e` their numerators: the d below which the sample holds less than half of the mass
// top-p removes, lowered by 1 so that the candidates above it most likely carry the top-p mass.
SPEC_EDGE_HD inline float top_p_guess(const float* d, const float* e, int64_t S, float top_p) {
  double total = 0.0;
  for (int64_t i = 0; i < S; ++i) total += e[i];
  const double wanted = total * (1.0 - 0.5 * (1.0 - static_cast<double>(top_p)));
  double cum = 0.0;
  for (int64_t i = 0; i < S; ++i) {
    cum += e[i];
    if (cum >= wanted) return d[i] - 1.0f;
  }
  return -__builtin_huge_valf();
}

// Tokens whose scaled distance to the row maximum lies below this fail min-p: log(min_p) with a
// margin far above the exp error; -inf without min-p. Host code (the CUDA build computes it on
// the host, so that both builds use one logf).
inline float min_p_floor(float min_p) {
  return min_p > 0.0f ? std::log(min_p) - 1e-3f : -__builtin_huge_valf();
}

}  // namespace spec_edge
