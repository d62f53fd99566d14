// The CUDA build of the ops: one thread block per sequence, the rows read by all its threads,
// every order-sensitive sum in the order of the scalar reference (docs/OPS.md, "Numerics").
//
//  - A row mass: each warp folds 64-value blocks (lanes j and j + 32 added, then shuffles at
//    distance 16, 8, 4, 2, 1: the halving fold of numerics.h), block sums go to the workspace,
//    and one thread adds them left to right in double.
//  - An inverse CDF: one thread walks those block sums, then the 64 values of the crossing block.
//  - Maxima and first indices: order-free reductions (max ignores NaN; ties to the lowest index).
//  - The seeded draw: the envelope of block maxima, its weights and running totals as in
//    filters.cpp, and the proposals on one thread.
//  - Top-k: a radix select of the k-th largest key over the row, the kept tokens compacted in
//    index order, then the core's scalar steps (kept_set.h) on one thread.
//  - Top-p and min-p without top-k: the core's candidates (its guess from a strided sample, sorted
//    here by a bitonic sort), compacted in index order, then the same scalar steps.
// Nothing here is compiled with FMA contraction (--fmad=false), so each float operation is the one
// the definition names.
#if defined(SPEC_EDGE_CUDA_EMULATION)
#include "cuda_emulation.h"  // tests/cpp: the kernels on the host, for machines without a GPU
#else
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cfloat>
#include <type_traits>
#include <cmath>
#include <cstring>
#include <vector>

#include "block_reduce.h"
#include "filters.h"
#include "kept_set.h"
#include "spec_edge/cuda_ops.h"
#include "spec_edge/numerics.h"
#include "spec_edge/philox.h"
#include "validate.h"

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
constexpr int kMaxProposals = FilteredRow::kMaxProposals;
constexpr int64_t kSuperBlock = 32;  // the envelope's runs of blocks (filters.h)

// ---- what a kernel reports about a batch row ----------------------------------------------------

enum class Fault : int32_t {
  kNone = 0,
  kNaN,          // a NaN score (verify_greedy, greedy rows)
  kBadLogit,     // a NaN or +inf logit
  kNoFinite,     // no finite logit
  kPenaltyInf,   // the repetition penalty overflows a logit to +inf
  kBadProb,      // a probability that is negative or not finite
  kBadMass,      // a probability row whose mass is not a distribution's
  kScaledInf,    // filter_logits: a logit / T overflows float
};

struct RowFault {
  Fault fault;
  int32_t tensor;  // 0: the target (or logits), 1: the draft
  int64_t row, index;
  float value;
  double detail;  // kBadMass: the row's mass; kPenaltyInf: the penalty; kScaledInf: T
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
    const int64_t nb = (V + kBlock - 1) / kBlock, ns = (nb + kSuperBlock - 1) / kSuperBlock;
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

// ---- block-wide reductions (every thread of the block calls them) -------------------------------

struct Shared {
  float f[kWarps];
  int64_t i[kWarps];
  int count[kWarps];
  unsigned hist[256];
  float sample[kTopPGuessSample], sample_exp[kTopPGuessSample];  // top-p's guess
  uint32_t prefix;
  int64_t above;
  double d;
  int64_t token;
  int flag;
};

__device__ inline float max_ignoring_nan(float m, float v) { return v > m ? v : m; }

__device__ float block_max(float v, Shared& sh) {
  for (int o = 16; o > 0; o /= 2) v = max_ignoring_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.f[warp] = v;
  __syncthreads();
  float r = -kInf;
  for (int w = 0; w < kWarps; ++w) r = max_ignoring_nan(r, sh.f[w]);
  __syncthreads();
  return r;
}

__device__ int64_t block_min(int64_t v, Shared& sh) {
  for (int o = 16; o > 0; o /= 2) v = min(v, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, v, o)));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.i[warp] = v;
  __syncthreads();
  int64_t r = kNone;
  for (int w = 0; w < kWarps; ++w) r = min(r, sh.i[w]);
  __syncthreads();
  return r;
}

// The first index of the maximum (NaN ignored), kNone for a row without a non-NaN value.
template <class Value>
__device__ int64_t block_argmax(int64_t n, const Value& value, Shared& sh) {
  float best = -kInf;
  int64_t at = kNone;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = value(j);
    if (v > best || (v == best && at == kNone)) {  // strided: the first hit is this thread's lowest
      best = v;
      at = j;
    }
  }
  const float m = block_max(best, sh);
  return block_min(best == m ? at : kNone, sh);
}

