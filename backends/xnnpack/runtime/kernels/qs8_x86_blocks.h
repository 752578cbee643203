// The int8 fully connected's register blocks for x86, shared by the GEMV and GEMM files of one
// instruction set, and the loop that runs a table of them over rows and tiles. Internal linkage
// throughout, as x86_common.h explains; each block is compiled only where its file's copts enable
// its instructions.
//
// Every block follows kernels.h's order: per activation block of kActBlock inputs (8 groups of
// 4), an exact int32 dot per row and channel, converted to float once and fused into the row's
// float accumulator with the block's scale (qb8w: times the weights' block scale); at the end
// fma(acc, w_scale, bias) (qb8w: w_scale is 1). qb5w runs qb8w's blocks over its own bytes: each
// group of 5-bit weights is rebuilt in registers as the 64 bytes qb8w stores (w + 128), so the dot
// products, the order of float operations and the bits are qb8w's.

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

// Every block here takes the stored weights as w + 128 (VNNI's unsigned operand).
static_assert(kQC8WeightOffset == 128, "x86 packs qc8w and qb8w weights as w + 128");

// What a block reads and writes: tiles from `w` (`tile_bytes` apart), rows of q from `q` and of
// scales and sums from `x_scales` and `x_sums` (`blocks` apart), outputs at y (channel 0 of the
// first tile) of which the last tile's first `last_count`.
struct QS8Args {
  const uint8_t* w;
  size_t tile_bytes, blocks;
  const int8_t* q;
  size_t q_stride;
  const float* x_scales;
  const int32_t* x_sums;
  float* y;
  size_t y_stride, last_count;
  // Added to a prefetch address that runs past the end of its tile, so that it lands in the tile
  // this one's stream reads next (kTiles tiles on; x86_common.h's prefetch_wrapped): 0 when no
  // chunk of as many tiles follows.
  size_t prefetch_wrap;
};

// Asks for the line kGemvPrefetchBytes ahead of `line` (`offset` bytes into its tile) for a block
// of kTiles tiles, moved on by QS8Args::prefetch_wrap when that runs past the tile's end. A block
// of one tile never has a wrap (qs8_run_blocks gives one only to a chunk of two or more tiles
// followed by another as wide) and takes the plain prefetch: the offset's arithmetic per group made
// the register-starved 256-bit one-tile blocks (the AVX2 and AVX-VNNI GEMMs) spill.
template <int kTiles>
__attribute__((always_inline)) inline void qs8_prefetch(const QS8Args& a, const uint8_t* line,
                                                        size_t offset) {
  if constexpr (kTiles == 1) {
    prefetch_ahead(line);
  } else {
    prefetch_wrapped(line, wrap_past_tile(offset, a.tile_bytes, a.prefetch_wrap));
  }
}

// kRows rows by kTiles tiles.
using QS8BlockFn = void (*)(const QS8Args& a);

// Where a tile's weight scales are (kernels.h): one per channel in the header (qc8w, whose groups
// follow the header in order), or one float16 per channel and block after each pair of blocks
// (qb8w; qb5w, whose blocks hold 5-bit weights as nibbles and fifth bits).
enum class QS8Scales { kPerChannel, kPerBlock, kPerBlockInt5 };

// Where block b's groups (qb5w: its nibbles) start in the tile at w.
template <QS8Scales kScales>
inline const uint8_t* qs8_block_at(const uint8_t* w, size_t b) {
  if (kScales == QS8Scales::kPerBlockInt5) return w + qb5_block_offset(b);
  return kScales == QS8Scales::kPerBlock ? w + qb8_block_offset(b)
                                         : w + kQC8HeaderBytes + b * kActBlock * kQC8Tile;
}

// Where block b's 16 float16 scales start within a tile (the block-scale layouts).
template <QS8Scales kScales>
constexpr size_t qs8_scales_at(size_t b) {
  return kScales == QS8Scales::kPerBlockInt5 ? qb5_scales_offset(b) : qb8_scales_offset(b);
}

