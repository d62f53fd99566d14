// The sampling filters (repetition penalty, temperature, top-k, top-p, min-p) of one logit row,
// resolved without sorting the row: the definition behind `filter_logits`, filtered `sample`
// and filtered `verify` (docs/FILTERS.md).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/detail/sampling.h"

namespace spec_edge {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A rigorous interval around the mass a row's exact pass computes.
struct MassBounds {
  double lo, hi;
};

// What a row without an explicit kept set is built for: a draw (sample, filter_logits, verify's
// bonus token) reads each block's maximum, the envelope of sample(); a decision (verify's
// acceptance test) reads the bound pass, the source of mass_bounds().
enum class RowUse { kDraw, kDecide };

// One logit row under the filters: its numerators exp_nonpositive((y - ymax) / T) (y: the
// penalized logits), restricted to the kept set. Any of top-k, top-p, min-p makes the kept set
// explicit (`kept`, ascending, with its numerators and their mass); otherwise every token is
// kept, the row is read through `map`, and building it costs one read of the row (see RowUse;
// the exact mass is computed only when asked for). Not copyable: `map` points into it. Its
// roles are in files of their own, the private members below grouped by them.
class FilteredRow {
 public:
  FilteredRow() = default;
  FilteredRow(const FilteredRow&) = delete;
  FilteredRow& operator=(const FilteredRow&) = delete;

  // T > 0. Errors name `where` (NaN or +inf logits, no finite logit).
  Status build(const RowKernels& k, const void* row, int64_t V, const RowSampling& rs,
               const std::vector<int64_t>& penalized, RowName where, RowUse use);

  // The sum of the kept numerators (one exp pass, once, for a row that is not explicit).
  double mass(const RowKernels& k);
  // Every token's numerator, once mass(k) is known (a row that is not explicit).
  const float* numerators() const { return numerators_.data(); }
  // Bounds of mass(k) without computing it: exact for an explicit row or once mass(k) is known;
  // else, for a row built for a decision, from the bound pass (each numerator within
  // kExpBoundRatio, or its square, of its bound); else [0, inf).
  MassBounds mass_bounds() const;
  // Tightens mass_bounds() of a row built for a decision by computing the exact sums of the
  // blocks whose bounds are widest (all of them with `all`); once every block is exact, the
  // mass is known, with mass(k)'s bits. False when there is nothing to tighten.
  bool refine(const RowKernels& k, bool all = false);
  bool explicit_set() const { return explicit_; }
  const ExpMap& map() const { return map_; }
  // The numerator of token t (0 outside the kept set).
  float numerator(const RowKernels& k, int64_t t) const;
  // Inverse CDF: the kept token at which the running numerator sum first exceeds `target`
  // (a fraction of mass(k), which must be known).
  int64_t draw(const RowKernels& k, double target) const;
  // A token drawn with probability numerator / mass. An explicit row: draw(k, u * mass) with the
  // first uniform. Otherwise (a row built for a draw) by rejection from the block envelope,
  // without the exact mass (docs/OPS.md, "The seeded draw from a softmax row"): each proposal
  // takes two uniforms u, v; after kMaxProposals rejections, the exact inverse CDF with the
  // next uniform. `max_proposals` lowers the limit (tests of the fallback).
  int64_t sample(const RowKernels& k, DrawStream& uniforms, int max_proposals = kMaxProposals);
  // filter_logits' row: `out` holds the row's logits as float on entry; kept tokens become
  // y / T, the others -inf.
  void write_scaled(float* out) const;
  // Residual max(0, num_p * a - num_q * b) of p = this row and q, both explicit: its mass, or
  // the draw at `target` when target >= 0.
  double residual_mass(const FilteredRow& q, float a, float b) const;
  int64_t residual_draw(const FilteredRow& q, float a, float b, double target) const;

 private:
  // kept_set.cpp
  Status candidates_top_k(const RowKernels& k, const RowSampling& rs, RowName where);
  Status candidates_by_mass(const RowKernels& k, const RowSampling& rs);
  void add_candidates(int64_t n_collected, float threshold, bool scaled);
  void score_candidates(const RowKernels& k);
  float top_p_guess(const RowKernels& k, float top_p);
  void finish(const RowSampling& rs, double Z);
  // residual.cpp
  double residual_walk(const FilteredRow& q, float a, float b, double target,
                       int64_t* token) const;
  // filters.cpp
  float value(const RowKernels& k, int64_t t) const;  // y[t]: the logit, patched
  // row_mass.cpp
  Status build_bounds(const RowKernels& k, RowName where);
  void finish_mass();  // mass_ from exact_sums_
  // envelope_draw.cpp
  Status build_envelope(const RowKernels& k, RowName where);
  void prepare_envelope(const RowKernels& k);
  int64_t envelope_block(double target, double* offset) const;

  const void* row_ = nullptr;
  int64_t V_ = 0;
  float temperature_ = 1.0f;
  ExpMap map_;
  bool explicit_ = false;
  RowUse use_ = RowUse::kDraw;
  bool mass_known_ = false;
  double mass_ = 0.0, bound_lo_ = 0.0, bound_hi_ = 0.0;
  std::vector<int64_t> patch_index_;
  std::vector<float> patch_value_;
  std::vector<int64_t> collected_;  // scratch for the collect pass
  std::vector<float> collected_value_;
  std::vector<float> exact_sums_;               // block sums of the exp pass, for draw()
  std::vector<float> numerators_;               // and its values
  std::vector<float> block_ref_, block_bound_;  // the bound pass, per block
  int64_t first_at_max_ = 0;                    // the first block whose ref is the maximum
  // refine(): per block, the interval of its exact sum and whether that sum is computed.
  static constexpr int kMaxRefineSteps = 8;     // then every block left at once
  int refine_steps_ = 0;
  double refine_threshold_ = 0.0;
  int64_t exact_blocks_ = 0;
  std::vector<double> block_lo_, block_hi_;
  std::vector<uint8_t> block_exact_;
  std::vector<int64_t> pending_;
  // The envelope: each block's maximum m_b, c_b and weight, running totals per kEnvelopeRun
  // blocks, the top block (the first holding ymax) and its numerators.
  std::vector<float> block_max_, block_c_;
  std::vector<double> weight_, super_total_;
  int64_t top_block_ = 0;
  bool envelope_ready_ = false;
  std::vector<float> top_num_;
  std::vector<int64_t> kept_;
  std::vector<float> kept_y_, kept_num_;
  std::vector<uint32_t> keys_;
};

// The logit row's error for a NaN or +inf element, found by an exact scan.
Status bad_logit(const RowKernels& k, const void* row, int64_t V, RowName where);
// The patched row maximum, given the unpatched one.
float patched_row_max(const RowKernels& k, const void* row, int64_t V, float raw_max,
                      Patches patches);
// The error of a row whose every logit is -inf, at any temperature and in every op.
Status no_finite_logit(RowName where);
// Greedy token of a logit row under the penalty: the first index of the maximum of y (a row
// with no finite logit is an error, as at T > 0).
Status greedy_token(const RowKernels& k, const void* row, int64_t V,
                    const std::vector<int64_t>& penalized, float penalty, RowName where,
                    int64_t* token);

}  // namespace spec_edge