// Block sums of `fill` over [0, n) (halving fold per 64 values) into `sums`, and their total
// added left to right in double.
template <class Fill>
__device__ double block_mass(int64_t n, const Fill& fill, float* sums, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t blk = warp; blk < blocks; blk += kWarps) {
    const int64_t j = blk * kBlock + lane;
    float s = (j < n ? fill(j) : 0.0f) + (j + 32 < n ? fill(j + 32) : 0.0f);
    for (int h = 16; h >= 1; h /= 2) s = s + __shfl_down_sync(0xffffffffu, s, h);
    if (lane == 0) sums[blk] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int64_t blk = 0; blk < blocks; ++blk) total += static_cast<double>(sums[blk]);
    sh.d = total;
  }
  __syncthreads();
  const double total = sh.d;
  __syncthreads();
  return total;
}

// Inverse CDF over the block sums of block_mass, on one thread: the core's block_scan.
template <class Value>
__device__ int64_t inverse_cdf(int64_t n, const Value& value, const float* sums, double target) {
  using Block = float[kBlock];
  const auto fill = [&](int64_t base, int64_t m, Block& block) {
    for (int64_t j = 0; j < kBlock; ++j) block[j] = j < m ? value(base + j) : 0.0f;
  };
  const auto fold = [](const Block& block) { return fold_block(block); };
  return spec_edge::block_scan<Block>(n, fill, fold, target, sums);
}

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
                          float value, double detail = 0.0) {
  *f = RowFault{fault, tensor, row, index, value, detail};
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

// The uniforms of a draw: `first`, then draws next, next + 1, ... of the row's stream.
struct DrawStream {
  uint64_t seed, offset;
  uint32_t row;
  double first;
  uint64_t next;
  bool used_first;
  __device__ double operator()() {
    if (!used_first) {
      used_first = true;
      return first;
    }
    return philox_uniform(seed, offset, row, next++);
  }
};

// The seeded draw from a softmax row (docs/OPS.md; FilteredRow::sample): rejection from the
// envelope of block maxima. Checks the row first; false on a fault.
template <class T>
__device__ bool envelope_draw(const LogitRow<T>& r, float inv_temp, DrawStream uniforms,
                              const Scratch& s, int64_t row, RowFault* fault, int64_t* token,
                              Shared& sh) {
  const int64_t n = r.n, blocks = (n + kBlock - 1) / kBlock;
  const int64_t supers = (blocks + kSuperBlock - 1) / kSuperBlock;
  float ymax;
  if (!check_logits(r, 0, row, fault, &ymax, sh)) return false;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t blk = warp; blk < blocks; blk += kWarps) {
    const int64_t j = blk * kBlock + lane;
    float m = j < n ? r.y(j) : -kInf;
    if (j + 32 < n) m = max_ignoring_nan(m, r.y(j + 32));
    for (int o = 16; o > 0; o /= 2) m = max_ignoring_nan(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) s.block_max[blk] = m;
  }
  __syncthreads();
  int64_t top = kNone;
  for (int64_t blk = threadIdx.x; blk < blocks; blk += kThreads)
    if (s.block_max[blk] == ymax) top = min(top, blk);
  top = block_min(top, sh);
  const ExpRow<T> e{r, ymax, inv_temp};
  const float a = inv_temp * kBoundScale;
  for (int64_t blk = threadIdx.x; blk < blocks; blk += kThreads) {
    const float c = exp_upper_bound(s.block_max[blk] - ymax, a);
    s.block_c[blk] = c;
    const int64_t count = blk == blocks - 1 ? n - blk * kBlock : kBlock;
    s.weight[blk] = static_cast<double>(count) * static_cast<double>(c);
  }
  __syncthreads();
  const int64_t top_base = top * kBlock, top_n = min(kBlock, n - top_base);
  if (threadIdx.x == 0) {
    double top_mass = 0.0;
    for (int64_t j = 0; j < top_n; ++j) top_mass += static_cast<double>(e(top_base + j));
    s.weight[top] = top_mass;
  }
  __syncthreads();
  for (int64_t sb = threadIdx.x; sb < supers; sb += kThreads) {
    double run = 0.0;
    for (int64_t blk = sb * kSuperBlock; blk < min(blocks, (sb + 1) * kSuperBlock); ++blk) run += s.weight[blk];
    s.run[sb] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    s.super_total[0] = 0.0;
    for (int64_t sb = 0; sb < supers; ++sb) s.super_total[sb + 1] = s.super_total[sb] + s.run[sb];
    sh.token = -1;
    for (int p = 0; p < kMaxProposals && sh.token < 0; ++p) {
      const double u = uniforms(), v = uniforms();
      const double target = u * s.super_total[supers];
      // envelope_block: binary search over the run totals, then a walk of one run.
      int64_t lo = 0, hi = supers - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (s.super_total[mid + 1] > target) hi = mid;
        else lo = mid + 1;
      }
      const int64_t end = min(blocks, (lo + 1) * kSuperBlock);
      double run = 0.0;
      int64_t b = lo * kSuperBlock;
      for (; b < end - 1; ++b) {
        const double next = run + s.weight[b];
        if (s.super_total[lo] + next > target) break;
        run = next;
      }
      const double offset = target - (s.super_total[lo] + run);
      const int64_t base = b * kBlock, m = min(kBlock, n - base);
      if (b == top) {
        double cum = 0.0;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          const float num = e(base + j);
          if (!(num > 0.0f)) continue;
          cum += static_cast<double>(num);
          last = base + j;
          if (cum > offset) break;
        }
        sh.token = last;
        break;
      }
      const float c = s.block_c[b];
      const double slot = fmin(fmax(0.0, offset / static_cast<double>(c)), static_cast<double>(m - 1));
      const int64_t j = base + static_cast<int64_t>(slot);
      if (v * static_cast<double>(c) < static_cast<double>(e(j))) sh.token = j;
    }
    sh.flag = sh.token < 0;
    sh.d = sh.flag ? uniforms() : 0.0;  // the fallback's uniform
  }
  __syncthreads();
  const bool fallback = sh.flag != 0;
  const double u_fallback = sh.d;
  __syncthreads();
  if (fallback) {  // the exact inverse CDF after kMaxProposals rejections
    const double P = block_mass(n, e, s.sums_p, sh);
    if (threadIdx.x == 0) sh.token = inverse_cdf(n, e, s.sums_p, u_fallback * P);
    __syncthreads();
  }
  *token = sh.token;
  __syncthreads();
  return true;
}

