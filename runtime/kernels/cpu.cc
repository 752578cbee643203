// What this CPU has: on x86-64, asked of the compiler's CPU probe (cpuid and the OS's saved-state
// support); on aarch64 Linux, of the hardware capabilities the kernel passes every process
// (getauxval's AT_HWCAP and AT_HWCAP2), which is also what qemu-user's -cpu model sets.

#include "edgeshare/runtime/kernels/cpu.h"

#include <cstdlib>
#include <cstring>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace edgeshare {
namespace runtime {
namespace kernels {

namespace {

struct Cap {
  Isa isa = kWidestIsa;
  const char* error = nullptr;
};

const Cap& cap() {
  static const Cap c = [] {
    Cap result;
    const char* name = std::getenv("EDGESHARE_ISA");
    if (name == nullptr || name[0] == '\0') return result;
    for (int i = 0; i < kNumIsas; ++i) {
      const Isa isa = static_cast<Isa>(i);
      if (std::strcmp(name, to_string(isa)) != 0) continue;
      if (isa_of_this_build(isa)) {
        result.isa = isa;
      } else {
#if defined(__aarch64__)
        result.error = "EDGESHARE_ISA names an x86-64 set; this is aarch64: nothing capped";
#else
        result.error = "EDGESHARE_ISA names an aarch64 set; this is x86-64: nothing capped";
#endif
      }
      return result;
    }
#if defined(__aarch64__)
    result.error = "EDGESHARE_ISA is not one of scalar, neon, neondot, neoni8mm: nothing capped";
#else
    result.error =
        "EDGESHARE_ISA is not one of scalar, avx2, avxvnni, avx512f, avx512vnni: nothing capped";
#endif
    return result;
  }();
  return c;
}

#if defined(__aarch64__)
// The bits of asm/hwcap.h this file reads, by value: they are the kernel's ABI, and older
// headers lack the newer ones.
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;
#endif

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
    case Isa::kNeon:
      return "neon";
    case Isa::kNeonDot:
      return "neondot";
    case Isa::kNeonI8mm:
      return "neoni8mm";
  }
  return "unknown";
}

bool isa_of_this_build(Isa isa) {
  if (isa == Isa::kScalar) return true;
#if defined(__aarch64__)
  return isa >= Isa::kNeon && isa <= Isa::kNeonI8mm;
#elif defined(__x86_64__)
  return isa >= Isa::kAvx2 && isa <= Isa::kAvx512Vnni;
#else
  return false;
#endif
}

bool cpu_runs(Isa isa) {
  if (isa == Isa::kScalar) return true;
  if (!isa_of_this_build(isa)) return false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
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
    default:
      return false;
  }
#elif defined(__aarch64__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  switch (isa) {
    case Isa::kNeon:
      return (hwcap & kHwcapAsimd) != 0;
    case Isa::kNeonDot:
      return cpu_runs(Isa::kNeon) && (hwcap & kHwcapAsimdDp) != 0;
    case Isa::kNeonI8mm:
      return cpu_runs(Isa::kNeonDot) && (hwcap2 & kHwcap2I8mm) != 0;
    default:
      return false;
  }
#else
  return false;
#endif
}

Isa isa_cap() { return cap().isa; }

const char* isa_cap_error() { return cap().error; }

bool isa_runs(Isa isa) { return isa <= isa_cap() && cpu_runs(isa); }

}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare
