// Sort-free sampling filters. The passes over the row (max, mass, collect) are the ISA kernels;
// everything after them works on the few collected candidates with the same scalar code on every
// path, so the kept set and the drawn token are identical everywhere.
#include "filters.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>

#include "kept_set.h"
#include "spec_edge/numerics.h"
#include "spec_edge/philox.h"

namespace spec_edge {
namespace {

using ll = long long;
constexpr float kInf = std::numeric_limits<float>::infinity();

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

// Index of `id` in the ascending `ids`, or -1.
int64_t find_sorted(const std::vector<int64_t>& ids, int64_t id) {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? it - ids.begin() : -1;
}

}  // namespace

Status no_finite_logit(RowName where) {
  return Status::error(Code::kInvalidArgument, "%s] has no finite logit (every token is masked)",
                       where.prefix().c_str());
}

std::string RowName::prefix() const {
  char buf[96];
  if (i < 0) std::snprintf(buf, sizeof buf, "%s[%lld", name, (ll)b);
  else std::snprintf(buf, sizeof buf, "%s[%lld, %lld", name, (ll)b, (ll)i);
  return buf;
}

Status check_sampling(int64_t B, int64_t V, PerRow<float> temperature, int64_t seed_count,
                      int64_t offset_count, const Filters& f) {
  struct Count {
    const char* name;
    int64_t count;
    bool optional;
  };
  for (const Count& p : {Count{"temperature", temperature.count, false},
                         Count{"seed", seed_count, false}, Count{"offset", offset_count, false},
                         Count{"top_k", f.top_k.count, true}, Count{"top_p", f.top_p.count, true},
                         Count{"min_p", f.min_p.count, true},
                         Count{"repetition_penalty", f.repetition_penalty.count, true}})
    if (!(p.count == 1 || p.count == B || (p.optional && p.count == 0)))
      return Status::error(Code::kInvalidArgument,
                           "%s: expected one value or one per batch row (B=%lld), got %lld", p.name,
                           (ll)B, (ll)p.count);
  for (int64_t b = 0; b < B; ++b) {
    const RowSampling r = row_sampling(temperature, f, b, V);
    const float T = r.temperature;
    if (!(T >= 0.0f && T <= FLT_MAX))
      return Status::error(Code::kInvalidArgument,
                           "temperature[%lld] = %g: expected a finite value >= 0 (0 means greedy)",
                           (ll)b, (double)T);
    if (T > 0.0f && !(1.0f / T <= FLT_MAX))
      return Status::error(Code::kInvalidArgument,
                           "temperature[%lld] = %g is too small: 1 / temperature overflows float "
                           "(use 0 for greedy)",
                           (ll)b, (double)T);
    if (r.top_k < 0)
      return Status::error(Code::kInvalidArgument,
                           "top_k[%lld] = %lld: expected a value >= 0 (0 is off; V=%lld or more keeps "
                           "every token)",
                           (ll)b, (ll)r.top_k, (ll)V);
    if (!(r.top_p > 0.0f && r.top_p <= 1.0f))
      return Status::error(Code::kInvalidArgument, "top_p[%lld] = %g: expected a value in (0, 1]",
                           (ll)b, (double)r.top_p);
    if (!(r.min_p >= 0.0f && r.min_p <= 1.0f))
      return Status::error(Code::kInvalidArgument, "min_p[%lld] = %g: expected a value in [0, 1]",
                           (ll)b, (double)r.min_p);
    if (!(r.penalty > 0.0f && r.penalty <= FLT_MAX))
      return Status::error(Code::kInvalidArgument,
                           "repetition_penalty[%lld] = %g: expected a finite value > 0", (ll)b,
                           (double)r.penalty);
  }
  const Tokens& prev = f.prev_tokens;
  if (prev.data != nullptr || prev.len > 0) {
    if (!(prev.batch == 1 || prev.batch == B))
      return Status::error(Code::kInvalidArgument,
                           "prev_tokens: expected 1 or B=%lld rows, got %lld", (ll)B, (ll)prev.batch);
    if (prev.data == nullptr && prev.len > 0)
      return Status::error(Code::kInvalidArgument, "prev_tokens: data pointer is null");
    for (int64_t b = 0; b < prev.batch; ++b)
      for (int64_t i = 0; i < prev.len; ++i) {
        const int64_t t = prev.at(b, i);
        if (t != -1 && (t < 0 || t >= V))
          return Status::error(Code::kInvalidArgument,
                               "prev_tokens[%lld, %lld] = %lld is outside the vocabulary [0, %lld) "
                               "(-1 is padding)",
                               (ll)b, (ll)i, (ll)t, (ll)V);
      }
  }
  return Status::ok();
}

RowSampling row_sampling(PerRow<float> temperature, const Filters& f, int64_t b, int64_t V) {
  RowSampling r;
  r.temperature = temperature.at(b);
  r.top_k = f.top_k.at_or(b, 0);
  if (r.top_k >= V) r.top_k = 0;
  r.top_p = f.top_p.at_or(b, 1.0f);
  r.min_p = f.min_p.at_or(b, 0.0f);
  r.penalty = f.repetition_penalty.at_or(b, 1.0f);
  return r;
}

void PenalizedIds::reset(const Filters& f, int64_t b, bool active) {
  ids_.clear();
  active_ = active && f.prev_tokens.data != nullptr;
  if (!active_) return;
  const int64_t row = f.prev_tokens.batch == 1 ? 0 : b;
  for (int64_t i = 0; i < f.prev_tokens.len; ++i) {
    const int64_t t = f.prev_tokens.at(row, i);
    if (t >= 0) ids_.push_back(t);
  }
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
}

void PenalizedIds::insert(int64_t id) {
  if (!active_) return;
  const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
  if (it == ids_.end() || *it != id) ids_.insert(it, id);
}

Status bad_logit(const RowKernels& k, const void* row, int64_t V, RowName where) {
  for (int64_t j = 0; j < V; ++j) {
    const float v = k.load(row, j);
    if (!(v < kInf))
      return Status::error(Code::kInvalidArgument, "%s, %lld] = %g: logits must not be NaN or +inf",
                           where.prefix().c_str(), (ll)j, (double)v);
  }
  return Status::ok();
}

float patched_row_max(const RowKernels& k, const void* row, int64_t V, float raw_max,
                      Patches patches) {
  if (patches.count == 0) return raw_max;
  float raw_patched = -kInf, patched = -kInf;
  for (int64_t i = 0; i < patches.count; ++i) {
    raw_patched = std::max(raw_patched, k.load(row, patches.index[i]));
    patched = std::max(patched, patches.value[i]);
  }
  // The unpatched maximum stands unless a patched token held it.
  if (raw_max > raw_patched) return std::max(raw_max, patched);
  return k.patched_max(row, V, patches);
}

Status greedy_token(const RowKernels& k, const void* row, int64_t V,
                    const std::vector<int64_t>& penalized_ids, float penalty, RowName where,
                    int64_t* token) {
  const ArgmaxResult am = k.argmax(row, V);
  if (am.nan_at >= 0)
    return Status::error(Code::kInvalidArgument, "%s, %lld] is NaN", where.prefix().c_str(),
                         (ll)am.nan_at);
  *token = am.index;
  const float raw_max = k.load(row, am.index);
  if (raw_max == -kInf) return no_finite_logit(where);  // as at T > 0: no token to emit
  if (penalty == 1.0f || penalized_ids.empty()) return Status::ok();
  thread_local std::vector<float> values, hit_values;
  thread_local std::vector<int64_t> hits;
  values.resize(penalized_ids.size());
  for (size_t i = 0; i < penalized_ids.size(); ++i)
    values[i] = apply_penalty(k.load(row, penalized_ids[i]), penalty);
  const Patches patches{penalized_ids.data(), values.data(), static_cast<int64_t>(values.size())};
  const float ymax = patched_row_max(k, row, V, raw_max, patches);
  if (ymax == -kInf) return no_finite_logit(where);  // the penalty took the last finite logit
  if (ymax == kInf) {
    // x - ymax is NaN at +inf, so the collect below would find nothing: the first +inf of the
    // patched row, by a scan (+inf logits are rare).
    for (int64_t j = 0;; ++j) {
      const int64_t i = find_sorted(penalized_ids, j);
      if ((i < 0 ? k.load(row, j) : values[i]) == kInf) {
        *token = j;
        return Status::ok();
      }
    }
  }
  // Unpatched tokens at the maximum: x - ymax >= 0 holds exactly when x >= ymax.
  hits.resize(V);
  hit_values.resize(V);
  ExpMap at_max;
  at_max.xmax = ymax;
  const int64_t n = k.collect(row, V, at_max, 0.0f, hits.data(), hit_values.data()).count;
  int64_t best = V;
  for (int64_t i = 0; i < n; ++i)
    if (find_sorted(penalized_ids, hits[i]) < 0) {
      best = hits[i];
      break;
    }
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] == ymax) {
      best = std::min(best, penalized_ids[i]);
      break;
    }
  *token = best;
  return Status::ok();
}

