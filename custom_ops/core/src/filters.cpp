// Sort-free sampling filters: a row's settings and checks, the greedy token under the penalty, and
// FilteredRow's construction and per-token reads. Its roles live beside it: the kept set
// (kept_set.cpp), the seeded draw (envelope_draw.cpp), the mass (row_mass.cpp), the residual
// (residual.cpp). The passes over the row (max, mass, collect) are the ISA kernels; everything
// after them works on the few collected candidates with the same scalar code on every path, so
// the kept set and the drawn token are identical everywhere.
#include "filters.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "spec_edge/numerics.h"

namespace spec_edge {
namespace {

using ll = long long;

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

}  // namespace spec_edge
