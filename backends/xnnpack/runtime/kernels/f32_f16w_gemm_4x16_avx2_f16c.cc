// f32 x f16w GEMM, AVX2 + FMA3 + F16C: blocks of up to 4 rows by 1 tile (two 8-float halves);
// each input's weights are widened once per block and serve its 4 rows, and the next slab is
// prefetched into L2 over the steps.

#include <immintrin.h>

#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/f32_f16w_x86.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kGemmRows = 4;

template <int kRows>
void gemm_block(const F16WGemmArgs& a, const uint8_t* w, const float* x, float* y,
                size_t last_count, const char* prefetch, size_t lines) {
  const size_t k = a.k, xs = a.x_stride;
  const float* bias = reinterpret_cast<const float*>(w);
  __m256 acc[kRows][2];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    acc[r][0] = _mm256_loadu_ps(bias);
    acc[r][1] = _mm256_loadu_ps(bias + 8);
  }
  const size_t per_step = lines == 0 ? 0 : (lines + k - 1) / k;
  const char* prefetch_end = prefetch + lines * 64;
  const uint8_t* p = w + kF16WTile * sizeof(float);
  for (size_t i = 0; i < k; ++i, p += kF16WTile * sizeof(uint16_t)) {
    if (prefetch < prefetch_end) {
      for (size_t l = 0; l < per_step; ++l) _mm_prefetch(prefetch + 64 * l, _MM_HINT_T1);
      prefetch += 64 * per_step;
    }
    const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 xr = _mm256_set1_ps(x[r * xs + i]);
      acc[r][0] = _mm256_fmadd_ps(w0, xr, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, xr, acc[r][1]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    float* out = y + r * a.y_stride;
    if (last_count == kF16WTile) {
      _mm256_storeu_ps(out, acc[r][0]);
      _mm256_storeu_ps(out + 8, acc[r][1]);
    } else {
      float tmp[kF16WTile];
      _mm256_storeu_ps(tmp, acc[r][0]);
      _mm256_storeu_ps(tmp + 8, acc[r][1]);
      std::memcpy(out, tmp, last_count * sizeof(float));
    }
  }
}

// [rows - 1] (one tile per block).
constexpr F16WGemmBlock kBlocks[kGemmRows] = {&gemm_block<1>, &gemm_block<2>, &gemm_block<3>,
                                              &gemm_block<4>};

}  // namespace

void f32_f16w_gemm_4x16_avx2_f16c(const void* packed, size_t k, size_t n, size_t rows,
                                  const float* x, size_t x_stride, float* y, size_t y_stride,
                                  const void* prefetch, size_t prefetch_bytes) {
  f16w_gemm_blocks<kGemmRows, 1>(kBlocks, packed, k, n, rows, x, x_stride, y, y_stride, prefetch,
                                 prefetch_bytes);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
