// f32 GEMV over XNNPACK's packing, AVX2 + FMA3: two 8-float halves per tile, four tiles at a time
// (XNNPACK's one-row FMA3 kernel keeps two accumulators, one tile; this one eight).

#include <immintrin.h>

#include <limits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

template <int kTiles>
void run_tiles(const float* w, size_t tile, size_t k, const float* x, float* y, size_t last_count) {
  const __m256 lo = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 hi = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 acc[kTiles][2];
  for (int j = 0; j < kTiles; ++j) {
    acc[j][0] = _mm256_loadu_ps(w + j * tile);
    acc[j][1] = _mm256_loadu_ps(w + j * tile + 8);
  }
  const float* p = w + kF32Tile;
  for (size_t i = 0; i < k; ++i, p += kF32Tile) {
    const __m256 xi = _mm256_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      prefetch_ahead(p + j * tile);
      acc[j][0] = _mm256_fmadd_ps(_mm256_loadu_ps(p + j * tile), xi, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(_mm256_loadu_ps(p + j * tile + 8), xi, acc[j][1]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    store_tile16(y + j * kF32Tile, _mm256_min_ps(_mm256_max_ps(acc[j][0], lo), hi),
                 _mm256_min_ps(_mm256_max_ps(acc[j][1], lo), hi),
                 j + 1 < kTiles ? kF32Tile : last_count);
  }
}

}  // namespace

void f32_gemv_4x16_avx2_fma(const float* packed, size_t k, size_t n, const float* x, float* y) {
  f32_gemv_tiles<&run_tiles<4>, &run_tiles<2>, &run_tiles<1>>(packed, k, n, x, y);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
