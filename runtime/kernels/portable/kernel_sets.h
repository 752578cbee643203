// KernelSets: the sets of one kind of portable kernel this CPU runs, scalar first, best last.
//
// A kind of kernel (gemm_nt, attention_row, ...) has one set per instruction set: a plain struct
// of function pointers whose first member is `const char* isa`. Its config file lists every
// candidate with the CPU features it needs and keeps the result in a function-local static, so the
// CPU is asked once per process and every caller after that reads a constant table:
//
//   const KernelSets<GemmNtKernels>& sets() {
//     static const KernelSets<GemmNtKernels> s({
//         {{"scalar", gemm_nt_f32_scalar}, CpuNeeds::kNothing},
//         {{"avx512", gemm_nt_f32_avx512}, CpuNeeds::kAvx512f},
//     });
//     return s;
//   }
//
// best() is what the runtime calls; all() is what tests walk, to check each set against the
// scalar reference on every path the CPU can run. Nothing here is ever freed or mutated.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_SETS_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_SETS_H_

#include <cstddef>
#include <initializer_list>

namespace edgeshare {
namespace runtime {
namespace portable {

// The CPU features a candidate set needs (x86-64; anything else runs kNothing only).
enum class CpuNeeds {
  kNothing,
  kAvx2,
  kAvx2Fma,
  kAvx2FmaF16c,
  kAvx512f,
};

// True when this CPU has every feature `needs` names.
bool cpu_has(CpuNeeds needs);

template <typename Kernels>
class KernelSets {
 public:
  struct Candidate {
    Kernels kernels;
    CpuNeeds needs;
  };

  // Keeps the candidates this CPU runs, in the order given (scalar first, best last). The first
  // candidate must need nothing, so there is always a set to run.
  KernelSets(std::initializer_list<Candidate> candidates) {
    for (const Candidate& c : candidates) {
      if (count_ < kMaxSets && cpu_has(c.needs)) sets_[count_++] = c.kernels;
    }
  }

  // The sets this CPU runs; *count of them.
  const Kernels* all(size_t* count) const {
    *count = count_;
    return sets_;
  }

  // The best set this CPU runs.
  const Kernels& best() const { return sets_[count_ - 1]; }

 private:
  static constexpr size_t kMaxSets = 4;
  Kernels sets_[kMaxSets] = {};
  size_t count_ = 0;
};

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_KERNEL_SETS_H_
