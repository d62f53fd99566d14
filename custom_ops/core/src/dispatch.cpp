#include "spec_edge/dispatch.h"

#include <cstdlib>
#include <cstring>

#include "row_kernels.h"

namespace spec_edge {
namespace {

enum class Isa { kPortable, kScalar };

struct IsaInfo {
  Isa isa;
  const char* name;
  bool (*available)();
};

// Best first; the automatic choice is the first available, and the list ends in scalar.
const IsaInfo kIsas[] = {
    {Isa::kPortable, "portable", [] { return true; }},
    {Isa::kScalar, "scalar", [] { return true; }},
};

Isa automatic_isa() {
  for (const IsaInfo& info : kIsas)
    if (info.available()) return info.isa;
  return Isa::kScalar;
}

Isa& current_isa() {
  static Isa isa = [] {
    const char* forced = std::getenv("SPEC_EDGE_ISA");
    if (forced != nullptr && *forced != '\0')
      for (const IsaInfo& info : kIsas)
        if (std::strcmp(info.name, forced) == 0 && info.available()) return info.isa;
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

Status select_isa(const char* name) {
  for (const IsaInfo& info : kIsas) {
    if (name != nullptr && std::strcmp(info.name, name) == 0) {
      if (!info.available())
        return Status::error(Code::kInvalidArgument,
                             "isa: '%s' is not available on this CPU/build; available: %s", name,
                             available_isas());
      current_isa() = info.isa;
      return Status::ok();
    }
  }
  return Status::error(Code::kInvalidArgument, "isa: unknown path '%s'; expected one of: %s",
                       name ? name : "(null)", available_isas());
}

static const RowKernels& kernels_of(Isa isa, DType dtype) {
  switch (isa) {
    case Isa::kPortable: return portable_row_kernels(dtype);
    case Isa::kScalar:
    default: return reference_row_kernels(dtype);
  }
}

const RowKernels& row_kernels(DType dtype) { return kernels_of(current_isa(), dtype); }

const RowKernels* row_kernels_for(const char* isa, DType dtype) {
  for (const IsaInfo& info : kIsas)
    if (std::strcmp(info.name, isa) == 0 && info.available()) return &kernels_of(info.isa, dtype);
  return nullptr;
}

}  // namespace spec_edge
