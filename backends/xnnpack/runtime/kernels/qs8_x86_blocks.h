// The int8 integer dot's register blocks for x86, shared by the GEMV and GEMM files of one
// instruction set, and the loop that runs a table of them over rows and tiles. Internal linkage
// throughout, as x86_common.h explains; each block is compiled only where its file's copts enable
// its instructions.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_X86_BLOCKS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_X86_BLOCKS_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// kRows rows by kTiles tiles (tile_bytes apart, from the tile at `w`) over kp inputs; the last
// tile writes its first `last_count` channels only.
using QS8BlockFn = void (*)(const uint8_t* w, size_t tile_bytes, size_t kp, const int8_t* q,
                            size_t q_stride, int32_t* acc, size_t acc_stride, size_t last_count);

// The 4 activation bytes of inputs [i, i + 4) of a row, as one 32-bit lane.
inline int32_t four_bytes(const int8_t* q) {
  int32_t b;
  std::memcpy(&b, q, sizeof(b));
  return b;
}

// Runs blocks of up to kMaxRows rows by kMaxTiles tiles over every row and tile.
template <int kMaxRows, int kMaxTiles>
inline void qs8_run_blocks(const QS8BlockFn (&blocks)[kMaxRows][kMaxTiles], const void* packed,
                           size_t k, size_t n, size_t rows, const int8_t* q, size_t q_stride,
                           int32_t* acc, size_t acc_stride) {
  const uint8_t* w = static_cast<const uint8_t*>(packed);
  const size_t tile_bytes = qc8_tile_bytes(k);
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t last_count = n - (tiles - 1) * kQC8Tile;
  for (size_t r = 0; r < rows; r += kMaxRows) {
    const size_t block_rows = rows - r < kMaxRows ? rows - r : kMaxRows;
    for (size_t t = 0; t < tiles; t += kMaxTiles) {
      const size_t block_tiles = tiles - t < kMaxTiles ? tiles - t : kMaxTiles;
      blocks[block_rows - 1][block_tiles - 1](w + t * tile_bytes, tile_bytes, qc8_padded_k(k),
                                              q + r * q_stride, q_stride,
                                              acc + r * acc_stride + t * kQC8Tile, acc_stride,
                                              t + block_tiles == tiles ? last_count : kQC8Tile);
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
// The zero-masking forms with every lane set stand for the plain ones (same instruction and
// result): GCC 12's plain forms pass an undefined vector to their builtins, which -Wuninitialized
// flags at every inlined use.
// VPDPBUSD multiplies unsigned by signed bytes: the activations go in as q + 128 (their sign bit
// flipped), and 128 x the channel's weight sum (in the tile's header) comes off at the end, so the
// accumulators are exactly sum(q * w).
template <int kRows, int kTiles, bool kPrefetch>
void qs8_block_avx512vnni(const uint8_t* w, size_t tile_bytes, size_t kp, const int8_t* q,
                          size_t q_stride, int32_t* acc, size_t acc_stride, size_t last_count) {
  __m512i a[kRows][kTiles];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) a[r][t] = _mm512_setzero_si512();
  }
  const __m512i flip = _mm512_set1_epi32(static_cast<int32_t>(0x80808080u));
  const uint8_t* p = w + kQC8HeaderBytes;
  for (size_t i = 0; i < kp; i += kQC8KBlock, p += kQC8Tile * kQC8KBlock) {
    __m512i wv[kTiles];
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) {
      if (kPrefetch) prefetch_ahead(p + t * tile_bytes);
      wv[t] = _mm512_loadu_si512(p + t * tile_bytes);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i xv =
          _mm512_xor_si512(_mm512_set1_epi32(four_bytes(q + r * q_stride + i)), flip);
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) a[r][t] = _mm512_dpbusd_epi32(a[r][t], xv, wv[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const __m512i offset =
        _mm512_maskz_slli_epi32(0xFFFF, _mm512_loadu_si512(w + t * tile_bytes), 7);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i v = _mm512_sub_epi32(a[r][t], offset);
      int32_t* out = acc + r * acc_stride + t * kQC8Tile;
      if (t + 1 < kTiles || last_count == kQC8Tile) {
        _mm512_storeu_si512(out, v);
      } else {
        _mm512_mask_storeu_epi32(out, static_cast<__mmask16>((1u << last_count) - 1), v);
      }
    }
  }
}
#endif

#if defined(__AVX2__)
// The blocks on 256-bit vectors: each tile's 16 channels are two halves (channels 0-7 and 8-15 of a
// group are its first and second 32 bytes), and `Dot` is how 4 activation bytes meet 4 weight
// bytes per lane.
template <typename Dot, int kRows, int kTiles, bool kPrefetch>
void qs8_block_256(const uint8_t* w, size_t tile_bytes, size_t kp, const int8_t* q, size_t q_stride,
                   int32_t* acc, size_t acc_stride, size_t last_count) {
  __m256i a[kRows][kTiles][2];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) a[r][t][0] = a[r][t][1] = _mm256_setzero_si256();
  }
  const uint8_t* p = w + kQC8HeaderBytes;
  for (size_t i = 0; i < kp; i += kQC8KBlock, p += kQC8Tile * kQC8KBlock) {
    __m256i wv[kTiles][2];
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) {
      if (kPrefetch) prefetch_ahead(p + t * tile_bytes);
      wv[t][0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + t * tile_bytes));
      wv[t][1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + t * tile_bytes + 32));
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const typename Dot::Activations x = Dot::activations(four_bytes(q + r * q_stride + i));
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) a[r][t][h] = Dot::accumulate(a[r][t][h], x, wv[t][h]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const __m256i* sums = reinterpret_cast<const __m256i*>(w + t * tile_bytes);
    const __m256i offset[2] = {Dot::offset(_mm256_loadu_si256(sums)),
                               Dot::offset(_mm256_loadu_si256(sums + 1))};
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m256i lo = _mm256_sub_epi32(a[r][t][0], offset[0]);
      const __m256i hi = _mm256_sub_epi32(a[r][t][1], offset[1]);
      int32_t* out = acc + r * acc_stride + t * kQC8Tile;
      if (t + 1 < kTiles || last_count == kQC8Tile) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), hi);
      } else {
        int32_t tmp[kQC8Tile];
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tmp), lo);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tmp + 8), hi);
        std::memcpy(out, tmp, last_count * sizeof(int32_t));
      }
    }
  }
}

