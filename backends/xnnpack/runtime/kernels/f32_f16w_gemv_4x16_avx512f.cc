// f32 x f16w GEMV, AVX-512F: one accumulator per tile, four tiles at a time; each input's 16
// halves widened by VCVTPH2PS in the register they are used from.

#include <immintrin.h>

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_x86.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kInputBytes = kF16WTile * sizeof(uint16_t);

// The zero-masking form with every lane set: see f32_f16w_gemm_8x32_avx512f.cc.
__attribute__((always_inline)) inline __m512 widen(const uint8_t* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int kTiles>
void run_tiles(const uint8_t* w, size_t tile_bytes, size_t k, const float* x, float* y,
               size_t last_count) {
  __m512 acc[kTiles];
  for (int j = 0; j < kTiles; ++j) {
    acc[j] = _mm512_loadu_ps(reinterpret_cast<const float*>(w + j * tile_bytes));
  }
  const uint8_t* p = w + kF16WTile * sizeof(float);
  size_t i = 0;
  // Two inputs (one cache line of a tile) per step: one prefetch per line and stream.
  for (; i + 2 <= k; i += 2, p += 2 * kInputBytes) {
    const __m512 x0 = _mm512_set1_ps(x[i]);
    const __m512 x1 = _mm512_set1_ps(x[i + 1]);
    for (int j = 0; j < kTiles; ++j) {
      prefetch_ahead(p + j * tile_bytes);
      acc[j] = _mm512_fmadd_ps(widen(p + j * tile_bytes), x0, acc[j]);
      acc[j] = _mm512_fmadd_ps(widen(p + j * tile_bytes + kInputBytes), x1, acc[j]);
    }
  }
  if (i < k) {
    const __m512 x0 = _mm512_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      acc[j] = _mm512_fmadd_ps(widen(p + j * tile_bytes), x0, acc[j]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    if (j + 1 < kTiles || last_count == kF16WTile) {
      _mm512_storeu_ps(y + j * kF16WTile, acc[j]);
    } else {
      _mm512_mask_storeu_ps(y + j * kF16WTile, static_cast<__mmask16>((1u << last_count) - 1),
                            acc[j]);
    }
  }
}

}  // namespace

void f32_f16w_gemv_4x16_avx512f(const void* packed, size_t k, size_t n, const float* x, float* y) {
  f16w_gemv_tiles<&run_tiles<4>, &run_tiles<2>, &run_tiles<1>>(packed, k, n, x, y);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
