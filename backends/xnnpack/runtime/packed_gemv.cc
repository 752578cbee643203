#include "edgeshare/backends/xnnpack/runtime/packed_gemv.h"

#include <xnnpack.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/packed_gemv_kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ES_GEMV_X86 1
#endif

namespace edgeshare {
namespace xnnpack {
namespace {

// Output channels per packed tile: XNNPACK's nr for f32 on AVX-512 and on FMA3 (an XNNPACK that
// packs otherwise fails the probe).
constexpr size_t kTile = 16;
// How far ahead of its loads the one-row kernel asks each stream's lines into L2: the hardware
// prefetcher alone keeps too few of a core's misses in flight. A prefetch past the weight's end
// is harmless (prefetches never fault). Measured (80-128 MiB of packed weights in huge pages, one
// AVX-512 core, 30 interleaved rounds): none 15.1 GB/s, 1.5 KiB 16.3, 2 KiB 16.3, 3 KiB 16.3; into
// L1 at 2 KiB 16.0; non-temporal 4.5; the FMA3 kernel on the same core 13.8 -> 15.5 at 2 KiB.
// Reference model, T=1, 1 thread, lora_runner medians of 10 pairs: 5.49 -> 4.70 ms; 2 threads
// 1.79 -> 1.75 ms (12 pairs).
constexpr size_t kGemvPrefetchBytes = 2048;
// Rows per gemm block: 8 rows by 2 tiles keep 16 accumulators of AVX-512's 32 registers.
constexpr int kGemmRows = 8;

struct GemmArgs {
  size_t k;
  size_t x_stride;  // Floats between rows of x.
  size_t y_stride;  // Floats between rows of y.
};

#ifdef ES_GEMV_X86
// XNNPACK's clamp, min(max(v, lo), hi), as the zero-masking forms with every lane set: the same
// instructions and results, but GCC 12's plain _mm512_min_ps / _mm512_max_ps pass
// _mm512_undefined_ps() to their builtins and -Wuninitialized flags every inlined use.
__attribute__((target("avx512f"))) inline __m512 clamp_avx512(__m512 v, __m512 lo, __m512 hi) {
  return _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, v, lo), hi);
}

// Asks for the line kGemvPrefetchBytes past `p` into L2. The address is formed as an integer: it
// may lie past the end of the weight, which a prefetch may name but pointer arithmetic may not.
__attribute__((always_inline)) inline void prefetch_ahead(const float* p) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kGemvPrefetchBytes;
  _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T1);
}

// `kTiles` tiles side by side, `tile` floats apart. XNNPACK's clamp is kept (and its operand order,
// which decides what a NaN becomes) so that every output is bitwise its kernel's.
template <int kTiles>
__attribute__((target("avx512f"))) void run_tiles_avx512(const float* w, size_t tile, size_t k,
                                                         const float* x, float* y,
                                                         size_t last_count) {
  const __m512 lo = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 hi = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 acc[kTiles];
  for (int j = 0; j < kTiles; ++j) acc[j] = _mm512_loadu_ps(w + j * tile);
  const float* p = w + kTile;
  for (size_t i = 0; i < k; ++i, p += kTile) {
    const __m512 xi = _mm512_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      prefetch_ahead(p + j * tile);
      acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(p + j * tile), xi, acc[j]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    const __m512 v = clamp_avx512(acc[j], lo, hi);
    if (j + 1 < kTiles || last_count == kTile) {
      _mm512_storeu_ps(y + j * kTile, v);
    } else {
      _mm512_mask_storeu_ps(y + j * kTile, static_cast<__mmask16>((1u << last_count) - 1), v);
    }
  }
}

