// Which ISA path the row passes run on. The choice is made once per process from the CPU's
// features; SPEC_EDGE_ISA=scalar|sse2|avx2|avx512|neon forces a path (an unavailable one is an error
// reported by select_isa, and the process keeps the automatic choice).
#pragma once

#include "spec_edge/status.h"

namespace spec_edge {

// Name of the active path: "scalar", "sse2", "avx2", "avx512" or "neon".
const char* active_isa();
// Paths this build and CPU can run, comma-separated, the automatic choice first, e.g.
// "avx2,avx512,sse2,scalar".
const char* available_isas();
// The same as a null-terminated array of names.
const char* const* available_isa_list();
// Forces a path by name for the rest of the process (tests, benchmarks).
Status select_isa(const char* name);

}  // namespace spec_edge
