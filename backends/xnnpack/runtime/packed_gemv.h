// Fully connected over weights XNNPACK packed, run by the delegate's own kernels: one row (T=1: a
// decode step) four column tiles at a time, and several rows (T > 1: a prefill) while the next slab
// is prefetched. One packed copy serves both and XNNPACK's own operators.
//
// XNNPACK's f32 one-row kernel walks one tile of 16 output channels at a time (one accumulator on
// AVX-512, two on FMA3), so every step waits on the previous FMA and too few loads are in flight to
// stream the weights at the memory's pace (a T=1 forward is nothing but weight bytes). packed_gemv
// reads the same packed bytes (the one shared copy) four tiles at a time with four times the
// accumulators, and does XNNPACK's arithmetic for every output (its bias, one FMA per input in
// input order, its clamp), so its results are bitwise XNNPACK's.
//
// The packed layout ([16 biases][K x 16 weights] per tile of 16 output channels) is XNNPACK's
// implementation, not its API. packed_gemv_usable() therefore checks it against XNNPACK itself,
// once per process: XNNPACK packs a probe weight, both run it, and any difference (in the packed
// size or in one output bit: another XNNPACK, another CPU) leaves every run to XNNPACK.
//
//   if (packed_gemv_usable() && packed_bytes == packed_gemv_bytes(k, n)) {
//     packed_gemv(packed, k, n, x, y);   // y[0..n) from x[0..k)
//   }
//
// Errors: none; packed_gemv_usable() says false when the kernel cannot stand in for XNNPACK's
// (neither AVX-512 nor AVX2 with FMA, XNNPACK not initialised with the delegate's allocator, or a
// mismatch).
// Thread-safety: every function may be called from any number of threads at once; packed_gemv only
// reads the packed bytes, so one weight can serve several threads without a lock.
// Ownership: nothing is kept.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_H_

#include <cstddef>

namespace edgeshare {
namespace xnnpack {

// True when packed_gemv gives XNNPACK's results on this machine. The first call runs the probe
// (XNNPACK must be initialised: initialize_xnnpack()).
bool packed_gemv_usable();

// Bytes XNNPACK's packing of an f32 [n, k] weight (with its bias) takes, in the layout packed_gemv
// reads.
size_t packed_gemv_bytes(size_t input_channels, size_t output_channels);

// y[j] = bias[j] + sum_i w[j][i] * x[i] for j < n, from XNNPACK's packing of w and bias at `packed`
// (packed_gemv_bytes(k, n) bytes), unclamped. Only when packed_gemv_usable().
void packed_gemv(const void* packed, size_t input_channels, size_t output_channels, const float* x,
                 float* y);

// Several rows (T > 1) over the same packing, with XNNPACK's arithmetic per output (bitwise its
// results), 8 rows by 32 output channels at a time, reading `prefetch_bytes` at `prefetch` (the
// next slab a run will use) into L2 while it computes: XNNPACK's kernel can only be preceded by
// such a read (touch), never overlapped with it. AVX-512 only; checked against XNNPACK once per
// process like packed_gemv.
bool packed_gemm_usable();

// rows x n outputs at y (rows y_stride floats apart) from rows x k inputs at x (contiguous rows).
// Only when packed_gemm_usable(); prefetch may be null.
void packed_gemm(const void* packed, size_t input_channels, size_t output_channels, size_t rows,
                 const float* x, float* y, size_t y_stride, const void* prefetch,
                 size_t prefetch_bytes);

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_PACKED_GEMV_H_
