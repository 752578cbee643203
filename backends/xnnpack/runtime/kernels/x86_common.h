// Pieces the x86 kernel files share. Internal linkage throughout: each file is compiled with its
// own instruction set, and an inline function with external linkage could be merged across them
// by the linker (an AVX-512 copy running on an AVX2-only CPU).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_X86_COMMON_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_X86_COMMON_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// How far ahead of its loads a one-row kernel asks each stream's lines into L2: the hardware
// prefetcher alone keeps too few of a core's misses in flight. A prefetch past the weight's end
// is harmless (prefetches never fault). The distance is a measured one (docs/kernels.md).
constexpr size_t kGemvPrefetchBytes = 2048;

// Asks for the line kGemvPrefetchBytes past `p` into L2. The address is formed as an integer: it
// may lie past the end of the weight, which a prefetch may name but pointer arithmetic may not.
__attribute__((always_inline)) inline void prefetch_ahead(const void* p) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kGemvPrefetchBytes;
  _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T1);
}

// prefetch_ahead of `p` moved on by `wrap` bytes. Kernels that read several tiles side by side (a
// stream each) pass a tile's stream, near its end, the distance to the tile that stream reads next:
// kGemvPrefetchBytes past a tile's last lines is otherwise the start of its neighbour, which the
// neighbour's own stream is already reading.
__attribute__((always_inline)) inline void prefetch_wrapped(const void* p, size_t wrap) {
  prefetch_ahead(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + wrap));
}

// The wrap prefetch_wrapped takes for the line `offset` bytes into a tile of `tile_bytes`: `wrap`
// once kGemvPrefetchBytes ahead runs past the tile's end, 0 before.
__attribute__((always_inline)) inline size_t wrap_past_tile(size_t offset, size_t tile_bytes,
                                                            size_t wrap) {
  return offset + kGemvPrefetchBytes >= tile_bytes ? wrap : 0;
}

// kTiles tiles side by side (`tile` floats apart) over inputs [0, k), writing kTiles * kF32Tile
// outputs of which the last tile's first `last_count` only.
using F32TilesFn = void (*)(const float* w, size_t tile, size_t k, const float* x, float* y,
                            size_t last_count);

// Four tiles at a time, then two, then one: several streams in flight read faster than one
// (docs/kernels.md). The two-tile step matters: a slab of a weight with long rows is 32 output
// channels wide (two tiles), and one tile at a time keeps a single FMA chain and stream.
template <F32TilesFn kFour, F32TilesFn kTwo, F32TilesFn kOne>
inline void f32_gemv_tiles(const float* packed, size_t k, size_t n, const float* x, float* y) {
  const size_t tile = (k + 1) * kF32Tile;
  const size_t tiles = (n + kF32Tile - 1) / kF32Tile;
  const size_t last_count = n - (tiles - 1) * kF32Tile;
  size_t t = 0;
  for (; t + 4 <= tiles; t += 4) {
    kFour(packed + t * tile, tile, k, x, y + t * kF32Tile, t + 4 == tiles ? last_count : kF32Tile);
  }
  if (t + 2 <= tiles) {
    kTwo(packed + t * tile, tile, k, x, y + t * kF32Tile, t + 2 == tiles ? last_count : kF32Tile);
    t += 2;
  }
  if (t < tiles) kOne(packed + t * tile, tile, k, x, y + t * kF32Tile, last_count);
}

#ifdef __AVX__
// Writes a 16-output tile held in two vectors to y, or its first `count` (< 16) outputs only. A
// whole tile, nearly every one, is two stores: a memcpy of a run-time count is a call into libc per
// tile and row.
inline void store_tile16(float* y, __m256 lo, __m256 hi, size_t count) {
  if (count == 16) {
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  alignas(32) float out[16];
  _mm256_store_ps(out, lo);
  _mm256_store_ps(out + 8, hi);
  std::memcpy(y, out, count * sizeof(float));
}
#endif

#if defined(__AVX2__) && \
    (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
// VPDPBUSD on 256-bit vectors (acc + the 4-byte dots of unsigned w and signed x): AVX-VNNI's VEX
// form where the file enables AVX-VNNI, else AVX-512 VL's EVEX form, whose result is the same, so
// the AVX-VNNI blocks also run (and are tested) on AVX-512 VNNI CPUs without AVX-VNNI.
__attribute__((always_inline)) inline __m256i dpbusd_256(__m256i acc, __m256i w, __m256i x) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, w, x);
#else
  return _mm256_dpbusd_epi32(acc, w, x);
#endif
}
#endif

#ifdef __AVX512F__
// XNNPACK's clamp, min(max(v, lo), hi), as the zero-masking forms with every lane set: the same
// instructions and results, but GCC 12's plain _mm512_min_ps / _mm512_max_ps pass
// _mm512_undefined_ps() to their builtins and -Wuninitialized flags every inlined use.
inline __m512 clamp_avx512(__m512 v, __m512 lo, __m512 hi) {
  return _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, v, lo), hi);
}
#endif

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_X86_COMMON_H_
