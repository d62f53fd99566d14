// One logit row under the repetition penalty on the device: its values, its softmax numerators,
// the checks of FilteredRow::build in their order, and the greedy token.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#include "block_reduce.cuh"

namespace spec_edge {
namespace cuda {
namespace {

// ---- one logit row under the repetition penalty --------------------------------------------------

template <class T>
struct LogitRow {
  const T* x;
  int64_t n;
  const uint32_t* penalized;  // bitmap, or null when the penalty is off
  float penalty;
  __device__ float raw(int64_t j) const { return to_float(x[j]); }
  __device__ bool is_penalized(int64_t j) const {
    return penalized != nullptr && ((penalized[j >> 5] >> (j & 31)) & 1u) != 0;
  }
  __device__ float y(int64_t j) const {
    const float v = raw(j);
    return is_penalized(j) ? apply_penalty(v, penalty) : v;
  }
};

// The softmax numerators of a logit row: exp_nonpositive((y - ymax) * (1 / T)).
template <class T>
struct ExpRow {
  LogitRow<T> row;
  float ymax, inv_temp;
  __device__ float operator()(int64_t j) const { return exp_nonpositive((row.y(j) - ymax) * inv_temp); }
};

__device__ void set_fault(RowFault* f, Fault fault, int tensor, int64_t row, int64_t index,
                          float value, double detail = 0.0, DType dtype = DType::kFloat32) {
  *f = RowFault{fault, tensor, row, index, value, detail, dtype};
}

// The checks of FilteredRow::build on a logit row, in its order (the penalty's overflow, then
// NaN or +inf, then no finite logit), and the row's patched maximum. Returns false on a fault.
template <class T>
__device__ bool check_logits(const LogitRow<T>& r, int tensor, int64_t row, RowFault* fault,
                             float* ymax, Shared& sh) {
  float m = -kInf;
  int64_t overflow = kNone, bad = kNone;
  for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
    const float x = r.raw(j), y = r.is_penalized(j) ? apply_penalty(x, r.penalty) : x;
    if (y == kInf && x < kInf) overflow = min(overflow, j);
    if (!(x < kInf)) bad = min(bad, j);
    m = max_ignoring_nan(m, y);
  }
  overflow = block_min(overflow, sh);
  bad = block_min(bad, sh);
  m = block_max(m, sh);
  if (threadIdx.x == 0) {
    if (overflow != kNone)
      set_fault(fault, Fault::kPenaltyInf, tensor, row, overflow, r.raw(overflow), r.penalty);
    else if (bad != kNone) set_fault(fault, Fault::kBadLogit, tensor, row, bad, r.raw(bad));
    else if (m == -kInf) set_fault(fault, Fault::kNoFinite, tensor, row, -1, 0.0f);
  }
  *ymax = m;
  return overflow == kNone && bad == kNone && m != -kInf;
}

// greedy_token: the first index of the maximum of the penalized row (a NaN logit is a fault).
template <class T>
__device__ bool greedy(const LogitRow<T>& r, int tensor, int64_t row, RowFault* fault,
                       int64_t* token, Shared& sh) {
  int64_t nan_at = kNone;
  for (int64_t j = threadIdx.x; j < r.n; j += kThreads)
    if (r.raw(j) != r.raw(j)) nan_at = min(nan_at, j);
  nan_at = block_min(nan_at, sh);
  if (nan_at != kNone) {
    if (threadIdx.x == 0) set_fault(fault, Fault::kNaN, tensor, row, nan_at, NAN);
    return false;
  }
  *token = block_argmax(r.n, [&](int64_t j) { return r.y(j); }, sh);
  if (r.y(*token) == -kInf) {  // every (penalized) logit -inf: no token to emit, as at T > 0
    if (threadIdx.x == 0) set_fault(fault, Fault::kNoFinite, tensor, row, -1, 0.0f);
    return false;
  }
  return true;
}

// The bitmap of the ids a row's penalty applies to, set from prev_tokens' ids (deduplicated on the
// host); null when the penalty is off.
__device__ uint32_t* penalized_ids(const Launch& L, const RowParams& rp, uint32_t* bitmap, int64_t V) {
  if (rp.penalty == 1.0f) return nullptr;
  for (int64_t w = threadIdx.x; w < (V + 31) / 32; w += kThreads) bitmap[w] = 0u;
  __syncthreads();
  for (int64_t i = rp.prev_begin + threadIdx.x; i < rp.prev_end; i += kThreads) {
    const int64_t id = L.prev_ids[i];
    atomicOr(&bitmap[id >> 5], 1u << (id & 31));
  }
  __syncthreads();
  return bitmap;
}

__device__ void add_penalized(uint32_t* bitmap, int64_t id) {
  if (threadIdx.x == 0 && bitmap != nullptr) bitmap[id >> 5] |= 1u << (id & 31);
  __syncthreads();
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
