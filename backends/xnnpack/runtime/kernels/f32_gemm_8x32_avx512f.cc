// f32 GEMM over XNNPACK's packing, AVX-512F: blocks of up to 8 rows by 2 tiles, prefetching the
// next slab into L2 over the blocks' steps through the inputs (XNNPACK's kernel can only be
// preceded by such a read, never overlapped with it).

#include <immintrin.h>

#include <limits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr int kGemmRows = 8;

struct GemmArgs {
  size_t k;
  size_t x_stride;  // Floats between rows of x.
  size_t y_stride;  // Floats between rows of y.
};

// kRows rows by kTiles tiles (XNNPACK's arithmetic per output), prefetching `lines` lines from
// `prefetch` into L2 over its steps through the inputs.
template <int kRows, int kTiles>
void gemm_block(const GemmArgs& a, const float* w, const float* x, float* y, size_t last_count,
                const char* prefetch, size_t lines) {
  const __m512 lo = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 hi = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const size_t k = a.k, xs = a.x_stride;
  const size_t tile = (k + 1) * kF32Tile;
  __m512 acc[kRows][kTiles];
  // Unrolled so that the accumulators stay in registers (GCC keeps the loops, and so the arrays in
  // memory, otherwise).
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const __m512 bias = _mm512_loadu_ps(w + t * tile);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r][t] = bias;
  }
  const size_t per_step = lines == 0 ? 0 : (lines + k - 1) / k;
  const char* prefetch_end = prefetch + lines * 64;
  const float* p = w + kF32Tile;
  for (size_t i = 0; i < k; ++i, p += kF32Tile) {
    if (prefetch < prefetch_end) {
      for (size_t l = 0; l < per_step; ++l) _mm_prefetch(prefetch + 64 * l, _MM_HINT_T1);
      prefetch += 64 * per_step;
    }
    __m512 wv[kTiles];
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) wv[t] = _mm512_loadu_ps(p + t * tile);
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
      const __m512 v = clamp_avx512(acc[r][t], lo, hi);
      float* out = y + r * a.y_stride + t * kF32Tile;
      if (t + 1 < kTiles || last_count == kF32Tile) {
        _mm512_storeu_ps(out, v);
      } else {
        _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << last_count) - 1), v);
      }
    }
  }
}

using GemmBlock = void (*)(const GemmArgs&, const float*, const float*, float*, size_t, const char*,
                           size_t);

// [rows - 1][tiles - 1] for 1..kGemmRows rows and 1..2 tiles.
template <int kRows>
constexpr GemmBlock kBlocks[2] = {&gemm_block<kRows, 1>, &gemm_block<kRows, 2>};
const GemmBlock* const kGemmBlocks[kGemmRows] = {kBlocks<1>, kBlocks<2>, kBlocks<3>, kBlocks<4>,
                                                 kBlocks<5>, kBlocks<6>, kBlocks<7>, kBlocks<8>};

}  // namespace

void f32_gemm_8x32_avx512f(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                           size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                           size_t prefetch_bytes) {
  const GemmArgs args{k, x_stride, y_stride};
  const size_t tile = (k + 1) * kF32Tile;
  const size_t tiles = (n + kF32Tile - 1) / kF32Tile;
  const size_t last_count = n - (tiles - 1) * kF32Tile;
  const size_t row_blocks = (rows + kGemmRows - 1) / kGemmRows;
  const size_t tile_blocks = (tiles + 1) / 2;
  // The next slab's lines, shared out over every block's steps.
  const size_t lines = prefetch == nullptr ? 0 : (prefetch_bytes + 63) / 64;
  const size_t lines_per_block =
      (lines + row_blocks * tile_blocks - 1) / (row_blocks * tile_blocks);
  const char* next = static_cast<const char*>(prefetch);
  size_t issued = 0;
  for (size_t r = 0; r < rows; r += kGemmRows) {
    const size_t block_rows = rows - r < kGemmRows ? rows - r : kGemmRows;
    for (size_t t = 0; t < tiles; t += 2) {
      const size_t block_tiles = tiles - t < 2 ? tiles - t : 2;
      const size_t block_lines =
          lines - issued < lines_per_block ? lines - issued : lines_per_block;
      kGemmBlocks[block_rows - 1][block_tiles - 1](
          args, packed + t * tile, x + r * x_stride, y + r * y_stride + t * kF32Tile,
          t + block_tiles == tiles ? last_count : kF32Tile, next + issued * 64, block_lines);
      issued += block_lines;
    }
  }
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
