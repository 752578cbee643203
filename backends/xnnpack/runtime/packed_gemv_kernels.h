// packed_gemv's kernels by instruction set, and the probe that checks one against XNNPACK: for
// packed_gemv.cc and its test (which runs each kernel the machine has, not only the one picked).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_KERNELS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_KERNELS_H_

#include <cstddef>

namespace edgeshare {
namespace xnnpack {
namespace internal {

// y[0..n) from x[0..k) over XNNPACK's packing of an [n, k] weight (see packed_gemv.h).
using GemvKernel = void (*)(const float* packed, size_t k, size_t n, const float* x, float* y);

// Callable only where the CPU has the instruction set (AVX-512F; AVX2 and FMA).
void gemv_avx512(const float* packed, size_t k, size_t n, const float* x, float* y);
void gemv_avx2(const float* packed, size_t k, size_t n, const float* x, float* y);

// rows x n outputs from rows x k inputs (rows x_stride apart; outputs y_stride apart), over the
// same packing, 8 rows by 2 tiles at a time (AVX-512F only), prefetching `prefetch_bytes` at
// `prefetch` into L2 as it goes.
void gemm_avx512(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                 size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                 size_t prefetch_bytes);

// The widest kernel this CPU can run, or null (not x86, or no AVX2 and FMA).
GemvKernel best_kernel();

// XNNPACK packs a probe weight (odd sizes: a partial last tile) and runs it, on finite inputs and
// with a NaN: true when `kernel` reads the packed bytes to the same size and the same bits. XNNPACK
// must be initialised with the delegate's allocator (initialize_xnnpack), else false.
bool matches_xnnpack(GemvKernel kernel);
// The same for gemm_avx512 at 2, 11 and 32 rows; false without AVX-512F.
bool gemm_matches_xnnpack();

}  // namespace internal
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_KERNELS_H_
