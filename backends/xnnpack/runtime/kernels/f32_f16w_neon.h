// The aarch64 f32 x f16w kernel files' block (NEON): R rows by T tiles over every input, each
// input's 16 halves a tile widened exactly (FCVTL, FCVTL2) and fused into the rows' accumulators
// with one FMLA each, in input order from the bias, as the scalar reference does; and the walk over
// rows and tiles. Internal linkage throughout (see qs8_neon_blocks.h).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_NEON_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_NEON_H_

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// R rows (x_stride and y_stride floats apart) by T tiles (tile_bytes apart) of which the last
// tile's first `last_count` outputs are written.
template <int R, int T>
void f16w_block_neon(const uint8_t* w, size_t tile_bytes, size_t k, const float* x,
                     size_t x_stride, float* y, size_t y_stride, size_t last_count) {
  float32x4_t acc[R][T][4];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const float32x4_t bias = vreinterpretq_f32_u8(vld1q_u8(w + t * tile_bytes + 16 * v));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][t][v] = bias;
    }
  }
  const uint8_t* halves = w + kF16WTile * sizeof(float);
  for (size_t i = 0; i < k; ++i) {
    float32x4_t wv[T][4];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* p = halves + t * tile_bytes + i * kF16WTile * sizeof(uint16_t);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const float16x8_t eight = vreinterpretq_f16_u8(vld1q_u8(p + 16 * h));
        wv[t][2 * h] = vcvt_f32_f16(vget_low_f16(eight));
        wv[t][2 * h + 1] = vcvt_high_f32_f16(eight);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float32x4_t xv = vdupq_n_f32(x[r * x_stride + i]);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) acc[r][t][v] = vfmaq_f32(acc[r][t][v], wv[t][v], xv);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      float out[kF16WTile];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) vst1q_f32(out + 4 * v, acc[r][t][v]);
      const size_t count = t + 1 == T ? last_count : kF16WTile;
      std::memcpy(y + r * y_stride + t * kF16WTile, out, count * sizeof(float));
    }
  }
}

using F16WNeonBlockFn = void (*)(const uint8_t* w, size_t tile_bytes, size_t k, const float* x,
                                 size_t x_stride, float* y, size_t y_stride, size_t last_count);

// Runs blocks[rows - 1][tiles - 1] of up to kMaxRows rows by kMaxTiles tiles over every row and
// tile.
template <int kMaxRows, int kMaxTiles>
inline void f16w_run_neon(const F16WNeonBlockFn (&blocks)[kMaxRows][kMaxTiles],
                          const void* packed, size_t k, size_t n, size_t rows, const float* x,
                          size_t x_stride, float* y, size_t y_stride) {
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  const size_t tile_bytes = f16w_tile_bytes(k);
  const size_t tiles = (n + kF16WTile - 1) / kF16WTile;
  const size_t last_count = n - (tiles - 1) * kF16WTile;
  for (size_t r = 0; r < rows; r += kMaxRows) {
    const size_t block_rows = rows - r < kMaxRows ? rows - r : kMaxRows;
    for (size_t t = 0; t < tiles; t += kMaxTiles) {
      const size_t block_tiles = tiles - t < kMaxTiles ? tiles - t : kMaxTiles;
      blocks[block_rows - 1][block_tiles - 1](
          base + t * tile_bytes, tile_bytes, k, x + r * x_stride, x_stride,
          y + r * y_stride + t * kF16WTile, y_stride,
          t + block_tiles == tiles ? last_count : kF16WTile);
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_NEON_H_