// The same with two 8-float halves per tile: XNNPACK's one-row FMA3 kernel keeps two accumulators
// (one tile), this one eight.
template <int kTiles>
__attribute__((target("avx2,fma"))) void run_tiles_avx2(const float* w, size_t tile, size_t k,
                                                        const float* x, float* y,
                                                        size_t last_count) {
  const __m256 lo = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 hi = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 acc[kTiles][2];
  for (int j = 0; j < kTiles; ++j) {
    acc[j][0] = _mm256_loadu_ps(w + j * tile);
    acc[j][1] = _mm256_loadu_ps(w + j * tile + 8);
  }
  const float* p = w + kTile;
  for (size_t i = 0; i < k; ++i, p += kTile) {
    const __m256 xi = _mm256_set1_ps(x[i]);
    for (int j = 0; j < kTiles; ++j) {
      prefetch_ahead(p + j * tile);
      acc[j][0] = _mm256_fmadd_ps(_mm256_loadu_ps(p + j * tile), xi, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(_mm256_loadu_ps(p + j * tile + 8), xi, acc[j][1]);
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    float out[kTile];
    _mm256_storeu_ps(out, _mm256_min_ps(_mm256_max_ps(acc[j][0], lo), hi));
    _mm256_storeu_ps(out + 8, _mm256_min_ps(_mm256_max_ps(acc[j][1], lo), hi));
    std::memcpy(y + j * kTile, out, (j + 1 < kTiles ? kTile : last_count) * sizeof(float));
  }
}

using TilesKernel = void (*)(const float*, size_t, size_t, const float*, float*, size_t);

// Four tiles at a time, then two, then one. Four streams in flight measured 0.87x the time of one
// on 80 MiB of weights (huge pages, one core); two, 0.88x. The two-tile step matters: a slab of a
// weight with long rows is 32 output channels wide (two tiles: the reference model's and the tiny
// LLM's down projections, 40% and 15% of their T=1 bytes), and one tile at a time keeps a single
// FMA chain and stream. Measured on 64 MiB of such slabs (k 2048, one core): 24.9 -> 27.0 GB/s;
// reference model T=1, 1 thread, lora_runner medians of 10 pairs: 4.17 -> 4.06 ms.
template <TilesKernel kFour, TilesKernel kTwo, TilesKernel kOne>
void gemv_tiles(const float* packed, size_t k, size_t n, const float* x, float* y) {
  const size_t tile = (k + 1) * kTile;
  const size_t tiles = (n + kTile - 1) / kTile;
  const size_t last_count = n - (tiles - 1) * kTile;
  size_t t = 0;
  for (; t + 4 <= tiles; t += 4) {
    kFour(packed + t * tile, tile, k, x, y + t * kTile, t + 4 == tiles ? last_count : kTile);
  }
  if (t + 2 <= tiles) {
    kTwo(packed + t * tile, tile, k, x, y + t * kTile, t + 2 == tiles ? last_count : kTile);
    t += 2;
  }
  if (t < tiles) kOne(packed + t * tile, tile, k, x, y + t * kTile, last_count);
}

// kRows rows by kTiles tiles (XNNPACK's arithmetic per output, as above), prefetching `lines` lines
// from `prefetch` into L2 over its steps through the inputs: the next slab arrives while this one
// computes, which a read of the slab before its run (touch) cannot do.
template <int kRows, int kTiles>
__attribute__((target("avx512f"))) void gemm_block(const GemmArgs& a, const float* w,
                                                   const float* x, float* y, size_t last_count,
                                                   const char* prefetch, size_t lines) {
  const __m512 lo = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 hi = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const size_t k = a.k, xs = a.x_stride;
  const size_t tile = (k + 1) * kTile;
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
  const float* p = w + kTile;
  for (size_t i = 0; i < k; ++i, p += kTile) {
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
      float* out = y + r * a.y_stride + t * kTile;
      if (t + 1 < kTiles || last_count == kTile) {
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
#endif

}  // namespace

namespace internal {

void gemv_avx512(const float* packed, size_t k, size_t n, const float* x, float* y) {
#ifdef ES_GEMV_X86
  gemv_tiles<&run_tiles_avx512<4>, &run_tiles_avx512<2>, &run_tiles_avx512<1>>(packed, k, n, x, y);
#endif
}

void gemv_avx2(const float* packed, size_t k, size_t n, const float* x, float* y) {
#ifdef ES_GEMV_X86
  gemv_tiles<&run_tiles_avx2<4>, &run_tiles_avx2<2>, &run_tiles_avx2<1>>(packed, k, n, x, y);
#endif
}

void gemm_avx512(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                 size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                 size_t prefetch_bytes) {
#ifdef ES_GEMV_X86
  const GemmArgs args{k, x_stride, y_stride};
  const size_t tile = (k + 1) * kTile;
  const size_t tiles = (n + kTile - 1) / kTile;
  const size_t last_count = n - (tiles - 1) * kTile;
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
          args, packed + t * tile, x + r * x_stride, y + r * y_stride + t * kTile,
          t + block_tiles == tiles ? last_count : kTile, next + issued * 64, block_lines);
      issued += block_lines;
    }
  }
#endif
}

GemvKernel best_kernel() {
#ifdef ES_GEMV_X86
  if (__builtin_cpu_supports("avx512f")) return &gemv_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &gemv_avx2;
#endif
  return nullptr;
}

namespace {

// XNNPACK packs a probe weight (odd sizes: a partial last tile, inputs not a multiple of any
// unroll) and runs `rows` rows of it, on finite inputs and then with a NaN; `run(block, x, y)` must
// give the same bits from the same packed bytes.
template <typename Run>
bool probe(size_t rows, Run run) {
  constexpr size_t k = 131, n = 53;
  std::vector<float> w(n * k), bias(n), x(rows * k), want(rows * n), got(rows * n);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  };
  for (float& v : w) v = next();
  for (float& v : bias) v = next();
  for (float& v : x) v = next();
  PackedRegion region(packed_gemv_bytes(k, n) + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  size_t size = 0;
  {
    PackedRegionScope scope(&region);
    const float inf = std::numeric_limits<float>::infinity();
    if (xnn_create_fully_connected_nc_f32(k, n, k, n, w.data(), bias.data(), -inf, inf,
                                          /*flags=*/0, &op) != xnn_status_success) {
      return false;
    }
    block = scope.last_block();
    size = scope.last_size();
  }
  bool same = block != nullptr && size == packed_gemv_bytes(k, n) &&
              xnn_setup_fully_connected_nc_f32(op, rows, x.data(), want.data(), nullptr) ==
                  xnn_status_success &&
              xnn_run_operator(op, nullptr) == xnn_status_success;
  // Then the same with a NaN input: what a NaN becomes is the clamp's operand order.
  for (int round = 0; round < 2 && same; ++round) {
    if (round == 1) {
      x[7] = std::numeric_limits<float>::quiet_NaN();
      same = xnn_run_operator(op, nullptr) == xnn_status_success;
    }
    run(static_cast<const float*>(block), x.data(), got.data());
    same = same && std::memcmp(want.data(), got.data(), got.size() * sizeof(float)) == 0;
  }
  xnn_delete_operator(op);
  return same;
}

}  // namespace

bool matches_xnnpack(GemvKernel kernel) {
  if (kernel == nullptr) return false;
  return probe(
      1, [kernel](const float* block, const float* x, float* y) { kernel(block, 131, 53, x, y); });
}

bool gemm_matches_xnnpack() {
#ifdef ES_GEMV_X86
  if (!__builtin_cpu_supports("avx512f")) return false;
  // 2 rows (one partial block), 11 (a whole block and 3 rows), 32 (four blocks).
  for (size_t rows : {2u, 11u, 32u}) {
    const bool same = probe(rows, [rows](const float* block, const float* x, float* y) {
      gemm_avx512(block, 131, 53, rows, x, 131, y, 53, nullptr, 0);
    });
    if (!same) return false;
  }
  return true;
#else
  return false;
#endif
}

}  // namespace internal

namespace {

// The machine's kernel if it matches XNNPACK, else null: chosen and probed on first use.
internal::GemvKernel checked_kernel() {
  static const internal::GemvKernel kernel = [] {
    const internal::GemvKernel best = internal::best_kernel();
    return internal::matches_xnnpack(best) ? best : nullptr;
  }();
  return kernel;
}

}  // namespace

bool packed_gemv_usable() { return checked_kernel() != nullptr; }

bool packed_gemm_usable() {
  static const bool usable = internal::gemm_matches_xnnpack();
  return usable;
}

void packed_gemm(const void* packed, size_t input_channels, size_t output_channels, size_t rows,
                 const float* x, float* y, size_t y_stride, const void* prefetch,
                 size_t prefetch_bytes) {
  if (!packed_gemm_usable()) return;
  internal::gemm_avx512(static_cast<const float*>(packed), input_channels, output_channels, rows, x,
                        input_channels, y, y_stride, prefetch, prefetch_bytes);
}

size_t packed_gemv_bytes(size_t input_channels, size_t output_channels) {
  return (output_channels + kTile - 1) / kTile * kTile * (input_channels + 1) * sizeof(float);
}

void packed_gemv(const void* packed, size_t input_channels, size_t output_channels, const float* x,
                 float* y) {
  const internal::GemvKernel kernel = checked_kernel();
  if (kernel != nullptr) {
    kernel(static_cast<const float*>(packed), input_channels, output_channels, x, y);
  }
}

}  // namespace xnnpack
}  // namespace edgeshare
