// The int4 fully connected's x86 inner blocks (kernels.h's qc4w layout): R rows by T tiles of
// kQC4Tile channels, one pass over the tiles' groups, unpacking each 64-byte block once for the R
// rows. Internal linkage (see x86_common.h): each ISA file instantiates its own copy.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_X86_BLOCKS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_X86_BLOCKS_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/x86_common.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// What a block reads and writes: tiles from `tile0` (`tile_bytes` apart), rows of q from `q` and
// of the activation blocks' scales and sums from `x_scales` and `x_sums` (`blocks` apart), outputs
// at y (channel 0 of the first tile) of which the last tile's first `last_count`.
struct QC4Args {
  const uint8_t* tile0;
  size_t tile_bytes;
  size_t k, group, groups, blocks;
  const int8_t* q;
  size_t q_stride;
  const float* x_scales;
  const int32_t* x_sums;
  float* y;
  size_t y_stride;
  size_t last_count;
  bool prefetch;
  // Added to a prefetch address that runs past the end of its tile, so that it lands in the tile
  // this one's stream reads next (T tiles on) rather than in the neighbour, which its own stream
  // is already reading: 0 when no chunk of T tiles follows.
  size_t prefetch_wrap;
};

// The QC4Args::prefetch_wrap a prefetch of the line at `offset` within a tile takes.
inline size_t wrap_at(const QC4Args& a, size_t offset) {
  return wrap_past_tile(offset, a.tile_bytes, a.prefetch_wrap);
}

// At the first group of a pair, asks for the pair's line of scales in each of T tiles.
template <int T>
__attribute__((always_inline)) inline void prefetch_scales(const QC4Args& a, size_t g,
                                                           size_t scales_at) {
  if (!a.prefetch || g % 2 != 0) return;
  const size_t wrap = wrap_at(a, scales_at);
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) prefetch_wrapped(a.tile0 + t * a.tile_bytes + scales_at, wrap);
}

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Rows in chunks of R (then two, then one at a time), tiles in chunks of T (then one at a time).
template <class K, int R, int T>
inline void qc4w_run(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                     const int8_t* q, size_t q_stride, const float* x_scales,
                     const int32_t* x_sums, float* y, size_t y_stride, bool prefetch) {
  const size_t tile_bytes = qc4_tile_bytes(k, group);
  const size_t tiles = (n + kQC4Tile - 1) / kQC4Tile;
  const size_t last = n - (tiles - 1) * kQC4Tile;
  const size_t groups = k / group, blocks = k / kActBlock;
  const uint8_t* base = static_cast<const uint8_t*>(packed);
  if (prefetch) {
    // The first tiles' first kGemvPrefetchBytes, which no prefetch ahead of a load names: asked
    // for all at once, their misses overlap rather than wait on each other.
    for (size_t t = 0; t < T && t < tiles; ++t) {
      for (size_t at = 0; at < kGemvPrefetchBytes && at < tile_bytes; at += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(base + t * tile_bytes + at), _MM_HINT_T1);
      }
    }
  }
  size_t r = 0;
  auto run_rows = [&](auto rows_tag) {
    constexpr int kR = decltype(rows_tag)::value;
    size_t t = 0;
    QC4Args a{nullptr,
              tile_bytes,
              k,
              group,
              groups,
              blocks,
              q + r * q_stride,
              q_stride,
              x_scales + r * blocks,
              x_sums + r * blocks,
              nullptr,
              y_stride,
              0,
              prefetch,
              0};
    for (; t + T <= tiles; t += T) {
      a.tile0 = base + t * tile_bytes;
      a.y = y + r * y_stride + t * kQC4Tile;
      a.last_count = t + T == tiles ? last : kQC4Tile;
      a.prefetch_wrap = t + 2 * T <= tiles ? (T - 1) * tile_bytes : 0;
      K::template block<kR, T>(a);
    }
    // One tile at a time, a prefetch past a tile's end lands in the next: the next one read.
    a.prefetch_wrap = 0;
    for (; t < tiles; ++t) {
      a.tile0 = base + t * tile_bytes;
      a.y = y + r * y_stride + t * kQC4Tile;
      a.last_count = t + 1 == tiles ? last : kQC4Tile;
      K::template block<kR, 1>(a);
    }
  };
  for (; r + R <= rows; r += R) run_rows(std::integral_constant<int, R>());
  // Left-over rows two at a time where R is wider: each pass over the weight serves two rows.
  if (R > 2) {
    for (; r + 2 <= rows; r += 2) run_rows(std::integral_constant<int, (R > 2 ? 2 : 1)>());
  }
  for (; r < rows; ++r) run_rows(std::integral_constant<int, 1>());
}

