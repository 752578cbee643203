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
// The cap: EDGESHARE_ISA=scalar|avx2|avxvnni|avx512f|avx512vnni in the environment, read once per
// process at the first call, limits what runs to that set and those before it in Isa's order, so
// that an AVX2 machine's figures can be measured on an AVX-512 one. An unknown name caps nothing
// (isa_cap_error() says why); the cap never widens what the CPU runs.
//
// Thread-safety: every function may be called from any thread. Nothing here allocates after
// the first call.

#ifndef EDGESHARE_RUNTIME_KERNELS_CPU_H_
#define EDGESHARE_RUNTIME_KERNELS_CPU_H_

#include <cstdint>

namespace edgeshare {
namespace runtime {
namespace kernels {

// Each a superset of the one before, but AVX-VNNI, which CPUs with AVX-512 may lack (every pick
// asks cpu_runs, never the order alone).
enum class Isa : uint8_t {
  kScalar,      // Plain C++: the reference of every kind, and what any CPU runs.
  kAvx2,        // AVX2, FMA3 and F16C (the vector part of x86-64-v3).
  kAvxVnni,     // kAvx2 and AVX-VNNI (VPDPBUSD on 256-bit vectors, VEX-encoded).
  kAvx512f,     // kAvx2 and AVX-512 Foundation.
  kAvx512Vnni,  // kAvx512f and AVX-512 BW, VL and VNNI.
};
constexpr int kNumIsas = 5;

// "scalar", "avx2", "avxvnni", "avx512f" or "avx512vnni": the names EDGESHARE_ISA takes.
const char* to_string(Isa isa);

// Whether this CPU (and its OS) runs `isa`; kScalar always.
bool cpu_runs(Isa isa);

// The widest Isa kernels may use: EDGESHARE_ISA's, or kAvx512Vnni when it is unset or unknown.
Isa isa_cap();

// Null, or the one-line reason EDGESHARE_ISA was ignored (an unknown name).
const char* isa_cap_error();

// cpu_runs(isa) and isa is at most isa_cap().
bool isa_runs(Isa isa);

}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_CPU_H_
