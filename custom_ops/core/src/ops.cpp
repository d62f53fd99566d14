// Op drivers: argument validation, the speculative-sampling rule, and the per-row passes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

#include "filters.h"
#include "spec_edge/detail/row_kernels.h"
#include "spec_edge/detail/validate.h"
#include "spec_edge/numerics.h"
#include "spec_edge/ops.h"
#include "spec_edge/philox.h"

namespace spec_edge {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

namespace {

using ll = long long;

const char* row_bytes(const Rows& r, int64_t b, int64_t i) {
  const int64_t elem = r.dtype == DType::kFloat32 ? 4 : 2;
  return static_cast<const char*>(r.data) + (b * r.batch_stride + i * r.row_stride) * elem;
}

Status check_scores(const Rows& r, const char* name) {
  if (r.dtype != DType::kFloat32 && r.dtype != DType::kFloat16 && r.dtype != DType::kBFloat16)
    return Status::error(Code::kInvalidDType,
                         "%s: unsupported dtype %s; expected float32, float16 or bfloat16", name,
                         dtype_name(r.dtype));
  if (r.batch < 0 || r.rows < 0 || r.vocab < 1)
    return Status::error(Code::kInvalidArgument, "%s: expected a non-empty vocabulary axis, got V=%lld",
                         name, (ll)r.vocab);
  if (r.data == nullptr && r.batch > 0 && r.rows > 0)
    return Status::error(Code::kInvalidArgument, "%s: data pointer is null", name);
  return Status::ok();
}

// target [B, K+1, V] against draft_tokens [B, K] (and draft scores [B, K, V] when given).
Status check_shapes(const Rows& target, const char* target_name, const Rows* draft,
                    const char* draft_name, const Tokens& tokens) {
  SPEC_EDGE_RETURN_IF_ERROR(check_scores(target, target_name));
  if (target.rows < 1)
    return Status::error(Code::kInvalidArgument,
                         "%s: expected K+1 >= 1 rows (shape [B, K+1, V]), got 0", target_name);
  const int64_t K = target.rows - 1;
  if (tokens.batch != target.batch)
    return Status::error(Code::kInvalidArgument,
                         "draft_tokens: batch size %lld does not match %s's batch size %lld",
                         (ll)tokens.batch, target_name, (ll)target.batch);
  if (tokens.len != K)
    return Status::error(Code::kInvalidArgument,
                         "draft_tokens: expected K=%lld tokens (%s has K+1=%lld rows), got %lld",
                         (ll)K, target_name, (ll)target.rows, (ll)tokens.len);
  if (tokens.data == nullptr && tokens.batch > 0 && K > 0)
    return Status::error(Code::kInvalidArgument, "draft_tokens: data pointer is null");
  if (draft != nullptr) {
    SPEC_EDGE_RETURN_IF_ERROR(check_scores(*draft, draft_name));
    if (draft->dtype != target.dtype)
      return Status::error(Code::kInvalidDType, "%s: dtype %s does not match %s's dtype %s",
                           draft_name, dtype_name(draft->dtype), target_name,
                           dtype_name(target.dtype));
    if (draft->batch != target.batch)
      return Status::error(Code::kInvalidArgument,
                           "%s: batch size %lld does not match %s's batch size %lld", draft_name,
                           (ll)draft->batch, target_name, (ll)target.batch);
    if (draft->rows != K)
      return Status::error(Code::kInvalidArgument,
                           "%s: expected K=%lld rows (%s has K+1=%lld rows), got %lld", draft_name,
                           (ll)K, target_name, (ll)target.rows, (ll)draft->rows);
    if (draft->vocab != target.vocab)
      return Status::error(Code::kInvalidArgument,
                           "%s: vocabulary size %lld does not match %s's V=%lld", draft_name,
                           (ll)draft->vocab, target_name, (ll)target.vocab);
  }
  return Status::ok();
}

Status check_token(const Tokens& tokens, int64_t b, int64_t i, int64_t V) {
  const int64_t t = tokens.at(b, i);
  if (t < 0 || t >= V)
    return Status::error(Code::kInvalidArgument,
                         "draft_tokens[%lld, %lld] = %lld is outside the vocabulary [0, %lld)",
                         (ll)b, (ll)i, (ll)t, (ll)V);
  return Status::ok();
}

// Greedy verification of one sequence over rows 0..n of `target`.
Status greedy_row(const RowKernels& k, const Rows& target, const char* name, const Tokens& tokens,
                  int64_t b, int64_t n, int64_t* n_accepted, int64_t* next_token) {
  for (int64_t i = 0; i <= n; ++i) {
    const ArgmaxResult am = k.argmax(row_bytes(target, b, i), target.vocab);
    if (am.nan_at >= 0)
      return Status::error(Code::kInvalidArgument, "%s[%lld, %lld, %lld] is NaN", name, (ll)b,
                           (ll)i, (ll)am.nan_at);
    if (k.load(row_bytes(target, b, i), am.index) == -std::numeric_limits<float>::infinity())
      return no_finite_logit({name, b, i});
    if (i == n || tokens.at(b, i) != am.index) {
      *n_accepted = i;
      *next_token = am.index;
      return Status::ok();
    }
  }
  return Status::ok();  // unreachable: the loop returns at i == n
}

// Mass of a probability row, with the element checks that make it a distribution.
Status prob_row_mass(const RowKernels& k, const void* row, int64_t V, const char* name, int64_t b,
                     int64_t i, double* mass) {
  const MassResult r = k.prob_mass(row, V, -1);
  if (!r.clean) {
    for (int64_t j = 0; j < V; ++j) {
      const float v = k.load(row, j);
      if (!(v >= 0.0f && v <= FLT_MAX))
        return Status::error(Code::kInvalidArgument,
                             "%s[%lld, %lld, %lld] = %g: probabilities must be finite and >= 0",
                             name, (ll)b, (ll)i, (ll)j, (double)v);
    }
  }
  if (!(r.mass >= FLT_MIN) || !std::isfinite(r.mass))
    return Status::error(Code::kInvalidArgument,
                         "%s[%lld, %lld] has mass %g: a probability row needs a finite sum "
                         ">= %g (an all-zero row is not a distribution)",
                         name, (ll)b, (ll)i, r.mass, (double)FLT_MIN);
  *mass = r.mass;
  return Status::ok();
}

// Accept t iff u * q(t) / Q <= p(t) / P, and never a token the target gives zero probability.
bool accept_token(double u, double pt, double P, double qt, double Q) {
  return pt > 0.0 && u * qt * P <= pt * Q;
}

// accept_token's decision when P and Q are only known to lie in their bounds: settled when the
// comparison comes out the same at both ends (rounding is monotone, so the ends bound the
// exact comparison's operands).
enum class Decision { kAccept, kReject, kUnknown };
Decision accept_within(double u, double pt, MassBounds P, double qt, MassBounds Q) {
  if (!(pt > 0.0)) return Decision::kReject;
  if (u * qt * P.hi <= pt * Q.lo) return Decision::kAccept;
  if (u * qt * P.lo > pt * Q.hi) return Decision::kReject;
  return Decision::kUnknown;
}

}  // namespace

Status validate_verify_greedy(const Rows& target, const Tokens& draft_tokens) {
  SPEC_EDGE_RETURN_IF_ERROR(check_shapes(target, "target_probs", nullptr, nullptr, draft_tokens));
  const int64_t K = target.rows - 1;
  for (int64_t b = 0; b < target.batch; ++b)
    for (int64_t i = 0; i < K; ++i) SPEC_EDGE_RETURN_IF_ERROR(check_token(draft_tokens, b, i, target.vocab));
  return Status::ok();
}

Status verify_greedy(const Rows& target, const Tokens& draft_tokens, VerifyResult out) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify_greedy(target, draft_tokens));
  const int64_t K = target.rows - 1;
  const RowKernels& k = row_kernels(target.dtype);
  for (int64_t b = 0; b < target.batch; ++b)
    SPEC_EDGE_RETURN_IF_ERROR(greedy_row(k, target, "target_probs", draft_tokens, b, K,
                                         &out.n_accepted[b], &out.next_token[b]));
  return Status::ok();
}

