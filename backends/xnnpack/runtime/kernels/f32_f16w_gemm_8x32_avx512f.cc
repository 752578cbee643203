// f32 x f16w GEMM, AVX-512F: blocks of up to 8 rows by 2 tiles; each input's weights are widened
// once per block and serve its 8 rows, and the next slab is prefetched into L2 over the steps.

#include <immintrin.h>

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_x86.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kGemmRows = 8;
constexpr size_t kGemmTiles = 2;

// VCVTPH2PS of 16 halves, as the zero-masking form with every lane set: the same instruction, but
// GCC 12's plain _mm512_cvtph_ps passes _mm512_undefined_ps() to its builtin and -Wuninitialized
// flags every inlined use (as clamp_avx512 in x86_common.h says of min and max).
__attribute__((always_inline)) inline __m512 widen(const uint8_t* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int kRows, int kTiles>
void gemm_block(const F16WGemmArgs& a, const uint8_t* w, const float* x, float* y,
                size_t last_count, const char* prefetch, size_t lines) {
  const size_t k = a.k, xs = a.x_stride, tb = a.tile_bytes;
  __m512 acc[kRows][kTiles];
  // Unrolled so that the accumulators stay in registers.
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const __m512 bias = _mm512_loadu_ps(reinterpret_cast<const float*>(w + t * tb));
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r][t] = bias;
  }
  const size_t per_step = lines == 0 ? 0 : (lines + k - 1) / k;
  const char* prefetch_end = prefetch + lines * 64;
  const uint8_t* p = w + kF16WTile * sizeof(float);
  for (size_t i = 0; i < k; ++i, p += kF16WTile * sizeof(uint16_t)) {
    if (prefetch < prefetch_end) {
      for (size_t l = 0; l < per_step; ++l) _mm_prefetch(prefetch + 64 * l, _MM_HINT_T1);
      prefetch += 64 * per_step;
    }
    __m512 wv[kTiles];
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) wv[t] = widen(p + t * tb);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * xs + i]);
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) acc[r][t] = _mm512_fmadd_ps(wv[t], xr, acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) {
      float* out = y + r * a.y_stride + t * kF16WTile;
      if (t + 1 < kTiles || last_count == kF16WTile) {
        _mm512_storeu_ps(out, acc[r][t]);
      } else {
        _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << last_count) - 1), acc[r][t]);
      }
    }
  }
}

// [(rows - 1) * kGemmTiles + tiles - 1].
constexpr F16WGemmBlock kBlocks[kGemmRows * kGemmTiles] = {
    &gemm_block<1, 1>, &gemm_block<1, 2>, &gemm_block<2, 1>, &gemm_block<2, 2>,
    &gemm_block<3, 1>, &gemm_block<3, 2>, &gemm_block<4, 1>, &gemm_block<4, 2>,
    &gemm_block<5, 1>, &gemm_block<5, 2>, &gemm_block<6, 1>, &gemm_block<6, 2>,
    &gemm_block<7, 1>, &gemm_block<7, 2>, &gemm_block<8, 1>, &gemm_block<8, 2>};

}  // namespace

void f32_f16w_gemm_8x32_avx512f(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                                size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                                size_t prefetch_bytes) {
  f16w_gemm_blocks<kGemmRows, kGemmTiles>(kBlocks, packed, k, n, rows, x, x_stride, y, y_stride,
                                          prefetch, prefetch_bytes);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