// The 256-bit GEMMs: eight rows by one tile, the rows left over four, two, then one at a time. A
// pass unpacks each 8-input step's nibbles once for all of its rows, so more rows a pass means
// fewer unpacks and fewer passes over the slab; at eight rows the block spills its float sums to
// the stack and is still the fastest (docs/kernels.md). Every pass prefetches: the first streams
// the slab from memory as a GEMV does, and the later ones find it in L2, where a prefetch costs
// little.
template <class K>
inline void qc4w_gemm_8x16(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                           const int8_t* q, size_t q_stride, const float* x_scales,
                           const int32_t* x_sums, float* y, size_t y_stride) {
  const size_t eights = rows / 8 * 8;
  if (eights > 0) {
    qc4w_run<K, 8, 1>(packed, k, n, group, eights, q, q_stride, x_scales, x_sums, y, y_stride,
                      /*prefetch=*/true);
  }
  if (rows > eights) {
    const size_t blocks = k / kActBlock;
    qc4w_run<K, 4, 1>(packed, k, n, group, rows - eights, q + eights * q_stride, q_stride,
                      x_scales + eights * blocks, x_sums + eights * blocks, y + eights * y_stride,
                      y_stride, /*prefetch=*/true);
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
struct QC4Avx512Vnni {
  template <int R, int T>
  static void block(const QC4Args& a) {
    // With few accumulators the low and high nibbles' dots run in chains of their own, joined
    // once a group (integer adds: the sum is the same exact int32).
    constexpr bool kSplit = R * T <= 4;
    constexpr int kRh = kSplit ? R : 1, kTh = kSplit ? T : 1;
    const __m512i mask = _mm512_set1_epi8(0x0F);
    __m512 facc[R][T];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) facc[r][t] = _mm512_setzero_ps();
    }
    // One loop over the activation blocks (a group is one or more), so that the four 8-input
    // steps of a block unroll whole.
    const size_t per_group = a.group / kActBlock;
    size_t g = 0, in_group = 0;
    for (size_t b = 0; b < a.blocks; ++b) {
      const size_t at = qc4_blocks_offset(g, a.group) +
                        in_group * (kActBlock / kQC4KBlock) * kQC4BlockBytes;
      const size_t scales_at = qc4_scales_offset(g, a.group);
      if (in_group == 0) prefetch_scales<T>(a, g, scales_at);
      __m512 scale[T];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const uint8_t* s = a.tile0 + t * a.tile_bytes + scales_at;
        // The zero-masking forms with every lane set: GCC 12's plain conversions pass an undefined
        // vector to their builtins, which -Wmaybe-uninitialized flags (as clamp_avx512).
        scale[t] =
            _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
      }
      {
        // Each dot starts from -8 * the block's activation sum, which the + 8 of the nibbles adds.
        __m512i acc[R][T], acc_hi[kRh][kTh];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512i start = _mm512_set1_epi32(-8 * a.x_sums[r * a.blocks + b]);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) acc[r][t] = start;
        }
#pragma GCC unroll 16
        for (int r = 0; r < kRh; ++r) {
#pragma GCC unroll 16
          for (int t = 0; t < kTh; ++t) acc_hi[r][t] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (size_t i = 0; i < kActBlock; i += kQC4KBlock) {
          __m512i lo[T], hi[T];
          const size_t offset = at + i / kQC4KBlock * kQC4BlockBytes;
          const size_t wrap = wrap_at(a, offset);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const uint8_t* p = a.tile0 + t * a.tile_bytes + offset;
            if (a.prefetch) prefetch_wrapped(p, wrap);
            const __m512i v = _mm512_loadu_si512(p);
            lo[t] = _mm512_and_si512(v, mask);
            hi[t] = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
          }
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            const int8_t* x = a.q + r * a.q_stride + b * kActBlock + i;
            const __m512i xl = _mm512_set1_epi32(load4(x));
            const __m512i xh = _mm512_set1_epi32(load4(x + 4));
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t) {
              acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], lo[t], xl);
              if (kSplit) {
                acc_hi[r % kRh][t % kTh] =
                    _mm512_dpbusd_epi32(acc_hi[r % kRh][t % kTh], hi[t], xh);
              } else {
                acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], hi[t], xh);
              }
            }
          }
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 xs = _mm512_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const __m512i sum =
                kSplit ? _mm512_add_epi32(acc[r][t], acc_hi[r % kRh][t % kTh]) : acc[r][t];
            facc[r][t] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, sum),
                                         _mm512_maskz_mul_ps(0xFFFF, xs, scale[t]), facc[r][t]);
          }
        }
      }
      if (++in_group == per_group) {
        in_group = 0;
        ++g;
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 bias = _mm512_loadu_ps(a.tile0 + t * a.tile_bytes);
      const __mmask16 keep = t + 1 == T ? static_cast<__mmask16>((1u << a.last_count) - 1)
                                        : static_cast<__mmask16>(0xFFFF);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 out = _mm512_maskz_add_ps(0xFFFF, facc[r][t], bias);
        _mm512_mask_storeu_ps(a.y + r * a.y_stride + t * kQC4Tile, keep, out);
      }
    }
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// The 256-bit blocks: Dot says how an 8-input step's nibbles meet the activations and how a
// block's dot comes out as the exact int32 sum(q * w):
//   begin(sum) -> the block's accumulator; step(acc, lo, hi, xl, xh) -> acc with the step's
//   low nibbles against xl and high nibbles against xh; end(acc, sum) -> the block's int32 dots.
// Each dot comes out from -8 * the block's activation sum, which the + 8 of the nibbles adds.
template <class Dot>
struct QC4Block256 {
  template <int R, int T>
  static void block(const QC4Args& a) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    // [t][h]: tile t's channels 8h..8h+7.
    __m256 facc[R][T][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) facc[r][t][0] = facc[r][t][1] = _mm256_setzero_ps();
    }
    // One loop over the activation blocks (a group is one or more), so that the four 8-input
    // steps of a block unroll whole.
    const size_t per_group = a.group / kActBlock;
    size_t g = 0, in_group = 0;
    for (size_t b = 0; b < a.blocks; ++b) {
      const size_t at = qc4_blocks_offset(g, a.group) +
                        in_group * (kActBlock / kQC4KBlock) * kQC4BlockBytes;
      const size_t scales_at = qc4_scales_offset(g, a.group);
      if (in_group == 0) prefetch_scales<T>(a, g, scales_at);
      __m256 scale[T][2];
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) {
        const uint8_t* s = a.tile0 + t * a.tile_bytes + scales_at;
#pragma GCC unroll 16
        for (int h = 0; h < 2; ++h) {
          scale[t][h] =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16 * h)));
        }
      }
      {
        __m256i acc[R][T][2];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m256i begin = Dot::begin(a.x_sums[r * a.blocks + b]);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = begin;
        }
