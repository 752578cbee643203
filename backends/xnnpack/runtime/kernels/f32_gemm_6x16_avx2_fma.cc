// f32 GEMM over XNNPACK's packing, AVX2 + FMA3: blocks of up to 6 rows by 1 tile (two 8-float
// halves), 12 accumulators, the tile's two weight vectors and one broadcast input in 15 of the 16
// ymm registers, prefetching the next slab into L2 over the blocks' steps through the inputs.

#include <immintrin.h>

#include <cstring>
#include <limits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kGemmRows = 6;

struct GemmArgs {
  size_t k;
  size_t x_stride;  // Floats between rows of x.
  size_t y_stride;  // Floats between rows of y.
};

// kRows rows by one tile (XNNPACK's arithmetic per output), prefetching `lines` lines from
// `prefetch` into L2 over its steps through the inputs.
template <int kRows>
void gemm_block(const GemmArgs& a, const float* w, const float* x, float* y, size_t last_count,
                const char* prefetch, size_t lines) {
  const size_t k = a.k, xs = a.x_stride;
  __m256 acc[kRows][2];
  const __m256 bias0 = _mm256_loadu_ps(w);
  const __m256 bias1 = _mm256_loadu_ps(w + 8);
  // Unrolled so that the accumulators stay in registers (GCC keeps the loops, and so the arrays in
  // memory, otherwise).
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    acc[r][0] = bias0;
    acc[r][1] = bias1;
  }
  const size_t per_step = lines == 0 ? 0 : (lines + k - 1) / k;
  const char* prefetch_end = prefetch + lines * 64;
  const float* p = w + kF32Tile;
  for (size_t i = 0; i < k; ++i, p += kF32Tile) {
    if (prefetch < prefetch_end) {
      for (size_t l = 0; l < per_step; ++l) _mm_prefetch(prefetch + 64 * l, _MM_HINT_T1);
      prefetch += 64 * per_step;
    }
    const __m256 w0 = _mm256_loadu_ps(p);
    const __m256 w1 = _mm256_loadu_ps(p + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 xr = _mm256_broadcast_ss(x + r * xs + i);
      acc[r][0] = _mm256_fmadd_ps(w0, xr, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(w1, xr, acc[r][1]);
    }
  }
  const __m256 lo = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 hi = _mm256_set1_ps(std::numeric_limits<float>::infinity());
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    // XNNPACK's clamp, min(max(v, lo), hi): what a NaN becomes is its operand order.
    const __m256 v0 = _mm256_min_ps(_mm256_max_ps(acc[r][0], lo), hi);
    const __m256 v1 = _mm256_min_ps(_mm256_max_ps(acc[r][1], lo), hi);
    float* out = y + r * a.y_stride;
    if (last_count == kF32Tile) {
      _mm256_storeu_ps(out, v0);
      _mm256_storeu_ps(out + 8, v1);
    } else {
      float tmp[kF32Tile];
      _mm256_storeu_ps(tmp, v0);
      _mm256_storeu_ps(tmp + 8, v1);
      std::memcpy(out, tmp, last_count * sizeof(float));
    }
  }
}

using GemmBlock = void (*)(const GemmArgs&, const float*, const float*, float*, size_t, const char*,
                           size_t);

// [rows - 1] for 1..kGemmRows rows.
constexpr GemmBlock kGemmBlocks[kGemmRows] = {&gemm_block<1>, &gemm_block<2>, &gemm_block<3>,
                                              &gemm_block<4>, &gemm_block<5>, &gemm_block<6>};

}  // namespace

void f32_gemm_6x16_avx2_fma(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                            size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                            size_t prefetch_bytes) {
  const GemmArgs args{k, x_stride, y_stride};
  const size_t tile = (k + 1) * kF32Tile;
  const size_t tiles = (n + kF32Tile - 1) / kF32Tile;
  const size_t last_count = n - (tiles - 1) * kF32Tile;
  const size_t row_blocks = (rows + kGemmRows - 1) / kGemmRows;
  // The next slab's lines, shared out over every block's steps.
  const size_t lines = prefetch == nullptr ? 0 : (prefetch_bytes + 63) / 64;
  const size_t lines_per_block = (lines + row_blocks * tiles - 1) / (row_blocks * tiles);
  const char* next = static_cast<const char*>(prefetch);
  size_t issued = 0;
  for (size_t r = 0; r < rows; r += kGemmRows) {
    const size_t block_rows = rows - r < kGemmRows ? rows - r : kGemmRows;
    for (size_t t = 0; t < tiles; ++t) {
      const size_t block_lines =
          lines - issued < lines_per_block ? lines - issued : lines_per_block;
      kGemmBlocks[block_rows - 1](args, packed + t * tile, x + r * x_stride,
                                  y + r * y_stride + t * kF32Tile,
                                  t + 1 == tiles ? last_count : kF32Tile, next + issued * 64,
                                  block_lines);
      issued += block_lines;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