// ---- rows with top-k (then top-p, min-p): an explicit kept set (FilteredRow::candidates_top_k) -----

template <class T>
__device__ uint32_t scaled_key(const LogitRow<T>& r, int64_t j, float temperature) {
  return order_key(r.y(j) / temperature);
}

// The k-th largest key of the row, every token counted: select_by_weight with unit weights (the
// counts are exact either way), one 8-bit digit per pass over the row, a shared histogram.
template <class T>
__device__ uint32_t kth_largest_key(const LogitRow<T>& r, float temperature, int64_t k, Shared& sh) {
  uint32_t prefix = 0;
  int64_t above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += kThreads) sh.hist[d] = 0u;
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int64_t j = threadIdx.x; j < r.n; j += kThreads) {
      const uint32_t key = scaled_key(r, j, temperature);
      if ((key & high) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (above + sh.hist[d] >= k) break;
        above += sh.hist[d];
      }
      sh.prefix = prefix | static_cast<uint32_t>(d) << shift;
      sh.above = above;
    }
    __syncthreads();
    prefix = sh.prefix;
    above = sh.above;
    __syncthreads();
  }
  return prefix;
}

// Calls out(slot, j) for the j < n where keep(j) holds, slots in index order; returns the count.
template <class Keep, class Out>
__device__ int64_t compact(int64_t n, const Keep& keep, const Out& out, Shared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t total = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t j = base + threadIdx.x;
    const bool kept = j < n && keep(j);
    const unsigned ballot = __ballot_sync(0xffffffffu, kept);
    if (lane == 0) sh.count[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = total, tile = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? sh.count[w] : 0;
      tile += sh.count[w];
    }
    if (kept) out(before + __popc(ballot & ((1u << lane) - 1u)), j);
    total += tile;
    __syncthreads();
  }
  return total;
}

