// The block-ordered mass and inverse-CDF scan of numerics.h, shared by every CPU path.
//
// A path supplies its block type (kBlock floats, e.g. float[64] or 16 four-lane vectors),
// `fill(base, m, block)` writing the m values of the block at `base` and zeros past them, and
// `sum(block)`, the halving fold. The walk over blocks is the same code for every path.
#pragma once

#include <cstdint>
#include <cstring>

#include "spec_edge/numerics.h"

namespace spec_edge {

template <class Block>
static inline void block_values(const Block& block, float* out) {
  static_assert(sizeof(Block) == kBlock * sizeof(float), "a block holds kBlock floats");
  std::memcpy(out, &block, sizeof(Block));
}

// Sum over [0, n): block sums in float, accumulated left to right in double.
template <class Block, class Fill, class Sum>
static double block_mass(int64_t n, const Fill& fill, const Sum& sum) {
  double total = 0.0;
  alignas(64) Block block;
  for (int64_t base = 0; base < n; base += kBlock) {
    fill(base, n - base < kBlock ? n - base : kBlock, block);
    total += static_cast<double>(sum(block));
  }
  return total;
}

// Inverse CDF: the first j at which the running total exceeds `target`, walking the block
// sums of block_mass and, inside the crossing block, single values in double. Values are
// >= 0, so j always has a positive value. When rounding leaves no crossing (target at the very
// top of the mass), the last positive value is returned; -1 only for an all-zero row.
template <class Block, class Fill, class Sum>
static int64_t block_scan(int64_t n, const Fill& fill, const Sum& sum, double target) {
  double cum = 0.0;
  int64_t last_positive_block = -1;
  alignas(64) Block block;
  alignas(64) float v[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t m = n - base < kBlock ? n - base : kBlock;
    fill(base, m, block);
    const float s = sum(block);
    if (s > 0.0f) {
      if (cum + static_cast<double>(s) > target) {
        block_values(block, v);
        double c = cum;
        int64_t last = -1;
        for (int64_t j = 0; j < m; ++j) {
          if (v[j] > 0.0f) {
            c += static_cast<double>(v[j]);
            last = base + j;
            if (c > target) return last;
          }
        }
        return last;
      }
      last_positive_block = base;
    }
    cum += static_cast<double>(s);
  }
  if (last_positive_block < 0) return -1;
  const int64_t m = n - last_positive_block < kBlock ? n - last_positive_block : kBlock;
  fill(last_positive_block, m, block);
  block_values(block, v);
  for (int64_t j = m - 1; j >= 0; --j)
    if (v[j] > 0.0f) return last_positive_block + j;
  return -1;
}

}  // namespace spec_edge
