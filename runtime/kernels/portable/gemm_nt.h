// The product of a linear over its weight as stored: c[m, n] = a[m, k] . b[n, k]^T, with b the
// weight row-major [out, in], unpacked (the mapped bytes of a data file, which a swappable adapter
// rebinds between runs, so nothing can be packed ahead). Rows are contiguous: a's stride is k, b's
// k, c's n. The shapes it is for are the low-rank products of LoRA (rank 8-64 on one side), but
// any shape is correct.
//
// Beside it gemm_nn, the product over a weight stored transposed: c[m, n] = a[m, k] . b[k, n], b
// row-major [in, out]. A LoRA B factor is kept that way where its rank is the product's k (a
// batch's adapter tables): each output then sums broadcasts of a's k inputs times whole vectors of
// b's rows, where over [out, rank] every output would end in a horizontal sum of a short dot.
//
// One signature, one implementation per instruction set (gemm_nt_<isa>.cc, each built with only its
// own instruction set enabled); the scalar one is the reference (sums in order over k). The config
// picks the best set the CPU runs once per process; tests call every set the CPU can run.
//
//   gemm_nt_kernels().f32(rows, out_channels, in_channels, input, weight, output);
//   gemm_nt_kernels().nn_f16(rows, out_channels, in_channels, input, weight_in_out, output);
//
// Preconditions: c does not overlap a or b (memory planning never aliases an output with an
// input). m, n or k may be 0 (k == 0 writes zeros). No allocation; reentrant.
//
// Rows are independent: row i of c depends on row i of a, on b, n and k, and on which loop runs
// (kGemmNtSplitRows), never on the other rows. So m rows cut into pieces of at least
// kGemmNtSplitRows rows each (or, for m < kGemmNtSplitRows, not cut) give the same bits as one
// call: a caller may split rows (across threads, say) without changing a result. gemm_nn's rows
// and outputs depend on nothing else at all: every output is one sum in order over k, whatever m
// and n are.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

// Up to kGemmNtSplitRows - 1 rows run dot products with a horizontal sum per output, more rows may
// run another loop with another order of the sums (gemm_nt_impl.h).
constexpr size_t kGemmNtSplitRows = 4;

using GemmNtF32 = void (*)(size_t m, size_t n, size_t k, const float* a, const float* b, float* c);
// b as IEEE half bits.
using GemmNtF16 = void (*)(size_t m, size_t n, size_t k, const float* a, const uint16_t* b,
                           float* c);
// b as int8 with one float scale per row of b: c[i, j] = scales[j] * sum_p a[i, p] * b[j, p].
using GemmNtQ8 = void (*)(size_t m, size_t n, size_t k, const float* a, const int8_t* b,
                          const float* scales, float* c);

struct GemmNtKernels {
  GemmNtF32 f32;
  GemmNtF16 f16;
  GemmNtQ8 q8;
  // gemm_nn: b is [k, n]; an int8 b's scales are one per output (per column of b).
  GemmNtF32 nn_f32;
  GemmNtF16 nn_f16;
  GemmNtQ8 nn_q8;
};

#define ES_GEMM_NT_DECLARE(ISA)                                                                   \
  void gemm_nt_f32_##ISA(size_t m, size_t n, size_t k, const float* a, const float* b, float* c); \
  void gemm_nt_f16_##ISA(size_t m, size_t n, size_t k, const float* a, const uint16_t* b,         \
                         float* c);                                                               \
  void gemm_nt_q8_##ISA(size_t m, size_t n, size_t k, const float* a, const int8_t* b,            \
                        const float* scales, float* c);                                           \
  void gemm_nn_f32_##ISA(size_t m, size_t n, size_t k, const float* a, const float* b, float* c); \
  void gemm_nn_f16_##ISA(size_t m, size_t n, size_t k, const float* a, const uint16_t* b,         \
                         float* c);                                                               \
  void gemm_nn_q8_##ISA(size_t m, size_t n, size_t k, const float* a, const int8_t* b,            \
                        const float* scales, float* c);
ES_GEMM_NT_DECLARE(scalar)
#if defined(__x86_64__)
ES_GEMM_NT_DECLARE(avx2)
ES_GEMM_NT_DECLARE(avx512)
#elif defined(__aarch64__)
ES_GEMM_NT_DECLARE(neon)
#endif
#undef ES_GEMM_NT_DECLARE

// Every set this CPU runs, the reference (scalar) first (kernel_sets.h).
const kernels::KernelSets<GemmNtKernels>& gemm_nt_sets();

// The set the process runs: gemm_nt_sets().best().
const GemmNtKernels& gemm_nt_kernels();

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_H_
