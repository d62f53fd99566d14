// FilteredRow's seeded draw from a row without an explicit kept set: rejection from the envelope
// of block maxima, without the row's exact mass (docs/OPS.md, "The seeded draw from a softmax
// row"). The CUDA build's twin: custom_ops/cuda/src/envelope_draw.cuh.
#include <algorithm>

#include "filters.h"
#include "spec_edge/numerics.h"

namespace spec_edge {

// The envelope of sample(): one read of the row gives each block's maximum m_b (and checks the
// row). The weights are built by the first sample(), so a row that is not drawn from
// (filter_logits) pays for the read alone.
Status FilteredRow::build_envelope(const RowKernels& k, RowName where) {
  block_max_.resize((V_ + kBlock - 1) / kBlock);
  const MaxResult mx = k.block_maxima(row_, V_, map_.patches, block_max_.data());
  if (!mx.clean) return bad_logit(k, row_, V_, where);
  if (mx.max == -kInf) return no_finite_logit(where);
  map_.xmax = mx.max;
  mass_known_ = false;
  envelope_ready_ = false;
  return Status::ok();
}

// Every numerator of block b is at most c_b = exp_upper_bound(m_b - ymax) (exp_nonpositive is
// increasing up to its 2e-7 error, far inside the bound's 2^-10 margin), so n_b * c_b bounds the
// block's mass; the top block, whose mass is about that of its largest numerators, gets its
// exact mass instead. The weights are summed in double, left to right within runs of
// kEnvelopeRun blocks, whose totals are summed left to right: the running total at the end of
// block b is super_total_[s] + (its run's sum through b).
void FilteredRow::prepare_envelope(const RowKernels& k) {
  const int64_t blocks = static_cast<int64_t>(block_max_.size());
  const float ymax = map_.xmax;
  top_block_ = std::find(block_max_.begin(), block_max_.end(), ymax) - block_max_.begin();
  const int64_t base = top_block_ * kBlock, n = std::min(kBlock, V_ - base);
  float y[kBlock];
  for (int64_t j = 0; j < n; ++j) y[j] = value(k, base + j);
  top_num_.resize(n);
  k.exp_values(y, n, map_, top_num_.data());
  double top_mass = 0.0;
  for (const float num : top_num_) top_mass += static_cast<double>(num);
  // Separate branch-free loops, so that the compiler vectorizes them.
  const float a = map_.inv_temp * kBoundScale;
  block_c_.resize(blocks);
  for (int64_t b = 0; b < blocks; ++b) block_c_[b] = exp_upper_bound(block_max_[b] - ymax, a);
  weight_.resize(blocks);
  for (int64_t b = 0; b < blocks; ++b) weight_[b] = static_cast<double>(kBlock) * static_cast<double>(block_c_[b]);
  weight_[blocks - 1] = static_cast<double>(V_ - (blocks - 1) * kBlock) * static_cast<double>(block_c_[blocks - 1]);
  weight_[top_block_] = top_mass;
  const int64_t supers = (blocks + kEnvelopeRun - 1) / kEnvelopeRun;
  super_total_.resize(supers + 1);
  super_total_[0] = 0.0;
  for (int64_t s = 0; s < supers; ++s) {
    double run = 0.0;
    for (int64_t b = s * kEnvelopeRun; b < std::min(blocks, (s + 1) * kEnvelopeRun); ++b) run += weight_[b];
    super_total_[s + 1] = super_total_[s] + run;
  }
  envelope_ready_ = true;
}

// The envelope's block at `target` in [0, total): the first whose running total (build_envelope's
// sums) exceeds it, by a binary search over the run totals and a walk of one run (the run's last
// block when rounding leaves none); `offset` is target less the running total before the block.
int64_t FilteredRow::envelope_block(double target, double* offset) const {
  const int64_t blocks = static_cast<int64_t>(block_max_.size());
  int64_t lo = 0, hi = static_cast<int64_t>(super_total_.size()) - 2;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (super_total_[mid + 1] > target) hi = mid;
    else lo = mid + 1;
  }
  const int64_t end = std::min(blocks, (lo + 1) * kEnvelopeRun);
  double run = 0.0;
  int64_t b = lo * kEnvelopeRun;
  for (; b < end - 1; ++b) {
    const double next = run + weight_[b];
    if (super_total_[lo] + next > target) break;
    run = next;
  }
  *offset = target - (super_total_[lo] + run);
  return b;
}

// Rejection from the envelope: a proposal is the envelope's block at u * total and, in the top
// block, the inverse CDF of its numerators at the offset (always kept); in any other block, the
// token at offset / c_b (each token of the block covers c_b of the block's weight n_b * c_b),
// kept when v * c_b < its numerator.
int64_t FilteredRow::sample(const RowKernels& k, DrawStream& uniforms, int max_proposals) {
  if (explicit_) return draw(k, uniforms() * mass_);
  if (use_ == RowUse::kDraw && !envelope_ready_) prepare_envelope(k);
  if (use_ == RowUse::kDraw)
    for (int n = 0; n < max_proposals; ++n) {
      const double u = uniforms(), v = uniforms();
      double offset = 0.0;
      const int64_t b = envelope_block(u * super_total_.back(), &offset);
      const int64_t base = b * kBlock, m = std::min(kBlock, V_ - base);
      if (b == top_block_) {
        double cum = 0.0;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          if (!(top_num_[j] > 0.0f)) continue;
          cum += static_cast<double>(top_num_[j]);
          last = base + j;
          if (cum > offset) break;
        }
        return last;
      }
      // Clamped before the conversion: the running totals' rounding, divided by a tiny c_b, can
      // put the slot far past the block.
      const float c = block_c_[b];
      const double slot = std::min(std::max(0.0, offset / static_cast<double>(c)), static_cast<double>(m - 1));
      const int64_t j = base + static_cast<int64_t>(slot);
      if (v * static_cast<double>(c) < static_cast<double>(numerator(k, j))) return j;
    }
  return draw(k, uniforms() * mass(k));
}

}  // namespace spec_edge
