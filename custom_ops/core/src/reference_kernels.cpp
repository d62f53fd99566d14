// Scalar reference of the row passes: the definition every other path is tested against.
// Written as plain loops over blocks that compilers can vectorize without changing a bit
// (-ffp-contract=off, no fast-math: every operation is the IEEE one the definition names).
#include <algorithm>
#include <limits>

#include "block_reduce.h"
#include "row_kernels.h"

namespace spec_edge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using Block = float[kBlock];

float block_sum(const Block& s) { return fold_block(s); }

// Wraps a fill of m values with the zero padding of a short block.
template <class Fill>
auto padded(const Fill& fill) {
  return [&fill](int64_t base, int64_t m, Block& s) {
    fill(base, m, s);
    for (int64_t j = m; j < kBlock; ++j) s[j] = 0.0f;
  };
}

template <class Fill>
double block_mass(int64_t n, const Fill& fill) {
  return spec_edge::block_mass<Block>(n, padded(fill), block_sum);
}

template <class Fill>
int64_t block_scan(int64_t n, const Fill& fill, double target) {
  return spec_edge::block_scan<Block>(n, padded(fill), block_sum, target);
}

template <class T>
struct Reference {
  static const T* row(const void* x) { return static_cast<const T*>(x); }

  static float load(const void* x, int64_t j) { return to_float(row(x)[j]); }

  // The maximum (NaN ignored) and whether a NaN or +inf was seen, in kLanes independent lanes
  // (a layout compilers vectorize).
  static constexpr int kLanes = 16;
  struct MaxScan {
    float max;
    bool nan, pos_inf;
  };
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

  // First index of the maximum; a row of -inf has it at 0.
  static ArgmaxResult argmax(const void* xv, int64_t n) {
    const T* x = row(xv);
    const MaxScan s = max_scan(x, n);
    ArgmaxResult r;
    if (s.nan) {
      for (int64_t j = 0; j < n; ++j)
        if (to_float(x[j]) != to_float(x[j])) {
          r.nan_at = j;
          return r;
        }
    }
    r.index = 0;
    for (int64_t j = 0; j < n; ++j)
      if (to_float(x[j]) == s.max) {
        r.index = j;
        break;
      }
    return r;
  }

  static MaxResult logit_max(const void* xv, int64_t n) {
    const MaxScan s = max_scan(row(xv), n);
    return MaxResult{s.max, !(s.nan || s.pos_inf)};
  }

  // A NaN or +inf makes some block sum, and so the mass, non-finite; a negative value sets a
  // sign bit. Either marks the row for the caller's exact check.
  static MassResult prob_mass(const void* xv, int64_t n, int64_t exclude) {
    const T* x = row(xv);
    uint32_t signs = 0;
    const double mass = block_mass(n, [&](int64_t base, int64_t m, float* s) {
      for (int64_t j = 0; j < m; ++j) {
        s[j] = to_float(x[base + j]);
        signs |= float_to_bits(s[j]);
      }
      if (exclude >= base && exclude < base + m) s[exclude - base] = 0.0f;
    });
    return MassResult{mass, (signs >> 31) == 0 && mass <= std::numeric_limits<double>::max()};
  }

  static int64_t prob_scan(const void* xv, int64_t n, int64_t exclude, double target) {
    const T* x = row(xv);
    return block_scan(
        n,
        [&](int64_t base, int64_t m, float* s) {
          for (int64_t j = 0; j < m; ++j) s[j] = to_float(x[base + j]);
          if (exclude >= base && exclude < base + m) s[exclude - base] = 0.0f;
        },
        target);
  }

  static void fill_exp(const T* x, ExpMap e, int64_t base, int64_t m, float* s) {
    for (int64_t j = 0; j < m; ++j) s[j] = exp_nonpositive((to_float(x[base + j]) - e.xmax) * e.inv_temp);
  }

  static double exp_mass(const void* xv, int64_t n, ExpMap e) {
    const T* x = row(xv);
    return block_mass(n, [&](int64_t base, int64_t m, float* s) { fill_exp(x, e, base, m, s); });
  }

  static int64_t exp_scan(const void* xv, int64_t n, ExpMap e, double target) {
    const T* x = row(xv);
    return block_scan(
        n, [&](int64_t base, int64_t m, float* s) { fill_exp(x, e, base, m, s); }, target);
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
    for (int64_t j = 0; j < m; ++j) {
      s[j] = to_float(p[base + j]);
      t[j] = to_float(q[base + j]);
    }
    residual(s, t, m, a, b);
  }

  static double prob_residual_mass(const void* pv, const void* qv, int64_t n, float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(n, [&](int64_t base, int64_t m, float* s) {
      fill_prob_residual(p, q, a, b, base, m, s);
    });
  }

  static int64_t prob_residual_scan(const void* pv, const void* qv, int64_t n, float a, float b,
                                    double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n, [&](int64_t base, int64_t m, float* s) { fill_prob_residual(p, q, a, b, base, m, s); },
        target);
  }

  static void fill_exp_residual(const T* p, const T* q, ExpMap mp, ExpMap mq, float a, float b,
                                int64_t base, int64_t m, float* s) {
    alignas(64) float t[kBlock];
    fill_exp(p, mp, base, m, s);
    fill_exp(q, mq, base, m, t);
    residual(s, t, m, a, b);
  }

  static double exp_residual_mass(const void* pv, const void* qv, int64_t n, ExpMap mp, ExpMap mq,
                                  float a, float b) {
    const T *p = row(pv), *q = row(qv);
    return block_mass(n, [&](int64_t base, int64_t m, float* s) {
      fill_exp_residual(p, q, mp, mq, a, b, base, m, s);
    });
  }

  static int64_t exp_residual_scan(const void* pv, const void* qv, int64_t n, ExpMap mp,
                                   ExpMap mq, float a, float b, double target) {
    const T *p = row(pv), *q = row(qv);
    return block_scan(
        n,
        [&](int64_t base, int64_t m, float* s) { fill_exp_residual(p, q, mp, mq, a, b, base, m, s); },
        target);
  }

  static RowKernels table() {
    return RowKernels{argmax,        prob_mass,          prob_scan,          logit_max,
                      exp_mass,      exp_scan,           prob_residual_mass, prob_residual_scan,
                      exp_residual_mass, exp_residual_scan, load};
  }
};

const RowKernels kReferenceF32 = Reference<float>::table();
const RowKernels kReferenceF16 = Reference<Half>::table();
const RowKernels kReferenceBF16 = Reference<BFloat16>::table();

}  // namespace

const RowKernels& reference_row_kernels(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return kReferenceF16;
    case DType::kBFloat16: return kReferenceBF16;
    default: return kReferenceF32;
  }
}

}  // namespace spec_edge