// The candidates of a logit row, the tokens j where keep(j) holds, in index order: their ids,
// penalized logits, numerators and keys. Returns the count.
template <class T, class Keep>
__device__ int64_t collect_candidates(const LogitRow<T>& r, float ymax, float temp, const Keep& keep,
                                      const KeptRow& kr, Shared& sh) {
  const float inv_temp = 1.0f / temp;
  const int64_t n = compact(
      r.n, keep,
      [&](int64_t slot, int64_t j) {
        kr.id[slot] = static_cast<int32_t>(j);
        kr.y[slot] = r.y(j);
      },
      sh);
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    kr.num[i] = exp_nonpositive((kr.y[i] - ymax) * inv_temp);
    kr.key[i] = order_key(kr.y[i] / temp);
  }
  __syncthreads();
  return n;
}

// FilteredRow::top_p_guess: the strided sample of the unpatched row, sorted descending by a
// bitonic sort in shared memory (ties are equal floats: any order is the core's), then
// kept_set.h's walk on one thread.
template <class T>
__device__ float top_p_guess(const LogitRow<T>& r, float ymax, float inv_temp, float top_p, Shared& sh) {
  const int64_t V = r.n, S = guess_sample_size(V, kTopPGuessSample);
  int64_t P = 1;
  while (P < S) P *= 2;
  for (int64_t i = threadIdx.x; i < P; i += kThreads) {
    const float d = i < S ? (r.raw(i * V / S) - ymax) * inv_temp : -kInf;
    sh.sample[i] = d < 0.0f ? d : 0.0f;  // std::min(0.0f, d)
  }
  for (int64_t size = 2; size <= P; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      __syncthreads();
      for (int64_t i = threadIdx.x; i < P; i += kThreads) {
        const int64_t j = i ^ stride;
        const float a = sh.sample[i], b = sh.sample[j];
        if (j > i && ((i & size) == 0 ? a < b : a > b)) {
          sh.sample[i] = b;
          sh.sample[j] = a;
        }
      }
    }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < S; i += kThreads) sh.sample_exp[i] = exp_nonpositive((sh.sample[i] - 0.0f) * 1.0f);
  __syncthreads();
  if (threadIdx.x == 0) sh.d = spec_edge::top_p_guess(sh.sample, sh.sample_exp, S, top_p);
  __syncthreads();
  const float guess = static_cast<float>(sh.d);
  __syncthreads();
  return guess;
}

// FilteredRow::candidates_by_mass: the candidates above the guess, or, when they do not carry the
// top-p mass, every token that can pass min-p. Returns the count; *Z: the row's mass (top-p).
template <class T>
__device__ int64_t candidates_by_mass(const LogitRow<T>& r, float ymax, const RowParams& rp, const KeptRow& kr,
                                      const Scratch& s, double* Z, Shared& sh) {
  const float temp = rp.temperature, inv_temp = 1.0f / temp;
  const bool top_p = rp.top_p < 1.0f;
  *Z = top_p ? block_mass(r.n, ExpRow<T>{r, ymax, inv_temp}, s.sums_p, sh) : 0.0;
  const float guesses[2] = {top_p ? top_p_guess(r, ymax, inv_temp, rp.top_p, sh) : -kInf, -kInf};
  int64_t n = 0;
  for (const float guess : guesses) {
    const float threshold = guess < rp.min_p_floor ? rp.min_p_floor : guess;  // std::max
    n = collect_candidates(
        r, ymax, temp, [&](int64_t j) { return (r.y(j) - ymax) * inv_temp >= threshold; }, kr, sh);
    if (threadIdx.x == 0)
      sh.flag = !top_p || candidate_mass(kr.num, n) >= static_cast<double>(rp.top_p) * *Z ||
                threshold <= rp.min_p_floor;
    __syncthreads();
    const bool done = sh.flag != 0;
    __syncthreads();
    if (done) break;
  }
  return n;
}

