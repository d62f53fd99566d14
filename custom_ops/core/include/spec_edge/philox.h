// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind every seeded draw.
//
// Counter layout used by all spec_edge ops (one stream per (seed, offset, row)):
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { offset & 0xffffffff, offset >> 32, row, draw / 4 }
//   draw d of a row is output word d % 4 of that counter, as the uniform word * 2^-32 in [0, 1).
// A caller advances `offset` by one per call so that no counter is ever reused.
#pragma once

#include <cstdint>

#include "spec_edge/types.h"

namespace spec_edge {

struct Philox4x32 {
  uint32_t v[4];
};

SPEC_EDGE_HD inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The `draw`-th uniform of stream (seed, offset, row), in [0, 1) with 32 random bits.
SPEC_EDGE_HD inline double philox_uniform(uint64_t seed, uint64_t offset, uint32_t row, uint64_t draw) {
  const Philox4x32 ctr{{static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), row,
                        static_cast<uint32_t>(draw >> 2)}};
  const Philox4x32 out =
      philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<double>(out.v[draw & 3]) * 0x1p-32;
}

}  // namespace spec_edge