// One row by four tiles (four streams in flight), and up to four rows by one tile (eight of the
// sixteen registers accumulate).
template <typename Dot>
inline void qs8_gemv_256(const void* packed, size_t k, size_t n, const int8_t* q, int32_t* acc) {
  static const QS8BlockFn kBlocks[1][4] = {
      {&qs8_block_256<Dot, 1, 1, true>, &qs8_block_256<Dot, 1, 2, true>,
       &qs8_block_256<Dot, 1, 3, true>, &qs8_block_256<Dot, 1, 4, true>}};
  qs8_run_blocks(kBlocks, packed, k, n, /*rows=*/1, q, qc8_padded_k(k), acc, n);
}

template <typename Dot>
inline void qs8_gemm_256(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                         size_t q_stride, int32_t* acc, size_t acc_stride) {
  static const QS8BlockFn kBlocks[4][1] = {{&qs8_block_256<Dot, 1, 1, false>},
                                           {&qs8_block_256<Dot, 2, 1, false>},
                                           {&qs8_block_256<Dot, 3, 1, false>},
                                           {&qs8_block_256<Dot, 4, 1, false>}};
  qs8_run_blocks(kBlocks, packed, k, n, rows, q, q_stride, acc, acc_stride);
}

// AVX2: VPMADDUBSW multiplies unsigned by signed bytes and saturates its 16-bit pair sums: |q|
// times w with q's sign moved onto w (VPSIGNB) keeps every pair within 2 x 127 x 127 < 32767, so
// nothing saturates and VPMADDWD's 32-bit sums are exact, with nothing to take off.
struct Avx2Dot {
  struct Activations {
    __m256i q, abs_q;
  };
  static Activations activations(int32_t four) {
    const __m256i q = _mm256_set1_epi32(four);
    return {q, _mm256_abs_epi8(q)};
  }
  static __m256i accumulate(__m256i acc, const Activations& x, __m256i w) {
    const __m256i pairs = _mm256_maddubs_epi16(x.abs_q, _mm256_sign_epi8(w, x.q));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static __m256i offset(__m256i) { return _mm256_setzero_si256(); }
};
#endif

#if defined(__AVX2__) && \
    (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
// VNNI on 256-bit vectors, as the AVX-512 VNNI block: q + 128 in (its sign bit flipped), 128 x the
// channel's weight sum off at the end. VPDPBUSD is AVX-VNNI's VEX form where the file enables
// AVX-VNNI, else AVX-512 VL's EVEX form of the same instruction, with the same result, so these
// blocks also run (and are tested) on AVX-512 VNNI CPUs without AVX-VNNI.
struct Vnni256Dot {
  using Activations = __m256i;
  static Activations activations(int32_t four) {
    return _mm256_xor_si256(_mm256_set1_epi32(four),
                            _mm256_set1_epi32(static_cast<int32_t>(0x80808080u)));
  }
  static __m256i accumulate(__m256i acc, Activations x, __m256i w) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, x, w);
#else
    return _mm256_dpbusd_epi32(acc, x, w);
#endif
  }
  static __m256i offset(__m256i weight_sums) { return _mm256_slli_epi32(weight_sums, 7); }
};
#endif

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_X86_BLOCKS_H_