// The bytes a block's group g advances by, for prefetching one weight stream.
template <QS8Scales kScales>
constexpr size_t qs8_group_stride() {
  return kScales == QS8Scales::kPerBlockInt5 ? kQB5BlockBytes / (kActBlock / kQC8KBlock)
                                             : kQC8Tile * kQC8KBlock;
}

// The 4 activation bytes of inputs [i, i + 4) of a row, as one 32-bit lane.
inline int32_t four_bytes(const int8_t* q) {
  int32_t b;
  std::memcpy(&b, q, sizeof(b));
  return b;
}

// Groups of 4 inputs in an activation block.
constexpr int kQS8GroupsPerBlock = static_cast<int>(kActBlock / kQC8KBlock);

// Runs blocks of up to kMaxRows rows by kMaxTiles tiles over every row and tile.
template <int kMaxRows, int kMaxTiles>
inline void qs8_run_blocks(const QS8BlockFn (&blocks)[kMaxRows][kMaxTiles], const void* packed,
                           size_t tile_bytes, size_t k, size_t n, size_t rows, const int8_t* q,
                           size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                           size_t y_stride) {
  const uint8_t* w = static_cast<const uint8_t*>(packed);
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t last_count = n - (tiles - 1) * kQC8Tile;
  const size_t nb = act_blocks(k);
  for (size_t r = 0; r < rows; r += kMaxRows) {
    const size_t block_rows = rows - r < kMaxRows ? rows - r : kMaxRows;
    for (size_t t = 0; t < tiles; t += kMaxTiles) {
      const size_t block_tiles = tiles - t < kMaxTiles ? tiles - t : kMaxTiles;
      const QS8Args args{w + t * tile_bytes,
                         tile_bytes,
                         nb,
                         q + r * q_stride,
                         q_stride,
                         x_scales + r * nb,
                         x_sums + r * nb,
                         y + r * y_stride + t * kQC8Tile,
                         y_stride,
                         t + block_tiles == tiles ? last_count : kQC8Tile,
                         t + 2 * kMaxTiles <= tiles ? (kMaxTiles - 1) * tile_bytes : 0};
      blocks[block_rows - 1][block_tiles - 1](args);
    }
  }
}

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
// Group g of the block whose bytes start at p, as qb8w's 64 stored bytes (w + 128). qb5w's: the
// group's nibbles (the high ones for groups 4-7) or'd with 0x80 where its fifth bit is set, 0x70
// where not: u & 15 | (u >= 16 ? 0x80 : 0x70) is u - 16 + 128.
template <QS8Scales kScales>
__attribute__((always_inline)) inline __m512i qs8_group_512(const uint8_t* p, int g) {
  if constexpr (kScales != QS8Scales::kPerBlockInt5) {
    return _mm512_loadu_si512(p + g * kQC8Tile * kQC8KBlock);
  } else {
    __m512i nibbles = _mm512_loadu_si512(p + g % 4 * 64);
    if (g >= 4) nibbles = _mm512_srli_epi16(nibbles, 4);
    const __mmask64 fifth = _mm512_test_epi8_mask(_mm512_loadu_si512(p + kQB5NibbleBytes),
                                                  _mm512_set1_epi8(static_cast<char>(1 << g)));
    const __m512i high = _mm512_mask_blend_epi8(fifth, _mm512_set1_epi8(0x70),
                                                _mm512_set1_epi8(static_cast<char>(0x80)));
    // (nibbles & 0x0F) | high.
    return _mm512_ternarylogic_epi32(nibbles, _mm512_set1_epi8(0x0F), high, 0xEA);
  }
}

