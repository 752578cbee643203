// f32 x f16w GEMV, AVX2 + FMA3 + F16C: two 8-float halves per tile, four tiles at a time; each
// input's halves widened by VCVTPH2PS in the registers they are used from.

#include <immintrin.h>

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_x86.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kInputBytes = kF16WTile * sizeof(uint16_t);

__attribute__((always_inline)) inline __m256 widen(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int kTiles>
void run_tiles(const uint8_t* w, size_t tile_bytes, size_t k, const float* x, float* y,
               size_t last_count) {
  __m256 acc[kTiles][2];
  for (int j = 0; j < kTiles; ++j) {
    const float* bias = reinterpret_cast<const float*>(w + j * tile_bytes);
    acc[j][0] = _mm256_loadu_ps(bias);
    acc[j][1] = _mm256_loadu_ps(bias + 8);
  }
  const uint8_t* p = w + kF16WTile * sizeof(float);
  size_t i = 0;
  // Two inputs (one cache line of a tile) per step: one prefetch per line and stream.
  for (; i + 2 <= k; i += 2, p += 2 * kInputBytes) {
    const __m256 x0 = _mm256_set1_ps(x[i]);
    const __m256 x1 = _mm256_set1_ps(x[i + 1]);
    for (int j = 0; j < kTiles; ++j) {
      const uint8_t* q = p + j * tile_bytes;
      prefetch_ahead(q);
      acc[j][0] = _mm256_fmadd_ps(widen(q), x0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(widen(q + 16), x0, acc[j][1]);
      acc[j][0] = _mm256_fmadd_ps(widen(q + kInputBytes), x1, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(widen(q + kInputBytes + 16), x1, acc[j][1]);
    }
  }
  if (i < k) {
    const __m256 x0 = _mm256_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      const uint8_t* q = p + j * tile_bytes;
      acc[j][0] = _mm256_fmadd_ps(widen(q), x0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(widen(q + 16), x0, acc[j][1]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    store_tile16(y + j * kF16WTile, acc[j][0], acc[j][1], j + 1 < kTiles ? kF16WTile : last_count);
  }
}

}  // namespace

void f32_f16w_gemv_4x16_avx2_f16c(const void* packed, size_t k, size_t n, const float* x,
                                  float* y) {
  f16w_gemv_tiles<&run_tiles<4>, &run_tiles<2>, &run_tiles<1>>(packed, k, n, x, y);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
