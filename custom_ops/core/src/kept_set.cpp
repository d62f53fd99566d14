// FilteredRow's explicit kept set (top-k, top-p, min-p): the candidates collected above a guessed
// threshold, then kept_set.h's scalar steps over them, and the inverse CDF over what is kept. The
// CUDA build's twin: custom_ops/cuda/src/kept_set.cuh.
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <vector>

#include "filters.h"
#include "spec_edge/detail/kept_set.h"

namespace spec_edge {
namespace {

// The radix select's scratch (the items of the boundary's bucket), per thread, room for n.
struct SelectScratch {
  uint32_t* key;
  double* weight;
};
SelectScratch select_scratch(size_t n) {
  thread_local std::vector<uint32_t> key;
  thread_local std::vector<double> weight;
  key.resize(n);
  weight.resize(n);
  return {key.data(), weight.data()};
}

template <class Weight>
uint32_t select_by_weight(const std::vector<uint32_t>& keys, const std::vector<Weight>& weights,
                          double target) {
  const SelectScratch tmp = select_scratch(keys.size());
  return spec_edge::select_by_weight(keys.data(), weights.data(), static_cast<int64_t>(keys.size()),
                                     target, tmp.key, tmp.weight);
}

double candidate_mass(const std::vector<float>& num) {
  return spec_edge::candidate_mass(num.data(), static_cast<int64_t>(num.size()));
}

}  // namespace


// Candidates: the collected unpatched ids merged with the patched ids whose value passes the
// same test, ascending, with their (patched) logits.
void FilteredRow::add_candidates(int64_t n, float threshold, bool scaled) {
  kept_.clear();
  kept_y_.clear();
  const Patches& p = map_.patches;
  const auto passes = [&](float y) {
    return scaled ? (y - map_.xmax) * map_.inv_temp >= threshold : y >= threshold;
  };
  if (p.count == 0) {
    kept_.assign(collected_.begin(), collected_.begin() + n);
    kept_y_.assign(collected_value_.begin(), collected_value_.begin() + n);
    return;
  }
  int64_t pi = 0;
  for (int64_t i = 0; i <= n; ++i) {
    const int64_t id = i < n ? collected_[i] : V_;
    for (; pi < p.count && p.index[pi] <= id; ++pi)
      if (passes(p.value[pi])) {
        kept_.push_back(p.index[pi]);
        kept_y_.push_back(p.value[pi]);
      }
    if (i < n && (pi == 0 || p.index[pi - 1] != id)) {
      kept_.push_back(id);
      kept_y_.push_back(collected_value_[i]);
    }
  }
}

// Scaled-score keys and numerators of the candidates.
void FilteredRow::score_candidates(const RowKernels& k) {
  const size_t n = kept_.size();
  keys_.resize(n);
  kept_num_.resize(n);
  for (size_t i = 0; i < n; ++i) keys_[i] = order_key(kept_y_[i] / temperature_);
  k.exp_values(kept_y_.data(), static_cast<int64_t>(n), map_, kept_num_.data());
}

Status FilteredRow::candidates_top_k(const RowKernels& k, const RowSampling& rs, RowName where) {
  collected_.resize(V_);
  collected_value_.resize(V_);
  // A first threshold from a strided sample: about 3k tokens expected above it.
  const int64_t S = guess_sample_size(V_, 512);
  thread_local std::vector<float> sample;
  sample.clear();
  for (int64_t i = 0; i < S; ++i) {
    const float v = k.load(row_, i * V_ / S);
    if (v == v) sample.push_back(v);
  }
  int64_t rank = std::max<int64_t>(2, (3 * rs.top_k * S + V_ - 1) / V_ + 1);
  for (;;) {
    float theta = -kInf;
    if (rank <= static_cast<int64_t>(sample.size())) {
      std::nth_element(sample.begin(), sample.begin() + (rank - 1), sample.end(),
                       std::greater<float>());
      theta = sample[rank - 1];
    }
    ExpMap identity;  // (x - 0) * 1: the raw logit
    const CollectResult c =
        k.collect(row_, V_, identity, theta, collected_.data(), collected_value_.data());
    if (!c.clean) return bad_logit(k, row_, V_, where);
    add_candidates(c.count, theta, /*scaled=*/false);
    rank *= 8;
    if (static_cast<int64_t>(kept_.size()) < rs.top_k && theta > -kInf) continue;
    float ymax = -kInf;
    for (const float y : kept_y_) ymax = std::max(ymax, y);
    if (ymax == -kInf) {
      if (theta > -kInf) continue;
      return no_finite_logit(where);
    }
    map_.xmax = ymax;
    keys_.resize(kept_.size());
    for (size_t i = 0; i < kept_.size(); ++i) keys_[i] = order_key(kept_y_[i] / temperature_);
    thread_local std::vector<uint8_t> ones;
    ones.assign(kept_.size(), 1);
    const uint32_t kth = select_by_weight(keys_, ones, static_cast<double>(rs.top_k));
    // A token left below the guess could still tie the k-th scaled score: then guess lower.
    if (theta > -kInf && !(kth > order_key(theta / temperature_))) continue;
    size_t w = 0;
    for (size_t i = 0; i < kept_.size(); ++i)
      if (keys_[i] >= kth) {
        kept_[w] = kept_[i];
        kept_y_[w] = kept_y_[i];
        keys_[w] = keys_[i];
        ++w;
      }
    kept_.resize(w);
    kept_y_.resize(w);
    keys_.resize(w);
    break;
  }
  kept_num_.resize(kept_.size());
  k.exp_values(kept_y_.data(), static_cast<int64_t>(kept_.size()), map_, kept_num_.data());
  finish(rs, candidate_mass(kept_num_));
  return Status::ok();
}

Status FilteredRow::candidates_by_mass(const RowKernels& k, const RowSampling& rs) {
  collected_.resize(V_);
  collected_value_.resize(V_);
  const bool top_p = rs.top_p < 1.0f;
  const double Z = top_p ? k.exp_mass(row_, V_, map_) : 0.0;
  const float floor = min_p_floor(rs.min_p);
  // A first guess at the top-p boundary from a strided sample; if the candidates above it do not
  // carry the top-p mass, every token that can pass min-p is a candidate.
  for (const float guess : {top_p ? top_p_guess(k, rs.top_p) : -kInf, -kInf}) {
    const float threshold = std::max(guess, floor);
    const int64_t n =
        k.collect(row_, V_, map_, threshold, collected_.data(), collected_value_.data()).count;
    add_candidates(n, threshold, /*scaled=*/true);
    score_candidates(k);
    const double collected_mass = candidate_mass(kept_num_);
    // Done when the top-p boundary lies among the candidates, or when every token left out
    // fails min-p anyway.
    if (!top_p || collected_mass >= static_cast<double>(rs.top_p) * Z || threshold <= floor)
      break;
  }
  finish(rs, Z);
  return Status::ok();
}

// kept_set.h's top_p_guess over a strided sample of the unpatched row.
float FilteredRow::top_p_guess(const RowKernels& k, float top_p) {
  const int64_t S = guess_sample_size(V_, kTopPGuessSample);
  thread_local std::vector<float> d, e;
  d.resize(S);
  e.resize(S);
  for (int64_t i = 0; i < S; ++i) d[i] = std::min(0.0f, (k.load(row_, i * V_ / S) - map_.xmax) * map_.inv_temp);
  std::sort(d.begin(), d.end(), std::greater<float>());
  ExpMap unit;  // d is already scaled
  k.exp_values(d.data(), S, unit, e.data());
  return spec_edge::top_p_guess(d.data(), e.data(), S, top_p);
}

// Top-p over the candidates (Z: the mass they are normalized by), then min-p, then the mass of
// what is kept.
void FilteredRow::finish(const RowSampling& rs, double Z) {
  const SelectScratch tmp = select_scratch(keys_.size());
  const uint32_t lowest = lowest_kept_key(keys_.data(), kept_num_.data(), static_cast<int64_t>(keys_.size()),
                                          rs.top_p, rs.min_p, Z, tmp.key, tmp.weight);
  size_t w = 0;
  for (size_t i = 0; i < kept_.size(); ++i) {  // branch-free compaction
    const uint32_t key = keys_[i];
    kept_[w] = kept_[i];
    kept_y_[w] = kept_y_[i];
    kept_num_[w] = kept_num_[i];
    keys_[w] = key;
    w += key >= lowest;
  }
  kept_.resize(w);
  kept_y_.resize(w);
  kept_num_.resize(w);
  keys_.resize(w);
  mass_ = candidate_mass(kept_num_);
}

int64_t FilteredRow::draw(const RowKernels& k, double target) const {
  if (!explicit_) return k.exp_scan(row_, V_, map_, exact_sums_.data(), target);
  double cum = 0.0;
  int64_t last = -1;
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (!(kept_num_[i] > 0.0f)) continue;
    cum += kept_num_[i];
    last = kept_[i];
    if (cum > target) return last;
  }
  return last;
}

}  // namespace spec_edge
