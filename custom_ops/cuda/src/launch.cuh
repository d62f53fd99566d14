// What one launch of the CUDA build works with: the threads per sequence, what a kernel reports
// about a row (RowFault), the per-row parameters, the device pointers of a launch and each row's
// scratch.
// Part of the one translation unit ops.cu (device functions need no relocatable code).
#pragma once

#if defined(SPEC_EDGE_CUDA_EMULATION)
#include "cuda_emulation.h"  // the kernels on the host, for machines without a GPU (tests/cpp)
#else
#include <cuda_runtime.h>
#endif

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "spec_edge/detail/kept_set.h"
#include "spec_edge/detail/sampling.h"
#include "spec_edge/numerics.h"

namespace spec_edge {
namespace cuda {
namespace {

using ll = long long;

#ifndef SPEC_EDGE_CUDA_THREADS
#define SPEC_EDGE_CUDA_THREADS 512
#endif
// Threads per sequence; no result depends on it (the emulation test runs with fewer).
constexpr int kThreads = SPEC_EDGE_CUDA_THREADS;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
constexpr int kWarps = kThreads / 32;
constexpr float kInf = __builtin_huge_valf();
constexpr int64_t kNone = INT64_MAX;

// ---- what a kernel reports about a batch row ----------------------------------------------------

enum class Fault : int32_t {
  kNone = 0,
  kNaN,          // a NaN score (verify_greedy, greedy rows)
  kBadLogit,     // a NaN or +inf logit
  kNoFinite,     // no finite logit
  kPenaltyInf,   // the repetition penalty overflows a logit to +inf
  kBadProb,      // a probability that is negative or not finite
  kBadMass,      // a probability row whose mass is not a distribution's
  kScaledInf,    // filter_logits: a logit / T overflows float or the logits' dtype
};

struct RowFault {
  Fault fault;
  int32_t tensor;  // 0: the target (or logits), 1: the draft
  int64_t row, index;
  float value;
  double detail;  // kBadMass: the row's mass; kPenaltyInf: the penalty; kScaledInf: T
  DType dtype;    // kScaledInf: the logits' (and the output's) dtype
};

// ---- per-row inputs ---------------------------------------------------------------------------

struct RowParams {
  float temperature = 1.0f, penalty = 1.0f;
  int64_t top_k = 0;
  float top_p = 1.0f, min_p = 0.0f;
  float min_p_floor = -kInf;  // kept_set.h's min_p_floor, computed on the host
  uint64_t seed = 0, offset = 0;
  int64_t n_draft = 0;
  int64_t prev_begin = 0, prev_end = 0;  // the row's penalized ids in `prev_ids`
  __host__ __device__ bool filtered() const { return top_k > 0 || top_p < 1.0f || min_p > 0.0f; }
};

// A batch of score rows of element type T on the device.
template <class T>
struct DeviceRows {
  const T* data;
  int64_t batch_stride, row_stride, vocab;
  __device__ const T* row(int64_t b, int64_t i) const { return data + b * batch_stride + i * row_stride; }
};

// Device pointers of one launch; the per-row scratch lives in `scratch`, `scratch_stride` bytes
// per batch row (see Scratch).
struct Launch {
  const RowParams* params;
  const int64_t* tokens;  // [B, K]
  int64_t K;
  const double* uniforms;  // [B, K+1] (accept)
  const int64_t* prev_ids;
  char* scratch;
  int64_t scratch_stride;
  bool filtered;  // some row has top-k: the scratch holds kept sets
  RowFault* faults;  // [B]
};


// The kept set of a row under top-k (then top-p, min-p): ids ascending, their penalized logits,
// numerators and keys, and in `head` their count and mass.
struct KeptHead {
  int64_t n;
  double mass;
};
struct KeptRow {
  int32_t* id;
  float *y, *num;
  uint32_t* key;
  KeptHead* head;
};

// Per-row scratch: three arrays of block sums, the envelope (block maxima, bounds, weights, run
// totals), the penalty's bitmap of ids and, for rows with filters, the target's and the draft's
// kept sets and the radix select's scratch.
struct Scratch {
  float *sums_p, *sums_q, *sums_r, *block_max, *block_c;
  double *weight, *run, *super_total;
  uint32_t* penalized;
  KeptRow kept[2];
  uint32_t* key_tmp;
  double* weight_tmp;

  // Lays the arrays out from `base` (null: sizes them only); returns the bytes they take.
  __host__ __device__ int64_t place(char* base, int64_t V, bool filtered) {
    const int64_t nb = (V + kBlock - 1) / kBlock, ns = (nb + kEnvelopeRun - 1) / kEnvelopeRun;
    int64_t at = 0;
    const auto take = [&](auto*& p, int64_t count) {
      using P = decltype(p);
      p = base != nullptr ? reinterpret_cast<std::remove_reference_t<P>>(base + at) : nullptr;
      at += (count * static_cast<int64_t>(sizeof(*p)) + 15) / 16 * 16;
    };
    take(sums_p, nb);
    take(sums_q, nb);
    take(sums_r, nb);
    take(block_max, nb);
    take(block_c, nb);
    take(weight, nb);
    take(run, ns);
    take(super_total, ns + 1);
    take(penalized, (V + 31) / 32);
    if (filtered) {
      for (KeptRow& k : kept) {
        take(k.id, V);
        take(k.y, V);
        take(k.num, V);
        take(k.key, V);
        take(k.head, 1);
      }
      take(key_tmp, V);
      take(weight_tmp, V);
    }
    return at;
  }
};

__device__ Scratch scratch_of(const Launch& L, int64_t b, int64_t V) {
  Scratch s;
  s.place(L.scratch + b * L.scratch_stride, V, L.filtered);
  return s;
}

}  // namespace
}  // namespace cuda
}  // namespace spec_edge
