// What the x86 f32 x f16w kernel files share: the walks over a packing's tiles that pick a block
// kernel per step. Internal linkage throughout (see x86_common.h).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_X86_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_X86_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// kTiles tiles side by side (`tile_bytes` apart) over inputs [0, k), writing kTiles * kF16WTile
// outputs of which the last tile's first `last_count` only.
using F16WTilesFn = void (*)(const uint8_t* w, size_t tile_bytes, size_t k, const float* x,
                             float* y, size_t last_count);

// Four tiles at a time, then two, then one, as f32_gemv_tiles (x86_common.h).
template <F16WTilesFn kFour, F16WTilesFn kTwo, F16WTilesFn kOne>
inline void f16w_gemv_tiles(const void* packed, size_t k, size_t n, const float* x, float* y) {
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  const size_t tile_bytes = f16w_tile_bytes(k);
  const size_t tiles = (n + kF16WTile - 1) / kF16WTile;
  const size_t last_count = n - (tiles - 1) * kF16WTile;
  size_t t = 0;
  for (; t + 4 <= tiles; t += 4) {
    kFour(base + t * tile_bytes, tile_bytes, k, x, y + t * kF16WTile,
          t + 4 == tiles ? last_count : kF16WTile);
  }
  if (t + 2 <= tiles) {
    kTwo(base + t * tile_bytes, tile_bytes, k, x, y + t * kF16WTile,
         t + 2 == tiles ? last_count : kF16WTile);
    t += 2;
  }
  if (t < tiles) kOne(base + t * tile_bytes, tile_bytes, k, x, y + t * kF16WTile, last_count);
}

struct F16WGemmArgs {
  size_t k;
  size_t tile_bytes;
  size_t x_stride;  // Floats between rows of x.
  size_t y_stride;  // Floats between rows of y.
};

// A block of up to kMaxRows rows by up to kMaxTiles tiles, prefetching `lines` lines from
// `prefetch` into L2 over its steps through the inputs.
using F16WGemmBlock = void (*)(const F16WGemmArgs& a, const uint8_t* w, const float* x, float* y,
                               size_t last_count, const char* prefetch, size_t lines);

// Every block of the GEMM: blocks[(rows - 1) * kMaxTiles + tiles - 1] runs `rows` rows by `tiles`
// tiles. The next slab's lines are shared out over every block's steps, as the f32 GEMM does.
template <size_t kMaxRows, size_t kMaxTiles>
inline void f16w_gemm_blocks(const F16WGemmBlock* blocks, const void* packed, size_t k, size_t n,
                             size_t rows, const float* x, size_t x_stride, float* y,
                             size_t y_stride, const void* prefetch, size_t prefetch_bytes) {
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  const F16WGemmArgs args{k, f16w_tile_bytes(k), x_stride, y_stride};
  const size_t tiles = (n + kF16WTile - 1) / kF16WTile;
  const size_t last_count = n - (tiles - 1) * kF16WTile;
  const size_t row_blocks = (rows + kMaxRows - 1) / kMaxRows;
  const size_t tile_blocks = (tiles + kMaxTiles - 1) / kMaxTiles;
  const size_t lines = prefetch == nullptr ? 0 : (prefetch_bytes + 63) / 64;
  const size_t block_count = row_blocks * tile_blocks;
  const size_t lines_per_block = block_count == 0 ? 0 : (lines + block_count - 1) / block_count;
  const char* next = static_cast<const char*>(prefetch);
  size_t issued = 0;
  for (size_t r = 0; r < rows; r += kMaxRows) {
    const size_t block_rows = rows - r < kMaxRows ? rows - r : kMaxRows;
    for (size_t t = 0; t < tiles; t += kMaxTiles) {
      const size_t block_tiles = tiles - t < kMaxTiles ? tiles - t : kMaxTiles;
      const size_t block_lines =
          lines - issued < lines_per_block ? lines - issued : lines_per_block;
      blocks[(block_rows - 1) * kMaxTiles + block_tiles - 1](
          args, base + t * args.tile_bytes, x + r * x_stride, y + r * y_stride + t * kF16WTile,
          t + block_tiles == tiles ? last_count : kF16WTile, next + issued * 64, block_lines);
      issued += block_lines;
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_F16W_X86_H_