// The kept set of a logit row (FilteredRow::build with filters): the candidates (under top-k, the
// exact top-k set; else candidates_by_mass), then top-p and min-p over them (FilteredRow::finish),
// with the row's checks first; false on a fault.
template <class T>
__device__ bool build_kept(const LogitRow<T>& r, const RowParams& rp, const KeptRow& kr, const Scratch& s,
                           int tensor, int64_t row, RowFault* fault, Shared& sh) {
  float ymax;
  if (!check_logits(r, tensor, row, fault, &ymax, sh)) return false;
  int64_t n;
  double Z = 0.0;  // what top-p normalizes by: the top-k set's mass, or the row's
  if (rp.top_k > 0) {
    const float temp = rp.temperature;
    const uint32_t kth = kth_largest_key(r, temp, rp.top_k, sh);
    n = collect_candidates(r, ymax, temp, [&](int64_t j) { return scaled_key(r, j, temp) >= kth; }, kr, sh);
  } else {
    n = candidates_by_mass(r, ymax, rp, kr, s, &Z, sh);
  }
  if (threadIdx.x == 0) {
    if (rp.top_k > 0) Z = candidate_mass(kr.num, n);
    const uint32_t lowest = lowest_kept_key(kr.key, kr.num, n, rp.top_p, rp.min_p, Z, s.key_tmp, s.weight_tmp);
    int64_t w = 0;
    for (int64_t i = 0; i < n; ++i)
      if (kr.key[i] >= lowest) {
        kr.id[w] = kr.id[i];
        kr.y[w] = kr.y[i];
        kr.num[w] = kr.num[i];
        kr.key[w] = kr.key[i];
        ++w;
      }
    kr.head->n = w;
    kr.head->mass = candidate_mass(kr.num, w);
  }
  __syncthreads();
  return true;
}

