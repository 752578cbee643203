// The delegate's own kernels: one signature per kind, and every implementation of it, by
// instruction set. A kind's scalar implementation is its reference: every other one gives the same
// bits (tests compare each path the CPU can run against it). config.h picks the set a process runs.
//
// f32 fully connected over XNNPACK's packing of an f32 [n, k] weight and bias: tiles of
// kF32Tile output channels, each [kF32Tile biases][k x kF32Tile weights] (input-major within the
// tile), the last tile zero-padded. The layout is XNNPACK's implementation, not its API, so
// config.h checks it against XNNPACK once per process before any of these read XNNPACK's bytes.
// Every output is XNNPACK's arithmetic: its bias, then one FMA per input in input order, then its
// clamp to (-inf, +inf) with x86's operand order (what a NaN becomes), so results are bitwise its.
//
//   const F32Kernels& set = f32_kernels();             // config.h
//   if (set.gemv != nullptr) set.gemv(packed, k, n, x, y);
//
// Preconditions of every kernel (the caller checks them where it picks the kernel; config.h's
// check_* functions say which fails): k >= 1, n >= 1 (rows >= 1 for a GEMM), `packed` holds
// f32_packed_bytes(k, n) bytes, x and y hold the rows they are given, strides >= k and >= n.
// Errors: none; a kernel only computes.
// Thread-safety: kernels read their inputs and write only y: any number may run at once.
// Ownership: nothing is kept.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_

#include <cstddef>

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// Output channels per packed f32 tile: XNNPACK's nr for f32 on AVX-512 and on FMA3.
constexpr size_t kF32Tile = 16;

// Bytes of XNNPACK's packing of an f32 [n, k] weight with its bias.
constexpr size_t f32_packed_bytes(size_t k, size_t n) {
  return (n + kF32Tile - 1) / kF32Tile * kF32Tile * (k + 1) * sizeof(float);
}

// f32 GEMV: y[j] = clamp(bias[j] + sum_i w[j][i] * x[i]) for j < n, one row.
using F32GemvFn = void (*)(const float* packed, size_t k, size_t n, const float* x, float* y);
void f32_gemv_scalar(const float* packed, size_t k, size_t n, const float* x, float* y);
// Four tiles at a time, then two, then one (four FMA chains and streams in flight).
void f32_gemv_4x16_avx512f(const float* packed, size_t k, size_t n, const float* x, float* y);
void f32_gemv_4x16_avx2_fma(const float* packed, size_t k, size_t n, const float* x, float* y);

// f32 GEMM: `rows` rows of x (x_stride floats apart) to rows of y (y_stride floats apart), with
// `prefetch_bytes` at `prefetch` (may be null: the next slab a run will use) asked into L2 while
// it computes.
using F32GemmFn = void (*)(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                           size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                           size_t prefetch_bytes);
void f32_gemm_scalar(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                     size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                     size_t prefetch_bytes);
// 8 rows by 2 tiles at a time (16 of AVX-512's 32 registers as accumulators).
void f32_gemm_8x32_avx512f(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                           size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                           size_t prefetch_bytes);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_