Status validate_accept(const Rows& target, const Rows* draft, const Tokens& draft_tokens,
                       const Uniforms& uniforms) {
  SPEC_EDGE_RETURN_IF_ERROR(check_shapes(target, "target_probs", draft, "draft_probs", draft_tokens));
  const int64_t K = target.rows - 1, V = target.vocab;
  if (uniforms.dtype != DType::kFloat32 && uniforms.dtype != DType::kFloat64)
    return Status::error(Code::kInvalidDType, "uniforms: unsupported dtype %s; expected float32 or float64",
                         dtype_name(uniforms.dtype));
  if (uniforms.batch != target.batch || uniforms.len != K + 1)
    return Status::error(Code::kInvalidArgument,
                         "uniforms: expected shape [B=%lld, K+1=%lld], got [%lld, %lld]",
                         (ll)target.batch, (ll)(K + 1), (ll)uniforms.batch, (ll)uniforms.len);
  for (int64_t b = 0; b < target.batch; ++b) {
    for (int64_t i = 0; i < K; ++i) SPEC_EDGE_RETURN_IF_ERROR(check_token(draft_tokens, b, i, V));
    for (int64_t i = 0; i <= K; ++i) {
      const double u = uniforms.at(b, i);
      if (!(u >= 0.0 && u < 1.0))
        return Status::error(Code::kInvalidArgument, "uniforms[%lld, %lld] = %g is outside [0, 1)",
                             (ll)b, (ll)i, u);
    }
  }
  return Status::ok();
}

