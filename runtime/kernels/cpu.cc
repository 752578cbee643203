// What this CPU has, asked of the compiler's CPU probe (cpuid and the OS's saved-state support).

#include "edgeshare/runtime/kernels/cpu.h"

#include <cstdlib>
#include <cstring>

namespace edgeshare {
namespace runtime {
namespace kernels {

namespace {

struct Cap {
  Isa isa = Isa::kAvx512Vnni;
  const char* error = nullptr;
};

const Cap& cap() {
  static const Cap c = [] {
    Cap result;
    const char* name = std::getenv("EDGESHARE_ISA");
    if (name == nullptr || name[0] == '\0') return result;
    for (int i = 0; i < kNumIsas; ++i) {
      if (std::strcmp(name, to_string(static_cast<Isa>(i))) == 0) {
        result.isa = static_cast<Isa>(i);
        return result;
      }
    }
    result.error =
        "EDGESHARE_ISA is not one of scalar, avx2, avxvnni, avx512f, avx512vnni: nothing capped";
    return result;
  }();
  return c;
}

}  // namespace

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512f:
      return "avx512f";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

bool cpu_runs(Isa isa) {
  if (isa == Isa::kScalar) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvxVnni:
      return cpu_runs(Isa::kAvx2) && __builtin_cpu_supports("avxvnni");
    case Isa::kAvx512f:
      return cpu_runs(Isa::kAvx2) && __builtin_cpu_supports("avx512f");
    case Isa::kAvx512Vnni:
      return cpu_runs(Isa::kAvx512f) && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
#endif
  return false;
}

Isa isa_cap() { return cap().isa; }

const char* isa_cap_error() { return cap().error; }

bool isa_runs(Isa isa) { return isa <= isa_cap() && cpu_runs(isa); }

}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare
