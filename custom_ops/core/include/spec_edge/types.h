// Framework-free views over caller-owned memory: raw pointers, sizes and strides (in elements).
#pragma once

#include <cstdint>
#include <cstring>

// Functions the CUDA build (custom_ops/cuda) also runs on the device: one definition of each
// conversion and approximation for every path.
#if defined(__CUDACC__)
#define SPEC_EDGE_HD __host__ __device__
#else
#define SPEC_EDGE_HD
#endif

namespace spec_edge {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat64 = 3 };

const char* dtype_name(DType dtype);

// A [batch, rows, vocab] tensor of scores (probabilities or logits). The vocab axis must be
// contiguous (stride 1); batch and row strides are free, 0 included (broadcast).
struct Rows {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t batch = 0, rows = 0, vocab = 0;
  int64_t batch_stride = 0, row_stride = 0;

  // A densely packed [batch, rows, vocab] tensor.
  static Rows contiguous(const void* data, DType dtype, int64_t batch, int64_t rows, int64_t vocab) {
    return Rows{data, dtype, batch, rows, vocab, rows * vocab, vocab};
  }
};

// A [batch, len] tensor of int64 token ids.
struct Tokens {
  const int64_t* data = nullptr;
  int64_t batch = 0, len = 0;
  int64_t batch_stride = 0, stride = 1;
  int64_t at(int64_t b, int64_t i) const { return data[b * batch_stride + i * stride]; }
};

// A [batch, len] tensor of uniforms in [0, 1), float32 or float64.
struct Uniforms {
  const void* data = nullptr;
  DType dtype = DType::kFloat64;
  int64_t batch = 0, len = 0;
  int64_t batch_stride = 0, stride = 1;
  double at(int64_t b, int64_t i) const {
    const int64_t k = b * batch_stride + i * stride;
    return dtype == DType::kFloat64 ? static_cast<const double*>(data)[k]
                                    : static_cast<double>(static_cast<const float*>(data)[k]);
  }
};

// A per-row parameter: `count` is 1 (one value for every row) or the batch size.
template <class T>
struct PerRow {
  const T* data = nullptr;
  int64_t count = 0;
  T at(int64_t b) const { return data[count == 1 ? 0 : b]; }
  // The value of row b, or `absent` when the parameter was not given (count 0).
  T at_or(int64_t b, T absent) const { return count == 0 ? absent : at(b); }
};

// Outputs of the single-sequence verifiers, one entry per batch row.
struct VerifyResult {
  int64_t* n_accepted = nullptr;  // [batch]
  int64_t* next_token = nullptr;  // [batch]
};

// ---- element conversion (exact) ------------------------------------------------------------
// static: every translation unit (each compiled for its own ISA) keeps its own copy.
SPEC_EDGE_HD static inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
SPEC_EDGE_HD static inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

SPEC_EDGE_HD static inline float to_float(float x) { return x; }
SPEC_EDGE_HD static inline float to_float(BFloat16 x) { return bits_to_float(static_cast<uint32_t>(x.bits) << 16); }
SPEC_EDGE_HD static inline float to_float(Half x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  uint32_t exp = (x.bits >> 10) & 0x1fu;
  uint32_t man = x.bits & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal half: renormalize into a normal float
    exp = 113;  // 127 - 15 + 1
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    man &= 0x3ffu;
    return bits_to_float(sign | (exp << 23) | (man << 13));
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

SPEC_EDGE_HD constexpr DType dtype_of(float) { return DType::kFloat32; }
SPEC_EDGE_HD constexpr DType dtype_of(Half) { return DType::kFloat16; }
SPEC_EDGE_HD constexpr DType dtype_of(BFloat16) { return DType::kBFloat16; }

// The largest float that `dtype` keeps finite when rounding to nearest even (above it: inf):
// what filter_logits, whose output takes the logits' dtype, can return.
SPEC_EDGE_HD static inline float largest_kept_finite(DType dtype) {
  return dtype == DType::kFloat16    ? bits_to_float(0x477FEFFFu)   // just below 65520, past 65504's midpoint
         : dtype == DType::kBFloat16 ? bits_to_float(0x7F7F7FFFu)   // just below the midpoint past its max
                                     : bits_to_float(0x7F7FFFFFu);  // float's max
}

// float -> half, rounded to nearest even as IEEE 754 (and F16C, NEON, torch) round: beyond the
// largest half, inf; below the smallest subnormal's half, a signed zero; NaN stays a quiet NaN
// with its payload's top bits.
SPEC_EDGE_HD static inline Half to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // inf, NaN
    return Half{static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u))};
  const int32_t e = static_cast<int32_t>(abs >> 23) - 127 + 15;
  uint32_t m = abs & 0x7fffffu;
  if (e >= 31) return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  uint32_t h, rem, half;
  if (e <= 0) {  // a subnormal half (or zero)
    if (e < -10) return Half{static_cast<uint16_t>(sign)};
    m |= 0x800000u;
    const int shift = 14 - e;
    h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  } else {
    h = (static_cast<uint32_t>(e) << 10) | (m >> 13), rem = m & 0x1fffu, half = 0x1000u;
  }
  if (rem > half || (rem == half && (h & 1u))) ++h;  // a carry into the exponent rounds up to inf
  return Half{static_cast<uint16_t>(sign | h)};
}

}  // namespace spec_edge