// The numerator of token t in a kept set (0 outside it).
__device__ float kept_numerator(const KeptRow& kr, int64_t t) {
  int64_t lo = 0, hi = kr.head->n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (kr.id[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo < kr.head->n && kr.id[lo] == t ? kr.num[lo] : 0.0f;
}

// FilteredRow::draw on a kept set (one thread).
__device__ int64_t kept_draw(const KeptRow& kr, double target) {
  double cum = 0.0;
  int64_t last = -1;
  for (int64_t i = 0; i < kr.head->n; ++i) {
    if (!(kr.num[i] > 0.0f)) continue;
    cum += kr.num[i];
    last = kr.id[i];
    if (cum > target) return last;
  }
  return last;
}

// FilteredRow::residual_walk: max(0, num_p * a - num_q * b) over p's kept tokens, ascending, in
// double; with `token`, the first running sum above `target` (or the last positive term).
__device__ double kept_residual(const KeptRow& p, const KeptRow& q, float a, float b, double target,
                                int64_t* token) {
  double cum = 0.0;
  int64_t qi = 0;
  const int64_t np = p.head->n, nq = q.head->n;
  for (int64_t i = 0; i < np; ++i) {
    const int64_t id = p.id[i];
    while (qi < nq && q.id[qi] < id) ++qi;
    const float num_q = qi < nq && q.id[qi] == id ? q.num[qi] : 0.0f;
    const float d = p.num[i] * a - num_q * b;
    if (!(d > 0.0f)) continue;
    cum += d;
    if (token != nullptr) {
      *token = id;
      if (cum > target) break;
    }
  }
  return cum;
}

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
  const int64_t b = blockIdx.x, V = logits.vocab;
  const SamplingRow<T> row(logits, L);
  const RowParams& rp = row.params;
  const Scratch& s = row.scratch;
  RowFault* fault = row.fault;
  const LogitRow<T>& r = row.logits;
  int64_t token = -1;
  const uint32_t stream = static_cast<uint32_t>(b);
  const double u0 = philox_uniform(rp.seed, rp.offset, stream, 0);
  if (rp.temperature == 0.0f) {
    if (!greedy(r, 0, -1, fault, &token, sh)) return;
  } else if (rp.filtered()) {
    if (!build_kept(r, rp, s.kept[0], s, 0, -1, fault, sh)) return;
    if (threadIdx.x == 0) token = kept_draw(s.kept[0], u0 * s.kept[0].head->mass);
  } else {
    const DrawStream uniforms{rp.seed, rp.offset, stream, u0, 1, false};
    if (!envelope_draw(r, 1.0f / rp.temperature, uniforms, s, -1, fault, &token, sh)) return;
  }
  if (threadIdx.x == 0) tokens[b] = token;
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
  // The core's check: a finite logit whose y / T overflows, the first such index.
  __syncthreads();
  int64_t over = kNone;
  for (int64_t j = threadIdx.x; j < V; j += kThreads)
    if (o[j] == kInf) over = min(over, j);
  over = block_min(over, sh);
  if (over != kNone && threadIdx.x == 0)
    set_fault(fault, Fault::kScaledInf, 0, -1, over, r.raw(over), rp.temperature);
}

// ---- host side ----------------------------------------------------------------------------------

Status device_error(cudaError_t e, const char* what) {
  return Status::error(Code::kDeviceError, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}
#define SPEC_EDGE_CUDA_RETURN(expr, what)          \
  do {                                             \
    const cudaError_t _e = (expr);                 \
    if (_e != cudaSuccess) return device_error(_e, what); \
  } while (0)

// The host inputs of one launch, packed into one upload: per-row parameters, tokens [B, K],
// uniforms [B, K+1] and the penalized ids, then room for the faults and the per-row scratch.
struct Upload {
  std::vector<RowParams> params;
  std::vector<int64_t> tokens, prev_ids;
  std::vector<double> uniforms;
};

size_t align16(size_t n) { return (n + 15) / 16 * 16; }
template <class V>
size_t bytes_of(const std::vector<V>& v) { return align16(v.size() * sizeof(V)); }

class Workspace {
 public:
  explicit Workspace(cudaStream_t stream) : stream_(stream) {}
  ~Workspace() {
    if (base_ != nullptr) cudaFreeAsync(base_, stream_);
  }
  // Allocates, uploads `up` and fills `L`'s pointers.
  Status prepare(const Upload& up, int64_t B, int64_t K, int64_t V, bool scratch, Launch* L) {
    const size_t head = bytes_of(up.params) + bytes_of(up.tokens) + bytes_of(up.uniforms) + bytes_of(up.prev_ids);
    const size_t faults = align16(B * sizeof(RowFault));
    const bool filtered = std::any_of(up.params.begin(), up.params.end(), [](const RowParams& p) { return p.filtered(); });
    const int64_t stride = scratch ? Scratch().place(nullptr, V, filtered) : 0;
    const size_t total = head + faults + static_cast<size_t>(stride) * static_cast<size_t>(B);
    SPEC_EDGE_CUDA_RETURN(cudaMallocAsync(&base_, std::max<size_t>(total, 16), stream_), "cudaMallocAsync");
    host_.assign(head, 0);
    size_t at = 0;
    const auto put = [&](const auto& v) {
      const size_t n = v.size() * sizeof(v[0]);
      if (n > 0) std::memcpy(host_.data() + at, v.data(), n);
      char* device = base_ + at;
      at += bytes_of(v);
      return device;
    };
    L->params = reinterpret_cast<const RowParams*>(put(up.params));
    L->tokens = reinterpret_cast<const int64_t*>(put(up.tokens));
    L->uniforms = reinterpret_cast<const double*>(put(up.uniforms));
    L->prev_ids = reinterpret_cast<const int64_t*>(put(up.prev_ids));
    L->K = K;
    L->faults = reinterpret_cast<RowFault*>(base_ + head);
    L->scratch = base_ + head + faults;
    L->scratch_stride = stride;
    L->filtered = filtered;
    faults_ = L->faults;
    B_ = B;
    if (head > 0)
      SPEC_EDGE_CUDA_RETURN(cudaMemcpyAsync(base_, host_.data(), head, cudaMemcpyHostToDevice, stream_),
                            "cudaMemcpyAsync (inputs)");
    SPEC_EDGE_CUDA_RETURN(cudaMemsetAsync(L->faults, 0, faults, stream_), "cudaMemsetAsync (faults)");
    return Status::ok();
  }
  // Waits for the kernel and returns the first row fault in batch order (kNone if none).
  Status faults(std::vector<RowFault>* out) {
    SPEC_EDGE_CUDA_RETURN(cudaGetLastError(), "the kernel launch");
    out->resize(B_);
    if (B_ > 0)
      SPEC_EDGE_CUDA_RETURN(cudaMemcpyAsync(out->data(), faults_, B_ * sizeof(RowFault),
                                            cudaMemcpyDeviceToHost, stream_),
                            "cudaMemcpyAsync (faults)");
    SPEC_EDGE_CUDA_RETURN(cudaStreamSynchronize(stream_), "the kernel");
    return Status::ok();
  }

 private:
  cudaStream_t stream_;
  char* base_ = nullptr;
  std::vector<char> host_;
  RowFault* faults_ = nullptr;
  int64_t B_ = 0;
};

// The core's message for a row fault; names[0] / names[1]: the target's and the draft's tensor.
Status fault_status(const RowFault& f, int64_t b, const char* const names[2], bool batched_rows) {
  const RowName where{names[f.tensor], b, batched_rows ? f.row : -1};
  const std::string at = where.prefix();
  switch (f.fault) {
    case Fault::kNaN:
      return Status::error(Code::kInvalidArgument, "%s, %lld] is NaN", at.c_str(), (ll)f.index);
    case Fault::kBadLogit:
      return Status::error(Code::kInvalidArgument, "%s, %lld] = %g: logits must not be NaN or +inf",
                           at.c_str(), (ll)f.index, (double)f.value);
    case Fault::kNoFinite:
      return Status::error(Code::kInvalidArgument, "%s] has no finite logit (every token is masked)",
                           at.c_str());
    case Fault::kPenaltyInf:
      return Status::error(Code::kInvalidArgument, "%s, %lld] = %g: the repetition penalty %g makes it +inf",
                           at.c_str(), (ll)f.index, (double)f.value, f.detail);
    case Fault::kBadProb:
      return Status::error(Code::kInvalidArgument,
                           "%s, %lld] = %g: probabilities must be finite and >= 0", at.c_str(),
                           (ll)f.index, (double)f.value);
    case Fault::kBadMass:
      return Status::error(Code::kInvalidArgument,
                           "%s] has mass %g: a probability row needs a finite sum >= %g (an "
                           "all-zero row is not a distribution)",
                           at.c_str(), f.detail, (double)FLT_MIN);
    case Fault::kScaledInf:
      return Status::error(Code::kInvalidArgument,
                           "%s, %lld] = %g: divided by the temperature %g it overflows float "
                           "(filter_logits cannot return it; sample and verify take the row)",
                           at.c_str(), (ll)f.index, (double)f.value, f.detail);
    case Fault::kNone: break;
  }
  return Status::ok();
}

Status first_fault(Workspace& ws, const char* const names[2], bool batched_rows) {
  std::vector<RowFault> faults;
  SPEC_EDGE_RETURN_IF_ERROR(ws.faults(&faults));
  for (size_t b = 0; b < faults.size(); ++b)
    if (faults[b].fault != Fault::kNone) return fault_status(faults[b], static_cast<int64_t>(b), names, batched_rows);
  return Status::ok();
}

// kernel<<<blocks, kThreads, 0, stream>>>(args...)
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), int64_t blocks, void* stream, Args... args) {
#if defined(SPEC_EDGE_CUDA_EMULATION)
  (void)stream;
  emulation::launch(kernel, blocks, kThreads, static_cast<Params>(args)...);
#else
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<Params>(args)...);
#endif
}

