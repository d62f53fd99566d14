#include "spec_edge/dispatch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "attention_kernel.h"
#include "spec_edge/detail/row_kernels.h"

namespace spec_edge {
namespace {

enum class Isa { kAvx512, kAvx2, kVec128, kScalar };

struct IsaInfo {
  Isa isa;
  const char* name;
  bool (*available)();
};

#if defined(__x86_64__)
// AVX2 and F16C reported by cpuid, and the OS saving the YMM registers (XCR0 bits 1-2).
bool x86_has_avx2_f16c() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool f16c = c & (1u << 29), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!(f16c && osxsave && avx)) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
}

// AVX-512 F, DQ and VL reported by cpuid, and the OS saving the opmask and ZMM registers (XCR0
// bits 5-7) as well as YMM.
bool x86_has_avx512() {
  if (!x86_has_avx2_f16c()) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0xe6u) != 0xe6u) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 31));  // AVX512F, DQ, VL
}
#endif

// The automatic choice is the first available, and the list ends in scalar. avx512 comes after
// avx2, so it runs only when forced: its 512-bit passes are faster where a pass computes per
// element (verify's bound pass) but slower for the argmax that verify_greedy reads with, on the
// hosts measured (docs/OPS.md). The attention kernel is the exception (attention_kernels()).
const IsaInfo kIsas[] = {
#if defined(__x86_64__)
#if defined(SPEC_EDGE_HAVE_AVX2)
    {Isa::kAvx2, "avx2", [] { return x86_has_avx2_f16c(); }},
#endif
#if defined(SPEC_EDGE_HAVE_AVX512)
    {Isa::kAvx512, "avx512", [] { return x86_has_avx512(); }},
#endif
    {Isa::kVec128, "sse2", [] { return true; }},  // part of x86-64
#elif defined(__aarch64__)
    {Isa::kVec128, "neon",
     [] {
#if defined(__linux__)
       return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#else
       return true;  // Advanced SIMD is part of armv8-a
#endif
     }},
#else
    {Isa::kVec128, "vec128", [] { return true; }},  // compiler-generic vectors
#endif
    {Isa::kScalar, "scalar", [] { return true; }},
};

Isa automatic_isa() {
  for (const IsaInfo& info : kIsas)
    if (info.available()) return info.isa;
  return Isa::kScalar;
}

// Whether a path was forced (SPEC_EDGE_ISA or select_isa) rather than chosen automatically.
bool& isa_forced() {
  static bool forced = false;
  return forced;
}

Isa& current_isa() {
  static Isa isa = [] {
    const char* forced = std::getenv("SPEC_EDGE_ISA");
    if (forced != nullptr && *forced != '\0') {
      for (const IsaInfo& info : kIsas)
        if (std::strcmp(info.name, forced) == 0 && info.available()) {
          isa_forced() = true;
          return info.isa;
        }
      std::fprintf(stderr, "spec_edge: SPEC_EDGE_ISA=%s is not available here (available: %s); "
                           "using the automatic choice\n", forced, available_isas());
    }
    return automatic_isa();
  }();
  return isa;
}

}  // namespace

const char* active_isa() {
  for (const IsaInfo& info : kIsas)
    if (info.isa == current_isa()) return info.name;
  return "scalar";
}

const char* available_isas() {
  static char names[64] = {0};
  if (names[0] == '\0') {
    for (const IsaInfo& info : kIsas) {
      if (!info.available()) continue;
      if (names[0] != '\0') std::strncat(names, ",", sizeof(names) - std::strlen(names) - 1);
      std::strncat(names, info.name, sizeof(names) - std::strlen(names) - 1);
    }
  }
  return names;
}

const char* const* available_isa_list() {
  static const char* names[sizeof(kIsas) / sizeof(kIsas[0]) + 1] = {nullptr};
  if (names[0] == nullptr) {
    int n = 0;
    for (const IsaInfo& info : kIsas)
      if (info.available()) names[n++] = info.name;
    names[n] = nullptr;
  }
  return names;
}

Status select_isa(const char* name) {
  for (const IsaInfo& info : kIsas) {
    if (name != nullptr && std::strcmp(info.name, name) == 0) {
      if (!info.available())
        return Status::error(Code::kInvalidArgument,
                             "isa: '%s' is not available on this CPU/build; available: %s", name,
                             available_isas());
      current_isa() = info.isa;
      isa_forced() = true;
      return Status::ok();
    }
  }
  return Status::error(Code::kInvalidArgument, "isa: unknown path '%s'; expected one of: %s",
                       name ? name : "(null)", available_isas());
}

static const RowKernels& kernels_of(Isa isa, DType dtype) {
  switch (isa) {
#if defined(SPEC_EDGE_HAVE_AVX512)
    case Isa::kAvx512: return avx512_row_kernels(dtype);
#endif
#if defined(SPEC_EDGE_HAVE_AVX2)
    case Isa::kAvx2: return avx2_row_kernels(dtype);
#endif
    case Isa::kVec128: return vec128_row_kernels(dtype);
    case Isa::kScalar:
    default: return reference_row_kernels(dtype);
  }
}

const RowKernels& row_kernels(DType dtype) { return kernels_of(current_isa(), dtype); }

const AttendKernels& attend_baseline();
#if defined(SPEC_EDGE_HAVE_AVX2)
const AttendKernels& attend_avx2();
#endif
#if defined(SPEC_EDGE_HAVE_AVX512)
const AttendKernels& attend_avx512();
#endif

const AttendKernels& attention_kernels() {
#if defined(SPEC_EDGE_HAVE_AVX512)
  // AVX-512's 32 registers only widen the attention kernel's tiles (1.2-1.5x here, the same
  // bits), so the automatic avx2 choice takes them where the CPU has them; a forced path runs
  // its own.
  static const bool has_avx512 = x86_has_avx512();
  if (current_isa() == Isa::kAvx512 || (current_isa() == Isa::kAvx2 && !isa_forced() && has_avx512))
    return attend_avx512();
#endif
#if defined(SPEC_EDGE_HAVE_AVX2)
  if (current_isa() == Isa::kAvx2) return attend_avx2();
#endif
  return attend_baseline();
}

const RowKernels* row_kernels_for(const char* isa, DType dtype) {
  for (const IsaInfo& info : kIsas)
    if (std::strcmp(info.name, isa) == 0 && info.available()) return &kernels_of(info.isa, dtype);
  return nullptr;
}

}  // namespace spec_edge
