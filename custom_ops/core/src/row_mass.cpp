// FilteredRow's mass for a row without an explicit kept set: exact (one exp pass) when a draw
// needs it, or bounded by the bound pass and tightened block by block when a decision needs only
// to know on which side of a threshold it lies.
#include <algorithm>
#include <limits>

#include "filters.h"
#include "spec_edge/detail/kept_set.h"
#include "spec_edge/numerics.h"

namespace spec_edge {

double FilteredRow::mass(const RowKernels& k) {
  if (mass_known_) return mass_;
  if (refine_steps_ > 0) {
    refine(k, /*all=*/true);
    return mass_;
  }
  const int64_t blocks = (V_ + kBlock - 1) / kBlock;
  exact_sums_.resize(blocks);
  numerators_.resize(V_);
  k.exp_blocks(row_, V_, map_, nullptr, blocks, exact_sums_.data(), numerators_.data());
  finish_mass();
  return mass_;
}

void FilteredRow::finish_mass() {
  mass_ = 0.0;  // exp_mass's sum: left to right
  for (const float s : exact_sums_) mass_ += static_cast<double>(s);
  mass_known_ = true;
}

// Block b's numerators sum to within [block_lo_[b], block_hi_[b]] (build_bounds' argument, per
// block). Each step computes the exact sums of the blocks whose intervals are at least a
// threshold wide, the threshold a quarter of the last (the widest intervals carry most of the
// uncertainty: on a peaked row, the first step's few blocks hold nearly all of it); a step
// that finds no such block lowers it again.
bool FilteredRow::refine(const RowKernels& k, bool all) {
  if (mass_known_ || use_ != RowUse::kDecide) return false;
  const int64_t blocks = static_cast<int64_t>(block_bound_.size());
  if (refine_steps_ == 0) {
    block_lo_.resize(blocks);
    block_hi_.resize(blocks);
    block_exact_.assign(blocks, 0);
    exact_sums_.resize(blocks);
    numerators_.resize(V_);
    exact_blocks_ = 0;
    refine_threshold_ = 0.0;
    const float a = map_.inv_temp * kBoundScale;
    for (int64_t b = 0; b < blocks; ++b) {
      const bool at_max = b >= first_at_max_;
      const double hi = static_cast<double>(block_bound_[b]) *
                        (at_max ? 1.0 : static_cast<double>(exp_upper_bound(block_ref_[b] - map_.xmax, a)));
      block_hi_[b] = hi * (1.0 + 1e-5);
      block_lo_[b] = hi / (at_max ? kExpBoundRatio : kExpBoundRatio * kExpBoundRatio) * (1.0 - 1e-5);
      refine_threshold_ = std::max(refine_threshold_, block_hi_[b] - block_lo_[b]);
    }
  }
  pending_.clear();
  while (pending_.empty()) {  // each scan is a step: at most kMaxRefineSteps per row
    ++refine_steps_;
    refine_threshold_ = all || refine_steps_ >= kMaxRefineSteps ? 0.0 : refine_threshold_ / 4;
    for (int64_t b = 0; b < blocks; ++b)
      if (!block_exact_[b] && block_hi_[b] - block_lo_[b] >= refine_threshold_) pending_.push_back(b);
  }
  k.exp_blocks(row_, V_, map_, pending_.data(), static_cast<int64_t>(pending_.size()),
               exact_sums_.data(), numerators_.data());
  for (const int64_t b : pending_) block_exact_[b] = 1;
  exact_blocks_ += static_cast<int64_t>(pending_.size());
  if (exact_blocks_ == blocks) {
    finish_mass();
    return true;
  }
  const auto sum = [&](const std::vector<double>& bound) {
    return interleaved_sum(blocks, [&](int64_t b) {
      return block_exact_[b] ? static_cast<double>(exact_sums_[b]) : bound[b];
    });
  };
  // The exact pass adds the same block sums left to right: in another order the double sum
  // differs by under `blocks` roundings of the total.
  const double slack = static_cast<double>(blocks) * 0x1p-52;
  bound_lo_ = sum(block_lo_) * (1.0 - slack);
  bound_hi_ = sum(block_hi_) * (1.0 + slack);
  return true;
}

// The bound pass gives block b's bounds relative to its running maximum ref[b]; scaled by
// exp_upper_bound(ref[b] - ymax) (1 once ref[b] is the row's maximum), they bound the
// numerators relative to ymax: the exponents add up to the numerator's plus twice the 2^-10
// margin, and the float differences they come from differ from y - ymax by under 3e-5 in
// the exponent.
Status FilteredRow::build_bounds(const RowKernels& k, RowName where) {
  const int64_t blocks = (V_ + kBlock - 1) / kBlock;
  block_ref_.resize(blocks);
  block_bound_.resize(blocks);
  const float a = map_.inv_temp * kBoundScale;
  const MaxResult mx = k.bound_pass(row_, V_, map_.patches, a, block_ref_.data(), block_bound_.data());
  if (!mx.clean) return bad_logit(k, row_, V_, where);
  if (mx.max == -kInf) return no_finite_logit(where);
  map_.xmax = mx.max;
  mass_known_ = false;
  // The running maximum ascends: blocks before `first` have ref < ymax and a scale below 1.
  // The bounds need their sums to within rounding only.
  const int64_t first = std::lower_bound(block_ref_.begin(), block_ref_.end(), mx.max) - block_ref_.begin();
  first_at_max_ = first;
  const double before = interleaved_sum(first, [&](int64_t b) {
    return static_cast<double>(block_bound_[b]) *
           static_cast<double>(exp_upper_bound(block_ref_[b] - mx.max, a));
  });
  const double at_max = interleaved_sum(blocks - first, [&](int64_t b) {
    return static_cast<double>(block_bound_[first + b]);
  });
  // Blocks at the row's maximum: bound <= kExpBoundRatio * numerator; earlier blocks, whose
  // scale is itself a bound: the ratio squared. Both up to the folds' and these sums' rounding
  // (< 1e-6).
  bound_hi_ = (before + at_max) * (1.0 + 1e-5);
  bound_lo_ = (at_max / kExpBoundRatio + before / (kExpBoundRatio * kExpBoundRatio)) * (1.0 - 1e-5);
  return Status::ok();
}

MassBounds FilteredRow::mass_bounds() const {
  if (mass_known_) return MassBounds{mass_, mass_};
  if (use_ != RowUse::kDecide) return MassBounds{0.0, std::numeric_limits<double>::infinity()};
  return MassBounds{bound_lo_, bound_hi_};
}

}  // namespace spec_edge