Status FilteredRow::build(const RowKernels& k, const void* row, int64_t V, const RowSampling& rs,
                          const std::vector<int64_t>& penalized_ids, RowName where, RowUse use) {
  row_ = row;
  V_ = V;
  temperature_ = rs.temperature;
  patch_index_.clear();
  patch_value_.clear();
  if (rs.penalty != 1.0f)
    for (const int64_t id : penalized_ids) {
      const float x = k.load(row, id), y = apply_penalty(x, rs.penalty);
      // x / penalty can overflow: a +inf logit has no softmax (NaN logits are refused later).
      if (y == kInf && x < kInf)
        return Status::error(Code::kInvalidArgument,
                             "%s, %lld] = %g: the repetition penalty %g makes it +inf",
                             where.prefix().c_str(), (ll)id, (double)x, (double)rs.penalty);
      patch_index_.push_back(id);
      patch_value_.push_back(y);
    }
  map_ = ExpMap{};
  map_.patches = Patches{patch_index_.data(), patch_value_.data(),
                         static_cast<int64_t>(patch_index_.size())};
  map_.inv_temp = 1.0f / rs.temperature;
  explicit_ = rs.filtered();
  kept_.clear();
  kept_y_.clear();
  kept_num_.clear();
  mass_known_ = true;
  refine_steps_ = 0;
  use_ = use;
  if (rs.top_k > 0) return candidates_top_k(k, rs, where);

  if (!explicit_) return use == RowUse::kDecide ? build_bounds(k, where) : build_envelope(k, where);
  const MaxResult mx = k.logit_max(row, V);
  if (!mx.clean) return bad_logit(k, row, V, where);
  map_.xmax = patched_row_max(k, row, V, mx.max, map_.patches);
  if (map_.xmax == -kInf) return no_finite_logit(where);
  return candidates_by_mass(k, rs);
}

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