// The zero-masking forms with every lane set stand for the plain ones (same instruction and
// result): GCC 12's plain forms pass an undefined vector to their builtins, which -Wuninitialized
// flags at every inlined use.
// VPDPBUSD multiplies unsigned by signed bytes: the weights are stored + 128, the activations go
// in as they are, and each block's dot starts from -128 x the block's activation sum, so it ends
// exactly sum(q * w).
template <int kRows, int kTiles, bool kPrefetch, QS8Scales kScales = QS8Scales::kPerChannel>
void qs8_block_avx512vnni(const QS8Args& a) {
  __m512 f[kRows][kTiles];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) f[r][t] = _mm512_setzero_ps();
  }
  for (size_t b = 0; b < a.blocks; ++b) {
    const uint8_t* p = qs8_block_at<kScales>(a.w, b);
    __m512i acc[kRows][kTiles];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i start = _mm512_set1_epi32(-128 * a.x_sums[r * a.blocks + b]);
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) acc[r][t] = start;
    }
#pragma GCC unroll 8
    for (int g = 0; g < kQS8GroupsPerBlock; ++g) {
      __m512i wv[kTiles];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        if (kPrefetch) {
          const size_t offset = static_cast<size_t>(p - a.w) + g * qs8_group_stride<kScales>();
          qs8_prefetch<kTiles>(a, a.w + t * a.tile_bytes + offset, offset);
        }
        wv[t] = qs8_group_512<kScales>(p + t * a.tile_bytes, g);
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512i xv =
            _mm512_set1_epi32(four_bytes(a.q + r * a.q_stride + b * kActBlock + g * kQC8KBlock));
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], wv[t], xv);
      }
    }
    if constexpr (kScales != QS8Scales::kPerChannel) {
      __m512 ws[kTiles];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        const uint8_t* scales = a.w + t * a.tile_bytes + qs8_scales_at<kScales>(b);
        ws[t] = _mm512_maskz_cvtph_ps(
            0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512 xs = _mm512_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
          f[r][t] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, acc[r][t]),
                                    _mm512_maskz_mul_ps(0xFFFF, xs, ws[t]), f[r][t]);
        }
      }
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512 xs = _mm512_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
          f[r][t] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, acc[r][t]), xs, f[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const float* header = reinterpret_cast<const float*>(a.w + t * a.tile_bytes);
    const __m512 scale = _mm512_loadu_ps(header);
    const __m512 bias = _mm512_loadu_ps(header + kQC8Tile);
    const __mmask16 keep = t + 1 == kTiles ? static_cast<__mmask16>((1u << a.last_count) - 1)
                                           : static_cast<__mmask16>(0xFFFF);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      _mm512_mask_storeu_ps(a.y + r * a.y_stride + t * kQC8Tile, keep,
                            _mm512_fmadd_ps(f[r][t], scale, bias));
    }
  }
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// Half h (channels 8h to 8h + 7) of group g of the block whose bytes start at p, as qb8w's 32
// stored bytes (w + 128); qb5w's rebuilt as qs8_group_512 does.
template <QS8Scales kScales>
__attribute__((always_inline)) inline __m256i qs8_group_256(const uint8_t* p, int g, int h) {
  if constexpr (kScales != QS8Scales::kPerBlockInt5) {
    const uint8_t* group = p + g * kQC8Tile * kQC8KBlock + 32 * h;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group));
  } else {
    __m256i nibbles =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + g % 4 * 64 + 32 * h));
    if (g >= 4) nibbles = _mm256_srli_epi16(nibbles, 4);
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << g));
    const __m256i bits =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kQB5NibbleBytes + 32 * h));
    const __m256i fifth = _mm256_cmpeq_epi8(_mm256_and_si256(bits, bit), bit);
    const __m256i high = _mm256_blendv_epi8(_mm256_set1_epi8(0x70),
                                            _mm256_set1_epi8(static_cast<char>(0x80)), fifth);
    return _mm256_or_si256(_mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)), high);
  }
}

