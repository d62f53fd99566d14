// Scalar reference of the row passes: the definition every other path is tested against.
// Written as plain loops over blocks that compilers can vectorize without changing a bit
// (-ffp-contract=off, no fast-math: every operation is the IEEE one the definition names).
#include <algorithm>
#include <limits>

#include "spec_edge/detail/block_reduce.h"
#include "spec_edge/detail/row_kernels.h"

namespace spec_edge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

template <class T>
struct Reference {
  using Elem = T;
  using Block = float[kBlock];
  static const T* row(const void* x) { return static_cast<const T*>(x); }
  static float sum(const Block& s) { return fold_block(s); }
  static void pad(float* s, int64_t m) {
    for (int64_t j = m; j < kBlock; ++j) s[j] = 0.0f;
  }

  static float load(const void* x, int64_t j) { return to_float(row(x)[j]); }

  // The maximum (NaN ignored) and whether a NaN or +inf was seen, in kLanes independent lanes
  // (a layout compilers vectorize).
  static constexpr int kLanes = 16;
  static MaxScan max_scan(const T* x, int64_t n) {
    alignas(64) float m[kLanes];
    alignas(64) int nan[kLanes], inf[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      m[l] = -kInf;
      nan[l] = inf[l] = 0;
    }
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float v = to_float(x[j + l]);
        m[l] = v > m[l] ? v : m[l];
        nan[l] |= v != v;
        inf[l] |= v == kInf;
      }
    for (; j < n; ++j) {
      const float v = to_float(x[j]);
      m[0] = v > m[0] ? v : m[0];
      nan[0] |= v != v;
      inf[0] |= v == kInf;
    }
    MaxScan r{-kInf, false, false};
    for (int l = 0; l < kLanes; ++l) {
      r.max = m[l] > r.max ? m[l] : r.max;
      r.nan |= nan[l] != 0;
      r.pos_inf |= inf[l] != 0;
    }
    return r;
  }

  // First index holding `value` (0 if none: a row of -inf with NaN has no match).
  static int64_t first_index_of(const T* x, int64_t n, float value) {
    for (int64_t j = 0; j < n; ++j)
      if (to_float(x[j]) == value) return j;
    return 0;
  }

  // A NaN or +inf makes some block sum, and so the mass, non-finite; a negative value sets a
  // sign bit. Either marks the row for the caller's exact check.
  static MassResult prob_mass(const void* xv, int64_t n, int64_t exclude) {
    const T* x = row(xv);
    uint32_t signs = 0;
    const double mass = block_mass<Block>(
        n,
        [&](int64_t base, int64_t m, float* s) {
          for (int64_t j = 0; j < m; ++j) signs |= float_to_bits(to_float(x[base + j]));
          fill_probs(x, exclude, base, m, s);
        },
        sum);
    return MassResult{mass, (signs >> 31) == 0 && mass <= std::numeric_limits<double>::max()};
  }

  static void fill_probs(const T* x, int64_t exclude, int64_t base, int64_t m, float* s) {
    for (int64_t j = 0; j < m; ++j) s[j] = to_float(x[base + j]);
    if (exclude >= base && exclude < base + m) s[exclude - base] = 0.0f;
    pad(s, m);
  }

  static void fill_patched(const T* x, const Patches& p, int64_t base, int64_t m, float* s) {
    for (int64_t j = 0; j < m; ++j) s[j] = to_float(x[base + j]);
    apply_patches(p, base, m, [&](int64_t j, float v) { s[j] = v; });
  }

  static void fill_exp(const T* x, const ExpMap& e, int64_t base, int64_t m, float* s) {
    fill_patched(x, e.patches, base, m, s);
    for (int64_t j = 0; j < m; ++j) s[j] = exp_nonpositive((s[j] - e.xmax) * e.inv_temp);
    pad(s, m);
  }

  // One block of bound_pass (block_reduce.h). While the running maximum is -inf (every value
  // so far -inf or NaN), y - max is NaN and its bound that of -87.
  struct BoundState {
    float running = -kInf;
    bool seen_nan = false;
    float max() const { return running; }
    bool nan() const { return seen_nan; }
  };
  static float block_bound(const T* x, const Patches& p, int64_t base, int64_t m, float a,
                           BoundState& st) {
    float s[kBlock];
    fill_patched(x, p, base, m, s);
    for (int64_t j = 0; j < m; ++j) {
      st.running = s[j] > st.running ? s[j] : st.running;
      st.seen_nan |= s[j] != s[j];
    }
    for (int64_t j = 0; j < m; ++j) s[j] = exp_upper_bound(s[j] - st.running, a);
    pad(s, m);
    return fold_block(s);
  }

  static void bound_run(const T* x, int64_t blocks, float a, BoundState& st, float* ref,
                        float* sum) {
    for (int64_t b = 0; b < blocks; ++b) {
      sum[b] = block_bound(x, Patches{}, b * kBlock, kBlock, a, st);
      ref[b] = st.max();
    }
  }

  static void maxima_run(const T* x, int64_t blocks, BoundState& st, float* max) {
    for (int64_t b = 0; b < blocks; ++b) {
      float m = -kInf;
      for (int64_t j = 0; j < kBlock; ++j) {
        const float v = to_float(x[b * kBlock + j]);
        m = v > m ? v : m;
        st.seen_nan |= v != v;
      }
      max[b] = m;
      st.running = m > st.running ? m : st.running;
    }
  }

  static float block_max(const float* s, int64_t m) {
    float r = -kInf;
    for (int64_t j = 0; j < m; ++j) r = s[j] > r ? s[j] : r;
    return r;
  }

  static CollectResult collect(const void* xv, int64_t n, ExpMap e, float threshold,
                               int64_t* index, float* value) {
    const T* x = row(xv);
    CollectResult r;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_float(x[j]);
      r.clean &= v == v && v != kInf;
      index[r.count] = j;
      value[r.count] = v;
      r.count += (v - e.xmax) * e.inv_temp >= threshold;
    }
    return r;
  }

  static void exp_values(const float* y, int64_t n, ExpMap e, float* out) {
    for (int64_t j = 0; j < n; ++j) out[j] = exp_nonpositive((y[j] - e.xmax) * e.inv_temp);
  }

  // max(0, vp * a - vq * b) over a block whose vp and vq are already in s and t.
  static void residual(float* s, const float* t, int64_t m, float a, float b) {
    for (int64_t j = 0; j < m; ++j) {
      const float d = s[j] * a - t[j] * b;
      s[j] = d > 0.0f ? d : 0.0f;
    }
  }

  static void fill_prob_residual(const T* p, const T* q, float a, float b, int64_t base,
                                 int64_t m, float* s) {
    alignas(64) float t[kBlock];
    fill_probs(p, -1, base, m, s);
    fill_probs(q, -1, base, m, t);
    residual(s, t, m, a, b);
  }
};

const RowKernels kReferenceF32 = BlockPasses<Reference<float>>::table();
const RowKernels kReferenceF16 = BlockPasses<Reference<Half>>::table();
const RowKernels kReferenceBF16 = BlockPasses<Reference<BFloat16>>::table();

}  // namespace

const RowKernels& reference_row_kernels(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return kReferenceF16;
    case DType::kBFloat16: return kReferenceBF16;
    default: return kReferenceF32;
  }
}

}  // namespace spec_edge