double DrawStream::operator()() {
  if (!used_first) {
    used_first = true;
    return first;
  }
  return philox_uniform(seed, offset, row, next++);
}

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
// kSuperBlock blocks, whose totals are summed left to right: the running total at the end of
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
  const int64_t supers = (blocks + kSuperBlock - 1) / kSuperBlock;
  super_total_.resize(supers + 1);
  super_total_[0] = 0.0;
  for (int64_t s = 0; s < supers; ++s) {
    double run = 0.0;
    for (int64_t b = s * kSuperBlock; b < std::min(blocks, (s + 1) * kSuperBlock); ++b) run += weight_[b];
    super_total_[s + 1] = super_total_[s] + run;
  }
  envelope_ready_ = true;
}

MassBounds FilteredRow::mass_bounds() const {
  if (mass_known_) return MassBounds{mass_, mass_};
  if (use_ != RowUse::kDecide) return MassBounds{0.0, std::numeric_limits<double>::infinity()};
  return MassBounds{bound_lo_, bound_hi_};
}

float FilteredRow::value(const RowKernels& k, int64_t t) const {
  const int64_t i = find_sorted(patch_index_, t);
  return i < 0 ? k.load(row_, t) : patch_value_[i];
}

float FilteredRow::numerator(const RowKernels& k, int64_t t) const {
  if (explicit_) {
    const int64_t i = find_sorted(kept_, t);
    return i < 0 ? 0.0f : kept_num_[i];
  }
  return exp_nonpositive((value(k, t) - map_.xmax) * map_.inv_temp);
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
  const int64_t end = std::min(blocks, (lo + 1) * kSuperBlock);
  double run = 0.0;
  int64_t b = lo * kSuperBlock;
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

void FilteredRow::write_scaled(float* out) const {
  const Patches& p = map_.patches;
  for (int64_t i = 0; i < p.count; ++i) out[p.index[i]] = p.value[i];
  if (!explicit_) {
    if (temperature_ != 1.0f)
      for (int64_t j = 0; j < V_; ++j) out[j] = out[j] / temperature_;
    return;
  }
  size_t next = 0;
  for (int64_t j = 0; j < V_; ++j) {
    if (next < kept_.size() && kept_[next] == j) {
      out[j] = out[j] / temperature_;
      ++next;
    } else {
      out[j] = -kInf;
    }
  }
}

double FilteredRow::residual_mass(const FilteredRow& q, float a, float b) const {
  return residual_walk(q, a, b, -1.0, nullptr);
}

int64_t FilteredRow::residual_draw(const FilteredRow& q, float a, float b, double target) const {
  int64_t token = -1;
  residual_walk(q, a, b, target, &token);
  return token;
}

// max(0, num_p * a - num_q * b) over p's kept tokens, ascending, summed in double; with `token`,
// stops at the first running sum above `target` (or the last positive term).
double FilteredRow::residual_walk(const FilteredRow& q, float a, float b, double target,
                                  int64_t* token) const {
  double cum = 0.0;
  size_t qi = 0;
  for (size_t i = 0; i < kept_.size(); ++i) {
    const int64_t id = kept_[i];
    while (qi < q.kept_.size() && q.kept_[qi] < id) ++qi;
    const float nq = qi < q.kept_.size() && q.kept_[qi] == id ? q.kept_num_[qi] : 0.0f;
    const float d = kept_num_[i] * a - nq * b;
    if (!(d > 0.0f)) continue;
    cum += d;
    if (token != nullptr) {
      *token = id;
      if (cum > target) break;
    }
  }
  return cum;
}

}  // namespace spec_edge
