// KernelSets: the sets of one kind of kernel, one per instruction set, and which one a process
// runs. The one way edgeshare picks kernels (portable kernels and the XNNPACK delegate's alike).
//
// A kind of kernel (a GEMV, a GEMM, an attention row, ...) has one set per instruction set: a
// plain struct of function pointers. Its config file lists every candidate with the Isa it is
// written for, scalar reference first and widest last, and keeps the table in a function-local
// static, so the CPU is asked once per process and every caller after that reads a constant:
//
//   const KernelSets<GemmNtKernels>& gemm_nt_sets() {
//     static const KernelSets<GemmNtKernels> s({
//         {{gemm_nt_f32_scalar}, Isa::kScalar},
//         {{gemm_nt_f32_avx512}, Isa::kAvx512f},
//     });
//     return s;
//   }
//   gemm_nt_sets().best().f32(m, n, k, a, b, c);
//
// best() is what the runtime calls: the widest set the CPU runs within the cap (cpu.h's
// EDGESHARE_ISA) that passes the kind's check, if it has one (a probe against the scalar
// reference, run once at construction; a set that fails gives way to the next narrower one).
// all() and up_to() are what tests and benchmarks walk, to check each set against the scalar
// reference on every path the CPU can run, whatever the cap.
//
// Thread-safety: constructed once (a function-local static), then read-only.
// Ownership: the sets are copies of the candidates; nothing is freed or mutated.

#ifndef EDGESHARE_RUNTIME_KERNELS_KERNEL_SETS_H_
#define EDGESHARE_RUNTIME_KERNELS_KERNEL_SETS_H_

#include <cstddef>
#include <initializer_list>

#include "edgeshare/runtime/kernels/cpu.h"

namespace edgeshare {
namespace runtime {
namespace kernels {

template <typename Kernels>
class KernelSets {
 public:
  struct Candidate {
    Kernels kernels;
    Isa isa;
  };
  // A set's check on this CPU before the process runs it (the scalar reference is never checked).
  using Check = bool (*)(const Kernels&);

  // Keeps the candidates this CPU runs, in the order given (scalar first, widest last, in Isa's
  // order). The first candidate must be kScalar, so there is always a set to run.
  explicit KernelSets(std::initializer_list<Candidate> candidates, Check check = nullptr) {
    for (const Candidate& c : candidates) {
      if (count_ < kNumIsas && cpu_runs(c.isa)) sets_[count_++] = c;
    }
    for (size_t i = count_; i-- > 1;) {
      if (sets_[i].isa > isa_cap()) continue;
      if (check == nullptr || check(sets_[i].kernels)) {
        best_ = i;
        break;
      }
    }
  }

  // The sets this CPU runs, scalar first; *count of them.
  const Candidate* all(size_t* count) const {
    *count = count_;
    return sets_;
  }

  // The widest set this CPU runs at or below `max_isa`, unchecked and uncapped: for tests and
  // benchmarks, which force every path.
  const Candidate& up_to(Isa max_isa) const {
    size_t pick = 0;
    for (size_t i = 0; i < count_; ++i) {
      if (sets_[i].isa <= max_isa) pick = i;
    }
    return sets_[pick];
  }

  // The set the process runs, and its Isa.
  const Kernels& best() const { return sets_[best_].kernels; }
  Isa best_isa() const { return sets_[best_].isa; }

 private:
  Candidate sets_[kNumIsas] = {};
  size_t count_ = 0;
  size_t best_ = 0;
};

}  // namespace kernels
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_KERNEL_SETS_H_