template <class T>
DeviceRows<T> device_rows(const Rows& r) {
  return DeviceRows<T>{static_cast<const T*>(r.data), r.batch_stride, r.row_stride, r.vocab};
}

// Calls f(DeviceRows<T>...) with the element type of `dtype`.
template <class F>
void with_dtype(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kFloat16: f(Half{}); break;
    case DType::kBFloat16: f(BFloat16{}); break;
    default: f(0.0f); break;
  }
}

std::vector<int64_t> packed_tokens(const Tokens& t, int64_t B, int64_t K, const int64_t* lengths) {
  std::vector<int64_t> out(static_cast<size_t>(B * K), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < (lengths ? lengths[b] : K); ++i) out[b * K + i] = t.at(b, i);
  return out;
}

Status check_vocab(const Rows& r) {
  if (r.vocab > (int64_t{1} << 31))
    return Status::error(Code::kInvalidArgument,
                         "V=%lld: the CUDA build takes vocabularies up to 2^31", (ll)r.vocab);
  return Status::ok();
}

// Per-row parameters and the penalized ids (PenalizedIds: sorted, deduplicated) of a batch.
void sampling_rows(PerRow<float> temperature, PerRow<int64_t> seed, PerRow<int64_t> offset,
                   const Filters& f, int64_t B, int64_t V, Upload* up) {
  up->params.resize(B);
  PenalizedIds ids;
  for (int64_t b = 0; b < B; ++b) {
    RowParams& p = up->params[b];
    const RowSampling rs = row_sampling(temperature, f, b, V);
    p.temperature = rs.temperature;
    p.penalty = rs.penalty;
    p.top_k = rs.top_k;
    p.top_p = rs.top_p;
    p.min_p = rs.min_p;
    p.min_p_floor = min_p_floor(rs.min_p);
    p.seed = static_cast<uint64_t>(seed.at(b));
    p.offset = static_cast<uint64_t>(offset.at(b));
    ids.reset(f, b, rs.penalty != 1.0f);
    p.prev_begin = static_cast<int64_t>(up->prev_ids.size());
    up->prev_ids.insert(up->prev_ids.end(), ids.ids().begin(), ids.ids().end());
    p.prev_end = static_cast<int64_t>(up->prev_ids.size());
  }
}

}  // namespace

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Status verify_greedy(const Rows& target, const Tokens& draft_tokens, VerifyResult out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify_greedy(target, draft_tokens));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  up.tokens = packed_tokens(draft_tokens, B, K, nullptr);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, false, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(verify_greedy_kernel<T>, B, stream, device_rows<T>(target), L, out.n_accepted, out.next_token);
  });
  const char* const names[2] = {"target_probs", "target_probs"};
  return first_fault(ws, names, true);
}

Status accept(const Rows& target, const Rows* draft, const Tokens& draft_tokens,
              const Uniforms& uniforms, VerifyResult out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_accept(target, draft, draft_tokens, uniforms));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  up.tokens = packed_tokens(draft_tokens, B, K, nullptr);
  up.uniforms.resize(B * (K + 1));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i <= K; ++i) up.uniforms[b * (K + 1) + i] = uniforms.at(b, i);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, true, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    const DeviceRows<T> q = draft != nullptr ? device_rows<T>(*draft) : device_rows<T>(target);
    launch(accept_kernel<T>, B, stream, device_rows<T>(target), q, draft != nullptr, L, out.n_accepted,
           out.next_token);
  });
  const char* const names[2] = {"target_probs", "draft_probs"};
  return first_fault(ws, names, true);
}

Status verify(const Rows& target, const Rows& draft, const Tokens& draft_tokens,
              const VerifyParams& params, VerifyOutput out, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_verify(target, draft, draft_tokens, params));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(target));
  const int64_t B = target.batch, K = target.rows - 1;
  if (B == 0) return Status::ok();
  Upload up;
  sampling_rows(params.temperature, params.seed, params.offset, params.filters, B, target.vocab, &up);
  for (int64_t b = 0; b < B; ++b) up.params[b].n_draft = params.num_draft ? params.num_draft[b] : K;
  std::vector<int64_t> lengths(B);
  for (int64_t b = 0; b < B; ++b) lengths[b] = up.params[b].n_draft;
  up.tokens = packed_tokens(draft_tokens, B, K, lengths.data());
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, K, target.vocab, true, &L));
  with_dtype(target.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(verify_kernel<T>, B, stream, device_rows<T>(target), device_rows<T>(draft), L, out.accept_len,
           out.tokens, out.tokens_stride);
  });
  const char* const names[2] = {"target_logits", "draft_logits"};
  return first_fault(ws, names, true);
}

Status filter_logits(const Rows& logits, PerRow<float> temperature, const Filters& filters, float* out,
                     int64_t out_stride, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, temperature, 1, 1, filters));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(logits));
  const int64_t B = logits.batch;
  if (B == 0) return Status::ok();
  Upload up;
  const int64_t zero = 0;
  sampling_rows(temperature, {&zero, 1}, {&zero, 1}, filters, B, logits.vocab, &up);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, 0, logits.vocab, true, &L));
  with_dtype(logits.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(filter_kernel<T>, B, stream, device_rows<T>(logits), L, out, out_stride);
  });
  const char* const names[2] = {"logits", "logits"};
  return first_fault(ws, names, false);
}

Status sample(const Rows& logits, const SampleParams& params, int64_t* tokens, void* stream) {
  SPEC_EDGE_RETURN_IF_ERROR(validate_sampling_rows(logits, params.temperature, params.seed.count,
                                                   params.offset.count, params.filters));
  SPEC_EDGE_RETURN_IF_ERROR(check_vocab(logits));
  const int64_t B = logits.batch;
  if (B == 0) return Status::ok();
  Upload up;
  sampling_rows(params.temperature, params.seed, params.offset, params.filters, B, logits.vocab, &up);
  Workspace ws(static_cast<cudaStream_t>(stream));
  Launch L{};
  SPEC_EDGE_RETURN_IF_ERROR(ws.prepare(up, B, 0, logits.vocab, true, &L));
  with_dtype(logits.dtype, [&](auto elem) {
    using T = decltype(elem);
    launch(sample_kernel<T>, B, stream, device_rows<T>(logits), L, tokens);
  });
  const char* const names[2] = {"logits", "logits"};
  return first_fault(ws, names, false);
}

}  // namespace cuda
}  // namespace spec_edge