// The blocks on 256-bit vectors: each tile's 16 channels are two halves (channels 0-7 and 8-15 of a
// group are its first and second 32 bytes), and `Dot` is how 4 activation bytes meet 4 weight
// bytes per lane: `weights` makes the loaded bytes its operand, `start` a block's first value.
template <typename Dot, int kRows, int kTiles, bool kPrefetch, QS8Scales kScales>
void qs8_block_256(const QS8Args& a) {
  __m256 f[kRows][kTiles][2];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTiles; ++t) f[r][t][0] = f[r][t][1] = _mm256_setzero_ps();
  }
  for (size_t b = 0; b < a.blocks; ++b) {
    const uint8_t* p = qs8_block_at<kScales>(a.w, b);
    __m256i acc[kRows][kTiles][2];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m256i start = Dot::start(a.x_sums[r * a.blocks + b]);
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) acc[r][t][0] = acc[r][t][1] = start;
    }
    // The block's activation magnitudes, once per row rather than once per group and row.
    alignas(32) int8_t magnitudes[kRows][kActBlock];
    if constexpr (Dot::kMagnitudes) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m256i q = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(a.q + r * a.q_stride + b * kActBlock));
        _mm256_store_si256(reinterpret_cast<__m256i*>(magnitudes[r]), _mm256_abs_epi8(q));
      }
    }
    // Unrolled by two only: fully unrolled, GCC reassociates the block's integer adds (AVX2's
    // VPADDD after VPMADDWD) into a tree whose partial sums spill.
#pragma GCC unroll 2
    for (int g = 0; g < kQS8GroupsPerBlock; ++g) {
      __m256i wv[kTiles][2];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
        if (kPrefetch) {
          const size_t offset = static_cast<size_t>(p - a.w) + g * qs8_group_stride<kScales>();
          qs8_prefetch<kTiles>(a, a.w + t * a.tile_bytes + offset, offset);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          wv[t][h] = Dot::weights(qs8_group_256<kScales>(p + t * a.tile_bytes, g, h));
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const typename Dot::Activations x =
            Dot::activations(four_bytes(a.q + r * a.q_stride + b * kActBlock + g * kQC8KBlock),
                             Dot::kMagnitudes ? four_bytes(magnitudes[r] + g * kQC8KBlock) : 0);
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) acc[r][t][h] = Dot::accumulate(acc[r][t][h], x, wv[t][h]);
        }
      }
    }
    if constexpr (kScales != QS8Scales::kPerChannel) {
#if defined(__F16C__)
      __m256 ws[kTiles][2];
#pragma GCC unroll 8
      for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          ws[t][h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
              a.w + t * a.tile_bytes + qs8_scales_at<kScales>(b) + 16 * h)));
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m256 xs = _mm256_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            f[r][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][t][h]),
                                         _mm256_mul_ps(xs, ws[t][h]), f[r][t][h]);
          }
        }
      }
#else
      static_assert(kScales == QS8Scales::kPerChannel, "the block-scale layouts need F16C");
#endif
    } else {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m256 xs = _mm256_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
        for (int t = 0; t < kTiles; ++t) {
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            f[r][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][t][h]), xs, f[r][t][h]);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTiles; ++t) {
    const float* header = reinterpret_cast<const float*>(a.w + t * a.tile_bytes);
    const size_t count = t + 1 == kTiles ? a.last_count : kQC8Tile;
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      store_tile16(a.y + r * a.y_stride + t * kQC8Tile,
                   _mm256_fmadd_ps(f[r][t][0], _mm256_loadu_ps(header),
                                   _mm256_loadu_ps(header + kQC8Tile)),
                   _mm256_fmadd_ps(f[r][t][1], _mm256_loadu_ps(header + 8),
                                   _mm256_loadu_ps(header + kQC8Tile + 8)),
                   count);
    }
  }
}

// The bytes of one tile of a layout.
template <QS8Scales kScales>
constexpr size_t qs8_tile_bytes(size_t k) {
  if (kScales == QS8Scales::kPerBlockInt5) return qb5_tile_bytes(k);
  return kScales == QS8Scales::kPerBlock ? qb8_tile_bytes(k) : qc8_tile_bytes(k);
}

