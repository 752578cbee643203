// f32 GEMV over XNNPACK's packing, AVX-512F: one accumulator per tile, four tiles at a time.

#include <immintrin.h>

#include <limits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// XNNPACK's clamp is kept (and its operand order, which decides what a NaN becomes) so that every
// output is bitwise its kernel's.
template <int kTiles>
void run_tiles(const float* w, size_t tile, size_t k, const float* x, float* y, size_t last_count) {
  const __m512 lo = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 hi = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 acc[kTiles];
  for (int j = 0; j < kTiles; ++j) acc[j] = _mm512_loadu_ps(w + j * tile);
  const float* p = w + kF32Tile;
  for (size_t i = 0; i < k; ++i, p += kF32Tile) {
    const __m512 xi = _mm512_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      prefetch_ahead(p + j * tile);
      acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(p + j * tile), xi, acc[j]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    const __m512 v = clamp_avx512(acc[j], lo, hi);
    if (j + 1 < kTiles || last_count == kF32Tile) {
      _mm512_storeu_ps(y + j * kF32Tile, v);
    } else {
      _mm512_mask_storeu_ps(y + j * kF32Tile, static_cast<__mmask16>((1u << last_count) - 1), v);
    }
  }
}

}  // namespace

void f32_gemv_4x16_avx512f(const float* packed, size_t k, size_t n, const float* x, float* y) {
  f32_gemv_tiles<&run_tiles<4>, &run_tiles<2>, &run_tiles<1>>(packed, k, n, x, y);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