Status accept(const Rows& target, const Rows* draft, const Tokens& draft_tokens,
              const Uniforms& uniforms, VerifyResult out) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_accept(target, draft, draft_tokens, uniforms));
  const int64_t K = target.rows - 1, V = target.vocab;
  const RowKernels& k = row_kernels(target.dtype);
  for (int64_t b = 0; b < target.batch; ++b) {
    const double u_last = uniforms.at(b, K);
    int64_t n = K, token = -1;
    for (int64_t i = 0; i < K; ++i) {
      const int64_t t = draft_tokens.at(b, i);
      const void* p = row_bytes(target, b, i);
      double P = 0.0;
      SPEC_EDGE_RETURN_IF_ERROR(prob_row_mass(k, p, V, "target_probs", b, i, &P));
      const double pt = k.load(p, t);
      if (draft != nullptr) {
        const void* q = row_bytes(*draft, b, i);
        double Q = 0.0;
        SPEC_EDGE_RETURN_IF_ERROR(prob_row_mass(k, q, V, "draft_probs", b, i, &Q));
        if (accept_token(uniforms.at(b, i), pt, P, k.load(q, t), Q)) continue;
        const float a = static_cast<float>(1.0 / P), c = static_cast<float>(1.0 / Q);
        const double R = k.prob_residual_mass(p, q, V, a, c);
        token = R > 0.0 ? k.prob_residual_scan(p, q, V, a, c, u_last * R)
                        : k.prob_scan(p, V, -1, u_last * P);
      } else {
        if (accept_token(uniforms.at(b, i), pt, P, 1.0, 1.0)) continue;
        const double R = k.prob_mass(p, V, t).mass;
        token = R > 0.0 ? k.prob_scan(p, V, t, u_last * R) : k.prob_scan(p, V, -1, u_last * P);
      }
      n = i;
      break;
    }
    if (n == K) {
      const void* p = row_bytes(target, b, K);
      double P = 0.0;
      SPEC_EDGE_RETURN_IF_ERROR(prob_row_mass(k, p, V, "target_probs", b, K, &P));
      token = k.prob_scan(p, V, -1, u_last * P);
    }
    out.n_accepted[b] = n;
    out.next_token[b] = token;
  }
  return Status::ok();
}

Status validate_verify(const Rows& target, const Rows& draft, const Tokens& draft_tokens,
                       const VerifyParams& params) {
  SPEC_EDGE_RETURN_IF_ERROR(check_shapes(target, "target_logits", &draft, "draft_logits", draft_tokens));
  const int64_t B = target.batch, K = target.rows - 1, V = target.vocab;
  SPEC_EDGE_RETURN_IF_ERROR(check_sampling(B, V, params.temperature, params.seed.count,
                                           params.offset.count, params.filters));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = params.num_draft ? params.num_draft[b] : K;
    if (n < 0 || n > K)
      return Status::error(Code::kInvalidArgument, "num_draft[%lld] = %lld is outside [0, K=%lld]",
                           (ll)b, (ll)n, (ll)K);
    for (int64_t i = 0; i < n; ++i) SPEC_EDGE_RETURN_IF_ERROR(check_token(draft_tokens, b, i, V));
  }
  return Status::ok();
}