#pragma GCC unroll 4
        for (size_t i = 0; i < kActBlock; i += kQC4KBlock) {
          __m256i lo[T][2], hi[T][2];
          const size_t offset = at + i / kQC4KBlock * kQC4BlockBytes;
          const size_t wrap = wrap_at(a, offset);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
            const uint8_t* p = a.tile0 + t * a.tile_bytes + offset;
            if (a.prefetch) prefetch_wrapped(p, wrap);
#pragma GCC unroll 16
            for (int h = 0; h < 2; ++h) {
              const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
              lo[t][h] = _mm256_and_si256(v, mask);
              hi[t][h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
            }
          }
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            const int8_t* x = a.q + r * a.q_stride + b * kActBlock + i;
            const __m256i xl = _mm256_set1_epi32(load4(x));
            const __m256i xh = _mm256_set1_epi32(load4(x + 4));
#pragma GCC unroll 16
            for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
              for (int h = 0; h < 2; ++h) {
                acc[r][t][h] = Dot::step(acc[r][t][h], lo[t][h], hi[t][h], xl, xh);
              }
            }
          }
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const int32_t sum = a.x_sums[r * a.blocks + b];
          const __m256 xs = _mm256_set1_ps(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 16
          for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
            for (int h = 0; h < 2; ++h) {
              const __m256i dot = Dot::end(acc[r][t][h], sum);
              facc[r][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                              _mm256_mul_ps(xs, scale[t][h]), facc[r][t][h]);
            }
          }
        }
      }
      if (++in_group == per_group) {
        in_group = 0;
        ++g;
      }
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const float* bias = reinterpret_cast<const float*>(a.tile0 + t * a.tile_bytes);
      const size_t count = t + 1 == T ? a.last_count : kQC4Tile;
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        store_tile16(a.y + r * a.y_stride + t * kQC4Tile,
                     _mm256_add_ps(facc[r][t][0], _mm256_loadu_ps(bias)),
                     _mm256_add_ps(facc[r][t][1], _mm256_loadu_ps(bias + 8)), count);
      }
    }
  }
};

// AVX2: VPMADDUBSW's pair sums add up in 16 bits through the block (each is at most
// 2 * 15 * 128 in magnitude, so the eight a 32-input block gives each lane, 30720, fit), and one
// widening VPMADDWD a block gives the same exact int32 as one per 8-input step.
struct QC4Avx2Dot {
  static __m256i begin(int32_t) { return _mm256_setzero_si256(); }
  static __m256i step(__m256i acc, __m256i lo, __m256i hi, __m256i xl, __m256i xh) {
    return _mm256_add_epi16(
        acc, _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh)));
  }
  static __m256i end(__m256i acc, int32_t sum) {
    return _mm256_add_epi32(_mm256_set1_epi32(-8 * sum),
                            _mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
  }
};
using QC4Avx2 = QC4Block256<QC4Avx2Dot>;

#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
// AVX-VNNI: VPDPBUSD (nibbles unsigned, activations signed) takes each step straight into the
// int32 sums, which start from -8 * the block's activation sum (dpbusd_256: also in AVX-512 VL's
// encoding, for the tests' twin, qs8_qc8w_vnni256_evex.h).
struct QC4AvxVnniDot {
  static __m256i begin(int32_t sum) { return _mm256_set1_epi32(-8 * sum); }
  static __m256i step(__m256i acc, __m256i lo, __m256i hi, __m256i xl, __m256i xh) {
    return dpbusd_256(dpbusd_256(acc, lo, xl), hi, xh);
  }
  static __m256i end(__m256i acc, int32_t) { return acc; }
};
using QC4AvxVnni = QC4Block256<QC4AvxVnniDot>;
#endif
#endif

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QC4W_X86_BLOCKS_H_