// One row by four tiles (four streams in flight), and up to four rows by one tile.
template <typename Dot, QS8Scales kScales = QS8Scales::kPerChannel>
inline void qs8_gemv_256(const void* packed, size_t k, size_t n, const int8_t* q,
                         const float* x_scales, const int32_t* x_sums, float* y) {
  static const QS8BlockFn kBlocks[1][4] = {
      {&qs8_block_256<Dot, 1, 1, true, kScales>, &qs8_block_256<Dot, 1, 2, true, kScales>,
       &qs8_block_256<Dot, 1, 3, true, kScales>, &qs8_block_256<Dot, 1, 4, true, kScales>}};
  qs8_run_blocks(kBlocks, packed, qs8_tile_bytes<kScales>(k), k, n, /*rows=*/1, q,
                 qc8_padded_k(k), x_scales, x_sums, y, n);
}

// Up to four rows by one tile, prefetching as the GEMV: the first pass over a slab streams it from
// memory (a decode step of up to four rows makes no other), the later ones find it in L2.
template <typename Dot, QS8Scales kScales = QS8Scales::kPerChannel>
inline void qs8_gemm_256(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                         size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                         size_t y_stride) {
  static const QS8BlockFn kBlocks[4][1] = {{&qs8_block_256<Dot, 1, 1, true, kScales>},
                                           {&qs8_block_256<Dot, 2, 1, true, kScales>},
                                           {&qs8_block_256<Dot, 3, 1, true, kScales>},
                                           {&qs8_block_256<Dot, 4, 1, true, kScales>}};
  qs8_run_blocks(kBlocks, packed, qs8_tile_bytes<kScales>(k), k, n, rows, q, q_stride, x_scales,
                 x_sums, y, y_stride);
}

// AVX2: VPMADDUBSW multiplies unsigned by signed bytes and saturates its 16-bit pair sums, so the
// stored w + 128 cannot go in as it is (2 x 255 x 127 > 32767). The weights are made signed again
// (the sign bit flipped back) and multiplied as |q| times w with q's sign moved onto w (VPSIGNB,
// the sign trick ggml uses): every pair is then at most 2 x 127 x 127 < 32767 in magnitude, so
// nothing saturates, VPMADDWD's 32-bit sums are the exact dot, and there is nothing to take off.
struct Avx2Dot {
  struct Activations {
    __m256i q, abs_q;
  };
  static __m256i weights(__m256i stored) {
    return _mm256_xor_si256(stored, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static constexpr bool kMagnitudes = true;  // activations() takes |q| as well
  static __m256i start(int32_t) { return _mm256_setzero_si256(); }
  static Activations activations(int32_t four, int32_t magnitudes) {
    return {_mm256_set1_epi32(four), _mm256_set1_epi32(magnitudes)};
  }
  static __m256i accumulate(__m256i acc, const Activations& x, __m256i w) {
    const __m256i pairs = _mm256_maddubs_epi16(x.abs_q, _mm256_sign_epi8(w, x.q));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && \
    (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
// VNNI on 256-bit vectors, as the AVX-512 VNNI block: the stored w + 128 against q, each block
// from -128 x its activation sum (dpbusd_256: AVX-VNNI's form, or AVX-512 VL's where the file
// has no AVX-VNNI, so these blocks also run, and are tested, on AVX-512 VNNI CPUs without it).
struct Vnni256Dot {
  using Activations = __m256i;
  static __m256i weights(__m256i stored) { return stored; }
  static constexpr bool kMagnitudes = false;
  static __m256i start(int32_t sum) { return _mm256_set1_epi32(-128 * sum); }
  static Activations activations(int32_t four, int32_t) { return _mm256_set1_epi32(four); }
  static __m256i accumulate(__m256i acc, Activations x, __m256i w) { return dpbusd_256(acc, w, x); }
};
#endif

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_X86_BLOCKS_H_