Status verify(const Rows& target, const Rows& draft, const Tokens& draft_tokens,
              const VerifyParams& params, VerifyOutput out) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify(target, draft, draft_tokens, params));
  const int64_t B = target.batch, K = target.rows - 1, V = target.vocab;
  const RowKernels& k = row_kernels(target.dtype);
  thread_local PenalizedIds seen;
  thread_local FilteredRow fp, fq;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n_draft = params.num_draft ? params.num_draft[b] : K;
    const RowSampling rs = row_sampling(params.temperature, params.filters, b, V);
    seen.reset(params.filters, b, rs.penalty != 1.0f);
    int64_t n = n_draft, token = -1;
    if (rs.temperature == 0.0f) {
      for (int64_t i = 0; i <= n_draft; ++i) {
        SPEC_EDGE_RETURN_IF_ERROR(greedy_token(k, row_bytes(target, b, i), V, seen.ids(),
                                               rs.penalty, {"target_logits", b, i}, &token));
        if (i == n_draft || draft_tokens.at(b, i) != token) {
          n = i;
          break;
        }
        seen.insert(token);
      }
    } else {
      const uint64_t seed = static_cast<uint64_t>(params.seed.at(b));
      const uint64_t offset = static_cast<uint64_t>(params.offset.at(b));
      const auto u = [&](int64_t j) {
        return philox_uniform(seed, offset, static_cast<uint32_t>(b), static_cast<uint64_t>(j));
      };
      const double u_last = u(n_draft);
      for (int64_t i = 0; i < n_draft; ++i) {
        const int64_t t = draft_tokens.at(b, i);
        const void* p = row_bytes(target, b, i);
        const void* q = row_bytes(draft, b, i);
        SPEC_EDGE_RETURN_IF_ERROR(fp.build(k, p, V, rs, seen.ids(), {"target_logits", b, i}, RowUse::kDecide));
        SPEC_EDGE_RETURN_IF_ERROR(fq.build(k, q, V, rs, seen.ids(), {"draft_logits", b, i}, RowUse::kDecide));
        const double pt = fp.numerator(k, t), qt = fq.numerator(k, t);
        // Bounds first, tightened (the row whose bounds are relatively wider first) only while
        // they cannot decide.
        Decision d = accept_within(u(i), pt, fp.mass_bounds(), qt, fq.mass_bounds());
        while (d == Decision::kUnknown) {
          const MassBounds P = fp.mass_bounds(), Q = fq.mass_bounds();
          const bool p_wider = P.hi * Q.lo >= Q.hi * P.lo;
          if (!(p_wider ? fp : fq).refine(k) && !(p_wider ? fq : fp).refine(k)) break;
          d = accept_within(u(i), pt, fp.mass_bounds(), qt, fq.mass_bounds());
        }
        if (d == Decision::kUnknown)
          d = accept_token(u(i), pt, fp.mass(k), qt, fq.mass(k)) ? Decision::kAccept
                                                                 : Decision::kReject;
        if (d == Decision::kAccept) {
          seen.insert(t);
          continue;
        }
        const double P = fp.mass(k), Q = fq.mass(k);
        const float a = static_cast<float>(1.0 / P), c = static_cast<float>(1.0 / Q);
        double R = 0.0;
        if (fp.explicit_set()) {
          R = fp.residual_mass(fq, a, c);
          if (R > 0.0) token = fp.residual_draw(fq, a, c, u_last * R);
        } else {
          // The exact masses computed the numerators: the residual reads them.
          const RowKernels& f32 = row_kernels(DType::kFloat32);
          R = f32.prob_residual_mass(fp.numerators(), fq.numerators(), V, a, c);
          if (R > 0.0)
            token = f32.prob_residual_scan(fp.numerators(), fq.numerators(), V, a, c, u_last * R);
        }
        if (!(R > 0.0)) token = fp.draw(k, u_last * P);
        n = i;
        break;
      }
      if (n == n_draft) {
        SPEC_EDGE_RETURN_IF_ERROR(fp.build(k, row_bytes(target, b, n_draft), V, rs, seen.ids(),
                                           {"target_logits", b, n_draft}, RowUse::kDraw));
        DrawStream uniforms{seed, offset, static_cast<uint32_t>(b), u_last,
                            static_cast<uint64_t>(K + 1)};
        token = fp.sample(k, uniforms);
      }
    }
    int64_t* row = out.tokens + b * out.tokens_stride;
    for (int64_t j = 0; j <= K; ++j) row[j] = j < n ? draft_tokens.at(b, j) : (j == n ? token : -1);
    out.accept_len[b] = n;
  }
  return Status::ok();
}

Status validate_sampling_rows(const Rows& logits, PerRow<float> temperature, int64_t seed_count,
                              int64_t offset_count, const Filters& filters) {
  SPEC_EDGE_RETURN_IF_ERROR(check_scores(logits, "logits"));
  if (logits.rows != 1)
    return Status::error(Code::kInvalidArgument, "logits: expected one row per batch entry, got %lld",
                         (ll)logits.rows);
  return check_sampling(logits.batch, logits.vocab, temperature, seed_count, offset_count, filters);
}

