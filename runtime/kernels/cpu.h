// The instruction sets edgeshare's kernels are written for, which of them this CPU runs, and the
// cap a user or a benchmark puts on them.
//
// Every kernel file is written for one Isa (its name ends in it) and every kernel kind picks
// among its sets with KernelSets (kernel_sets.h), which asks isa_runs() here. This is the one
// place that asks the CPU what it has:
//
//   if (isa_runs(Isa::kAvx2)) ...             // the CPU has it and the cap allows it
//   if (cpu_runs(Isa::kAvx512Vnni)) ...       // the CPU has it, whatever the cap (tests)
//
// The cap: EDGESHARE_ISA in the environment, read once per process at the first call, names scalar
// or a set of the architecture the binary is built for (x86-64: avx2, avxvnni, avx512f,
// avx512vnni; aarch64: neon, neondot, neoni8mm) and limits what runs to that set and those before
// it in Isa's order, so that an AVX2 machine's figures can be measured on an AVX-512 one and a
// Cortex-A76's (dot product, no i8mm) on a newer core. An unknown name, or one of the other
// architecture's sets, caps nothing (isa_cap_error() says why); the cap never widens what the CPU
// runs.
//
// Thread-safety: every function may be called from any thread. Nothing here allocates after
// the first call.

#ifndef EDGESHARE_RUNTIME_KERNELS_CPU_H_
#define EDGESHARE_RUNTIME_KERNELS_CPU_H_

#include <cstdint>

namespace edgeshare {
namespace runtime {
namespace kernels {

// kScalar, then each architecture's sets, each a superset of the one before it within its
// architecture, but AVX-VNNI, which CPUs with AVX-512 may lack (every pick asks cpu_runs, never
// the order alone). A CPU runs kScalar and the sets of one architecture only, so the order
// between the two architectures' sets never decides anything.
enum class Isa : uint8_t {
  kScalar,      // Plain C++: the reference of every kind, and what any CPU runs.
  // x86-64.
  kAvx2,        // AVX2, FMA3 and F16C (the vector part of x86-64-v3).
  kAvxVnni,     // kAvx2 and AVX-VNNI (VPDPBUSD on 256-bit vectors, VEX-encoded).
  kAvx512f,     // kAvx2 and AVX-512 Foundation.
  kAvx512Vnni,  // kAvx512f and AVX-512 BW, VL and VNNI.
  // aarch64.
  kNeon,        // Advanced SIMD (NEON), which every aarch64 CPU has: ARMv8.0 (Cortex-A53, A72).
  kNeonDot,     // kNeon and the dot product (SDOT/UDOT; ARMv8.2's FEAT_DotProd: Cortex-A76).
  kNeonI8mm,    // kNeonDot and the int8 matrix multiply (SMMLA/USMMLA/USDOT; ARMv8.6's FEAT_I8MM).
};
constexpr int kNumIsas = 8;

// The widest set of the architecture the binary is built for: the cap when none is set.
#if defined(__aarch64__)
constexpr Isa kWidestIsa = Isa::kNeonI8mm;
#else
constexpr Isa kWidestIsa = Isa::kAvx512Vnni;
#endif

// "scalar", "avx2", "avxvnni", "avx512f", "avx512vnni", "neon", "neondot" or "neoni8mm": the
// names EDGESHARE_ISA takes.
const char* to_string(Isa isa);

// Whether `isa` is kScalar or a set of the architecture the binary is built for (only those have
// kernels in it, and only those may cap).
bool isa_of_this_build(Isa isa);

// Whether this CPU (and its OS) runs `isa`; kScalar always.
bool cpu_runs(Isa isa);

// The widest Isa kernels may use: EDGESHARE_ISA's, or kWidestIsa when it is unset, unknown or
// another architecture's.
Isa isa_cap();

// Null, or the one-line reason EDGESHARE_ISA was ignored (an unknown name, or a set of the other
// architecture).
const char* isa_cap_error();

// cpu_runs(isa) and isa is at most isa_cap().
bool isa_runs(Isa isa);

}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_CPU_H_
