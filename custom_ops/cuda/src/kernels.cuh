// The kernels of the CUDA build, one thread block per sequence: verify_greedy, accept, verify,
// sample and filter_logits.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "envelope_draw.cuh"
#include "kept_set.cuh"
#include "residual.cuh"

namespace spec_edge {
namespace cuda {
namespace {

// ---- kernels ------------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) verify_greedy_kernel(DeviceRows<T> target, Launch L,
                                                                 int64_t* n_accepted, int64_t* next_token) {
  __shared__ Shared sh;
  const int64_t b = blockIdx.x, K = L.K;
  for (int64_t i = 0; i <= K; ++i) {
    const LogitRow<T> r{target.row(b, i), target.vocab, nullptr, 1.0f};
    int64_t token = 0;
    if (!greedy(r, 0, i, &L.faults[b], &token, sh)) return;
    if (i == K || L.tokens[b * K + i] != token) {
      if (threadIdx.x == 0) {
        n_accepted[b] = i;
        next_token[b] = token;
      }
      return;
    }
  }
}

// A probability row, `exclude` read as 0.
template <class T>
struct ProbRow {
  const T* x;
  int64_t exclude;
  __device__ float operator()(int64_t j) const { return j == exclude ? 0.0f : to_float(x[j]); }
};

// prob_row_mass: the row's mass, with the element and mass checks; false on a fault.
template <class T>
__device__ bool prob_mass_checked(const T* x, int64_t V, float* sums, int tensor, int64_t row,
                                  RowFault* fault, double* mass, Shared& sh) {
  int64_t bad = kNone;
  for (int64_t j = threadIdx.x; j < V; j += kThreads) {
    const float v = to_float(x[j]);
    if (!(v >= 0.0f && v <= FLT_MAX)) bad = min(bad, j);
  }
  bad = block_min(bad, sh);
  const double P = block_mass(V, ProbRow<T>{x, -1}, sums, sh);
  if (bad != kNone || !(P >= FLT_MIN) || !isfinite(P)) {
    if (threadIdx.x == 0) {
      if (bad != kNone) set_fault(fault, Fault::kBadProb, tensor, row, bad, to_float(x[bad]));
      else set_fault(fault, Fault::kBadMass, tensor, row, -1, 0.0f, P);
    }
    return false;
  }
  *mass = P;
  return true;
}

__host__ __device__ inline bool accept_token(double u, double pt, double P, double qt, double Q) {
  return pt > 0.0 && u * qt * P <= pt * Q;
}

template <class T>
__global__ void __launch_bounds__(kThreads) accept_kernel(DeviceRows<T> target, DeviceRows<T> draft,
                                                          bool has_draft, Launch L, int64_t* n_accepted,
                                                          int64_t* next_token) {
  __shared__ Shared sh;
  const int64_t b = blockIdx.x, K = L.K, V = target.vocab;
  const Scratch s = scratch_of(L, b, V);
  RowFault* fault = &L.faults[b];
  const double* u = L.uniforms + b * (K + 1);
  const double u_last = u[K];
  int64_t n = K, token = -1;
  for (int64_t i = 0; i < K; ++i) {
    const int64_t t = L.tokens[b * K + i];
    const T* p = target.row(b, i);
    double P = 0.0;
    if (!prob_mass_checked(p, V, s.sums_p, 0, i, fault, &P, sh)) return;
    const double pt = to_float(p[t]);
    if (has_draft) {
      const T* q = draft.row(b, i);
      double Q = 0.0;
      if (!prob_mass_checked(q, V, s.sums_q, 1, i, fault, &Q, sh)) return;
      if (accept_token(u[i], pt, P, to_float(q[t]), Q)) continue;
      const float a = static_cast<float>(1.0 / P), c = static_cast<float>(1.0 / Q);
      const auto residual = [&](int64_t j) {
        const float d = to_float(p[j]) * a - to_float(q[j]) * c;
        return d > 0.0f ? d : 0.0f;
      };
      const double R = block_mass(V, residual, s.sums_r, sh);
      if (threadIdx.x == 0)
        token = R > 0.0 ? inverse_cdf(V, residual, s.sums_r, u_last * R)
                        : inverse_cdf(V, ProbRow<T>{p, -1}, s.sums_p, u_last * P);
    } else {
      if (accept_token(u[i], pt, P, 1.0, 1.0)) continue;
      const ProbRow<T> rest{p, t};
      const double R = block_mass(V, rest, s.sums_r, sh);
      if (threadIdx.x == 0)
        token = R > 0.0 ? inverse_cdf(V, rest, s.sums_r, u_last * R)
                        : inverse_cdf(V, ProbRow<T>{p, -1}, s.sums_p, u_last * P);
    }
    n = i;
    break;
  }
  if (n == K) {
    const T* p = target.row(b, K);
    double P = 0.0;
    if (!prob_mass_checked(p, V, s.sums_p, 0, K, fault, &P, sh)) return;
    if (threadIdx.x == 0) token = inverse_cdf(V, ProbRow<T>{p, -1}, s.sums_p, u_last * P);
  }
  if (threadIdx.x == 0) {
    n_accepted[b] = n;
    next_token[b] = token;
  }
}

// Sampled verify of one sequence with filters: each row's kept set, the rule of `accept` on them
// with their exact masses, the residual over the kept tokens, the bonus token from the target's
// kept set. Returns false on a fault; n and token (thread 0's) as the unfiltered loop.
template <class T>
__device__ bool verify_kept(const DeviceRows<T>& target, const DeviceRows<T>& draft, int64_t b,
                            const RowParams& rp, const int64_t* tokens, uint32_t* bitmap, const Scratch& s,
                            RowFault* fault, int64_t* n, int64_t* token, Shared& sh) {
  const KeptRow &kp = s.kept[0], &kq = s.kept[1];
  const uint32_t row = static_cast<uint32_t>(b);
  const double u_last = philox_uniform(rp.seed, rp.offset, row, rp.n_draft);
  const int64_t V = target.vocab;
  for (int64_t i = 0; i < rp.n_draft; ++i) {
    const int64_t t = tokens[i];
    if (!build_kept(LogitRow<T>{target.row(b, i), V, bitmap, rp.penalty}, rp, kp, s, 0, i, fault, sh)) return false;
    if (!build_kept(LogitRow<T>{draft.row(b, i), V, bitmap, rp.penalty}, rp, kq, s, 1, i, fault, sh)) return false;
    const double P = kp.head->mass, Q = kq.head->mass;
    if (accept_token(philox_uniform(rp.seed, rp.offset, row, i), kept_numerator(kp, t), P, kept_numerator(kq, t), Q)) {
      add_penalized(bitmap, t);
      continue;
    }
    if (threadIdx.x == 0) {
      const float a = static_cast<float>(1.0 / P), c = static_cast<float>(1.0 / Q);
      const double R = kept_residual(kp, kq, a, c, -1.0, nullptr);
      if (R > 0.0) kept_residual(kp, kq, a, c, u_last * R, token);
      else *token = kept_draw(kp, u_last * P);
    }
    *n = i;
    return true;
  }
  *n = rp.n_draft;
  if (!build_kept(LogitRow<T>{target.row(b, rp.n_draft), V, bitmap, rp.penalty}, rp, kp, s, 0, rp.n_draft,
                  fault, sh))
    return false;
  if (threadIdx.x == 0) *token = kept_draw(kp, u_last * kp.head->mass);
  return true;
}

template <class T>
__global__ void __launch_bounds__(kThreads) verify_kernel(DeviceRows<T> target, DeviceRows<T> draft,
                                                          Launch L, int64_t* accept_len,
                                                          int64_t* out, int64_t out_stride) {
  __shared__ Shared sh;
  const int64_t b = blockIdx.x, K = L.K, V = target.vocab;
  const RowParams rp = L.params[b];
  const Scratch s = scratch_of(L, b, V);
  RowFault* fault = &L.faults[b];
  uint32_t* const bitmap = penalized_ids(L, rp, s.penalized, V);
  const int64_t n_draft = rp.n_draft;
  const int64_t* tokens = L.tokens + b * K;
  int64_t n = n_draft, token = -1;
  if (rp.temperature == 0.0f) {
    for (int64_t i = 0; i <= n_draft; ++i) {
      const LogitRow<T> r{target.row(b, i), V, bitmap, rp.penalty};
      if (!greedy(r, 0, i, fault, &token, sh)) return;
      if (i == n_draft || tokens[i] != token) {
        n = i;
        break;
      }
      add_penalized(bitmap, token);
    }
  } else if (rp.filtered()) {
    if (!verify_kept(target, draft, b, rp, tokens, bitmap, s, fault, &n, &token, sh)) return;
  } else {
    const float inv_temp = 1.0f / rp.temperature;
    const uint32_t row = static_cast<uint32_t>(b);
    const double u_last = philox_uniform(rp.seed, rp.offset, row, n_draft);
    for (int64_t i = 0; i < n_draft; ++i) {
      const int64_t t = tokens[i];
      const LogitRow<T> rp_row{target.row(b, i), V, bitmap, rp.penalty};
      const LogitRow<T> rq_row{draft.row(b, i), V, bitmap, rp.penalty};
      float pmax, qmax;
      if (!check_logits(rp_row, 0, i, fault, &pmax, sh)) return;
      if (!check_logits(rq_row, 1, i, fault, &qmax, sh)) return;
      const ExpRow<T> ep{rp_row, pmax, inv_temp}, eq{rq_row, qmax, inv_temp};
      const double P = block_mass(V, ep, s.sums_p, sh), Q = block_mass(V, eq, s.sums_q, sh);
      const double ui = philox_uniform(rp.seed, rp.offset, row, i);
      if (accept_token(ui, ep(t), P, eq(t), Q)) {
        add_penalized(bitmap, t);
        continue;
      }
      const float a = static_cast<float>(1.0 / P), c = static_cast<float>(1.0 / Q);
      const auto residual = [&](int64_t j) {
        const float d = ep(j) * a - eq(j) * c;
        return d > 0.0f ? d : 0.0f;
      };
      const double R = block_mass(V, residual, s.sums_r, sh);
      if (threadIdx.x == 0)
        token = R > 0.0 ? inverse_cdf(V, residual, s.sums_r, u_last * R)
                        : inverse_cdf(V, ep, s.sums_p, u_last * P);
      n = i;
      break;
    }
    if (n == n_draft) {
      const LogitRow<T> r{target.row(b, n_draft), V, bitmap, rp.penalty};
      const DrawStream uniforms{rp.seed, rp.offset, row, u_last, static_cast<uint64_t>(K + 1), false};
      if (!envelope_draw(r, inv_temp, uniforms, s, n_draft, fault, &token, sh)) return;
    }
  }
  if (threadIdx.x == 0) {
    int64_t* o = out + b * out_stride;
    for (int64_t j = 0; j <= K; ++j) o[j] = j < n ? tokens[j] : (j == n ? token : -1);
    accept_len[b] = n;
  }
}

// Row b of a [B, V] logits op (sample, filter_logits): its parameters, scratch, fault slot and
// logits under its penalty.
template <class T>
struct SamplingRow {
  RowParams params;
  Scratch scratch;
  RowFault* fault;
  LogitRow<T> logits;
  __device__ SamplingRow(const DeviceRows<T>& rows, const Launch& L)
      : params(L.params[blockIdx.x]), scratch(scratch_of(L, blockIdx.x, rows.vocab)), fault(&L.faults[blockIdx.x]),
        logits{rows.row(blockIdx.x, 0), rows.vocab, penalized_ids(L, params, scratch.penalized, rows.vocab),
               params.penalty} {}
};

template <class T>
__global__ void __launch_bounds__(kThreads) sample_kernel(DeviceRows<T> logits, Launch L, int64_t* tokens) {
  __shared__ Shared sh;
  const SamplingRow<T> row(logits, L);
  const RowParams& rp = row.params;
  const KeptRow& kept = row.scratch.kept[0];
  const uint32_t stream = static_cast<uint32_t>(blockIdx.x);
  const double u0 = philox_uniform(rp.seed, rp.offset, stream, 0);
  int64_t token = -1;
  if (rp.temperature == 0.0f) {
    if (!greedy(row.logits, 0, -1, row.fault, &token, sh)) return;
  } else if (rp.filtered()) {
    if (!build_kept(row.logits, rp, kept, row.scratch, 0, -1, row.fault, sh)) return;
    if (threadIdx.x == 0) token = kept_draw(kept, u0 * kept.head->mass);
  } else {
    const DrawStream uniforms{rp.seed, rp.offset, stream, u0, 1, false};
    if (!envelope_draw(row.logits, 1.0f / rp.temperature, uniforms, row.scratch, -1, row.fault, &token, sh))
      return;
  }
  if (threadIdx.x == 0) tokens[blockIdx.x] = token;
}

// filter_logits: out[j] = y / T for kept tokens, -inf for the others (greedy: the first argmax of y,
// unscaled).
template <class T>
__global__ void __launch_bounds__(kThreads) filter_kernel(DeviceRows<T> logits, Launch L, float* out,
                                                          int64_t out_stride) {
  __shared__ Shared sh;
  const int64_t b = blockIdx.x, V = logits.vocab;
  const SamplingRow<T> row(logits, L);
  const RowParams& rp = row.params;
  const Scratch& s = row.scratch;
  RowFault* fault = row.fault;
  const LogitRow<T>& r = row.logits;
  float* o = out + b * out_stride;
  if (rp.temperature == 0.0f) {
    int64_t token = 0;
    if (!greedy(r, 0, -1, fault, &token, sh)) return;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) o[j] = j == token ? r.y(j) : -kInf;
  } else if (rp.filtered()) {
    const KeptRow& kr = s.kept[0];
    if (!build_kept(r, rp, kr, s, 0, -1, fault, sh)) return;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) o[j] = -kInf;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < kr.head->n; i += kThreads) o[kr.id[i]] = kr.y[i] / rp.temperature;
  } else {
    float ymax;
    if (!check_logits(r, 0, -1, fault, &ymax, sh)) return;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) o[j] = r.y(j) / rp.temperature;
  }
  if (rp.temperature == 0.0f) return;
  // The core's check: a finite logit whose y / T overflows float or the logits' dtype (the
  // output's), the first such index.
  __syncthreads();
  const float limit = largest_kept_finite(dtype_of(T{}));
  int64_t over = kNone;
  for (int64_t j = threadIdx.x; j < V; j += kThreads)
    if (o[j] > limit) over = min(over, j);
  over = block_min(over, sh);
  if (over != kNone && threadIdx.x == 0)
    set_fault(fault, Fault::kScaledInf, 0, -1, over, r.raw(over), rp.temperature, dtype_of(T{}));
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