namespace {

template <class T>
void row_to_float(const void* row, int64_t V, float* out) {
  const T* x = static_cast<const T*>(row);
  for (int64_t j = 0; j < V; ++j) out[j] = to_float(x[j]);
}

}  // namespace

Status sample(const Rows& logits, const SampleParams& params, int64_t* tokens) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, params.temperature, params.seed.count,
                                              params.offset.count, params.filters));
  const int64_t V = logits.vocab;
  const RowKernels& k = row_kernels(logits.dtype);
  thread_local PenalizedIds seen;
  thread_local FilteredRow f;
  for (int64_t b = 0; b < logits.batch; ++b) {
    const void* row = row_bytes(logits, b, 0);
    const RowSampling rs = row_sampling(params.temperature, params.filters, b, V);
    seen.reset(params.filters, b, rs.penalty != 1.0f);
    if (rs.temperature == 0.0f) {
      SPEC_EDGE_RETURN_IF_ERROR(
          greedy_token(k, row, V, seen.ids(), rs.penalty, {"logits", b, -1}, &tokens[b]));
      continue;
    }
    SPEC_EDGE_RETURN_IF_ERROR(f.build(k, row, V, rs, seen.ids(), {"logits", b, -1}, RowUse::kDraw));
    const uint64_t seed = static_cast<uint64_t>(params.seed.at(b));
    const uint64_t offset = static_cast<uint64_t>(params.offset.at(b));
    DrawStream uniforms{seed, offset, static_cast<uint32_t>(b),
                        philox_uniform(seed, offset, static_cast<uint32_t>(b), 0), 1};
    tokens[b] = f.sample(k, uniforms);
  }
  return Status::ok();
}

Status check_sampling_settings(int64_t vocab, float temperature, const Filters& filters) {
  return check_sampling(1, vocab, PerRow<float>{&temperature, 1}, 1, 1, filters);
}

Status filter_logits(const Rows& logits, PerRow<float> temperature, const Filters& filters,
                     float* out, int64_t out_stride) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, temperature, 1, 1, filters));
  const int64_t V = logits.vocab;
  const RowKernels& k = row_kernels(logits.dtype);
  thread_local PenalizedIds seen;
  thread_local FilteredRow f;
  for (int64_t b = 0; b < logits.batch; ++b) {
    const void* row = row_bytes(logits, b, 0);
    float* y = out + b * out_stride;
    const RowSampling rs = row_sampling(temperature, filters, b, V);
    seen.reset(filters, b, rs.penalty != 1.0f);
    if (rs.temperature == 0.0f) {
      int64_t token = 0;
      SPEC_EDGE_RETURN_IF_ERROR(greedy_token(k, row, V, seen.ids(), rs.penalty, {"logits", b, -1}, &token));
      const float x = k.load(row, token);
      const bool seen_token = std::binary_search(seen.ids().begin(), seen.ids().end(), token);
      for (int64_t j = 0; j < V; ++j) y[j] = -std::numeric_limits<float>::infinity();
      y[token] = seen_token ? apply_penalty(x, rs.penalty) : x;
      continue;
    }
    SPEC_EDGE_RETURN_IF_ERROR(f.build(k, row, V, rs, seen.ids(), {"logits", b, -1}, RowUse::kDraw));
    switch (logits.dtype) {
      case DType::kFloat16: row_to_float<Half>(row, V, y); break;
      case DType::kBFloat16: row_to_float<BFloat16>(row, V, y); break;
      default: row_to_float<float>(row, V, y); break;
    }
    f.write_scaled(y);
    // The row's maximum y / T is the largest value written: a finite row can overflow there, in
    // float or in the logits' own dtype that the output takes.
    const float limit = largest_kept_finite(logits.dtype);
    if (f.map().xmax / rs.temperature > limit) {
      const int64_t j = std::find_if(y, y + V, [limit](float v) { return v > limit; }) - y;
      return Status::error(Code::kInvalidArgument,
                           "logits[%lld, %lld] = %g: divided by the temperature %g it overflows "
                           "%s (filter_logits cannot return it; sample and verify take the row)",
                           (ll)b, (ll)j, (double)k.load(row, j), (double)rs.temperature,
                           logits.dtype == DType::kFloat32 ? "float" : dtype_name(logits.dtype));
    }
  }
  return Status::ok();
}

}  // namespace spec_edge
