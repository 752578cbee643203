// gemm_nt's loops over an instruction set's vector operations (Ops), shared by gemm_nt_avx2.cc,
// gemm_nt_avx512.cc and gemm_nt_neon.cc, each compiling it with only its own instruction set
// enabled.
//
// Up to kGemmNtDotRows rows (a decode step), or a deep k (x . A^T: k the model's width): dot
// products along k in blocks of 4 rows x 4 outputs, each vector of a and b loaded once for the
// block, one horizontal sum per output at the end. Otherwise (a prefill's h . B^T: k the rank): the
// weight is copied, kGemmNtChunk input channels at a time, into a panel of Ops::kWidth outputs
// transposed on the stack, and every eight rows of a accumulate a vector of outputs from broadcasts
// of their inputs, so a skinny k never pays a horizontal sum per output.
//
// The loops over a block's R rows and C outputs are unrolled by pragma: GCC at -O2 does not unroll
// them itself, and then keeps the accumulators in memory, a load and a store around every FMA.
//
// The weight b is float, IEEE half (uint16_t bits) or int8, widened to float as it is read (in the
// dot path a vector at a time, in the panel path while the panel is copied); an int8 weight's
// per-row scales multiply its outputs at the end (gemm_nt_q8).
//
// Ops: V, kWidth, kRegisters (vector registers the set has), zero(), load(p), load_tail(p, count),
// store(p, v), store_tail(p, v, count), add(x, y), mul(x, y), fma(x, y, acc) = x * y + acc,
// set1(x), reduce(v) (the sum of its lanes), and loadb(p) for the half and int8 weights (kWidth
// elements widened). Optionally reduce4(v[4], out): the four sums stored at once, each with the
// bits of reduce (the same additions, four vectors' lanes shuffled together), for an instruction
// set where that is cheaper: a dot product over a short k (a decode row's h . B^T, k the rank) is
// mostly its horizontal sum.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_IMPL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_IMPL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "edgeshare/runtime/kernels/portable/gemm_nt.h"

namespace edgeshare {
namespace runtime {
namespace portable {

constexpr size_t kGemmNtDotRows = kGemmNtSplitRows - 1;
constexpr size_t kGemmNtDotDepth = 64;
constexpr size_t kGemmNtChunk = 256;

template <typename Ops, typename = void>
struct HasReduce4 : std::false_type {};
template <typename Ops>
struct HasReduce4<Ops, std::void_t<decltype(&Ops::reduce4)>> : std::true_type {};

// kWidth weights from p, widened (Ops::load for float weights).
template <typename Ops, typename BT>
typename Ops::V load_weights(const BT* p) {
  if constexpr (std::is_same<BT, float>::value) {
    return Ops::load(p);
  } else {
    return Ops::loadb(p);
  }
}

// The first `count` (< kWidth) weights from p, widened, the rest zero.
template <typename Ops, typename BT>
typename Ops::V load_weights_tail(const BT* p, size_t count) {
  if constexpr (std::is_same<BT, float>::value) {
    return Ops::load_tail(p, count);
  } else {
    BT padded[Ops::kWidth] = {};
    std::memcpy(padded, p, count * sizeof(BT));
    return Ops::loadb(padded);
  }
}

// c[i..i+R, j..j+C) as R x C dot products along k, each row of a and b loaded once per step.
// Inlined into its loop over the outputs: over a short k (a decode row's h . B^T, k the rank) a
// call per block cost more than the block's own products.
template <typename Ops, size_t R, size_t C, typename BT>
__attribute__((always_inline)) inline void gemm_nt_dot_block(size_t i, size_t j, size_t n, size_t k,
                                                             const float* a, const BT* b,
                                                             float* c) {
  using V = typename Ops::V;
  constexpr size_t W = Ops::kWidth;
  V acc[R][C];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) acc[r][q] = Ops::zero();
  }
  size_t p = 0;
  for (; p + W <= k; p += W) {
    V bv[C];
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) bv[q] = load_weights<Ops>(b + (j + q) * k + p);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const V av = Ops::load(a + (i + r) * k + p);
#pragma GCC unroll 8
      for (size_t q = 0; q < C; ++q) acc[r][q] = Ops::fma(av, bv[q], acc[r][q]);
    }
  }
  if (p < k) {
    V bv[C];
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) bv[q] = load_weights_tail<Ops>(b + (j + q) * k + p, k - p);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const V av = Ops::load_tail(a + (i + r) * k + p, k - p);
#pragma GCC unroll 8
      for (size_t q = 0; q < C; ++q) acc[r][q] = Ops::fma(av, bv[q], acc[r][q]);
    }
  }
  if constexpr (C == 4 && HasReduce4<Ops>::value) {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) Ops::reduce4(acc[r], c + (i + r) * n + j);
  } else {
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (size_t q = 0; q < C; ++q) c[(i + r) * n + j + q] = Ops::reduce(acc[r][q]);
    }
  }
}

template <typename Ops, size_t R, typename BT>
void gemm_nt_dot_rows(size_t i, size_t n, size_t k, const float* a, const BT* b, float* c) {
  size_t j = 0;
  for (; j + 4 <= n; j += 4) gemm_nt_dot_block<Ops, R, 4>(i, j, n, k, a, b, c);
  for (; j < n; ++j) gemm_nt_dot_block<Ops, R, 1>(i, j, n, k, a, b, c);
}

template <typename Ops, typename BT>
void gemm_nt_dot(size_t m, size_t n, size_t k, const float* a, const BT* b, float* c) {
  size_t i = 0;
  for (; i + 4 <= m; i += 4) gemm_nt_dot_rows<Ops, 4>(i, n, k, a, b, c);
  for (; i < m; ++i) gemm_nt_dot_rows<Ops, 1>(i, n, k, a, b, c);
}

template <typename Ops, size_t R>
void gemm_nt_panel_rows(size_t i, size_t n, size_t k, size_t p0, size_t kb, size_t j0, size_t nb,
                        const float* a, const float* panel, float* c) {
  using V = typename Ops::V;
  constexpr size_t W = Ops::kWidth;
  V acc[R];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
    acc[r] = p0 == 0 ? Ops::zero() : Ops::load_tail(c + (i + r) * n + j0, nb);
  }
  for (size_t p = 0; p < kb; ++p) {
    const V w = Ops::load(panel + p * W);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) acc[r] = Ops::fma(Ops::set1(a[(i + r) * k + p0 + p]), w, acc[r]);
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) Ops::store_tail(c + (i + r) * n + j0, acc[r], nb);
}

template <typename Ops, typename BT>
void gemm_nt_panel(size_t m, size_t n, size_t k, const float* a, const BT* b, float* c) {
  constexpr size_t W = Ops::kWidth;
  alignas(64) float panel[kGemmNtChunk * W];
  for (size_t j0 = 0; j0 < n; j0 += W) {
    const size_t nb = std::min(W, n - j0);
    for (size_t p0 = 0; p0 < k; p0 += kGemmNtChunk) {
      const size_t kb = std::min(kGemmNtChunk, k - p0);
      for (size_t jj = 0; jj < nb; ++jj) {
        // The row's weights widened a vector at a time (the values the dot loop reads), then laid
        // down the panel's column jj: a half or int8 weight converted one element at a time cost
        // more than the products over it.
        const BT* row = b + (j0 + jj) * k + p0;
        alignas(64) float wide[W];
        for (size_t p = 0; p < kb; p += W) {
          const size_t count = std::min(W, kb - p);
          Ops::store_tail(
              wide,
              count == W ? load_weights<Ops>(row + p) : load_weights_tail<Ops>(row + p, count), W);
          for (size_t q = 0; q < count; ++q) panel[(p + q) * W + jj] = wide[q];
        }
      }
      for (size_t jj = nb; jj < W; ++jj) {
        for (size_t p = 0; p < kb; ++p) panel[p * W + jj] = 0.0f;
      }
      size_t i = 0;
      for (; i + 8 <= m; i += 8) gemm_nt_panel_rows<Ops, 8>(i, n, k, p0, kb, j0, nb, a, panel, c);
      for (; i < m; ++i) gemm_nt_panel_rows<Ops, 1>(i, n, k, p0, kb, j0, nb, a, panel, c);
    }
  }
}

template <typename Ops, typename BT>
void gemm_nt(size_t m, size_t n, size_t k, const float* a, const BT* b, float* c) {
  if (k == 0) {
    std::memset(c, 0, m * n * sizeof(float));
  } else if (m <= kGemmNtDotRows || k >= kGemmNtDotDepth) {
    gemm_nt_dot<Ops>(m, n, k, a, b, c);
  } else {
    gemm_nt_panel<Ops>(m, n, k, a, b, c);
  }
}

// gemm_nn: c[i..i+R, j..j+C*W) over b [k, n], each output's products summed in order over k by
// one FMA each (acc = a[i, p] * b[p, j] + acc from zero), whatever the block: the bits of an output
// depend on its row of a and its column of b alone.
template <typename Ops, size_t R, size_t C, typename BT>
__attribute__((always_inline)) inline void gemm_nn_block(size_t i, size_t j, size_t n, size_t k,
                                                         const float* a, const BT* b, float* c) {
  using V = typename Ops::V;
  constexpr size_t W = Ops::kWidth;
  V acc[R][C];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) acc[r][q] = Ops::zero();
  }
  for (size_t p = 0; p < k; ++p) {
    V bv[C];
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) bv[q] = load_weights<Ops>(b + p * n + j + q * W);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) {
      const V av = Ops::set1(a[(i + r) * k + p]);
#pragma GCC unroll 8
      for (size_t q = 0; q < C; ++q) acc[r][q] = Ops::fma(av, bv[q], acc[r][q]);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (size_t q = 0; q < C; ++q) Ops::store(c + (i + r) * n + j + q * W, acc[r][q]);
  }
}

// The last n % W outputs of R rows: the same sums over zero-padded vectors, stored masked.
template <typename Ops, size_t R, typename BT>
void gemm_nn_tail(size_t i, size_t j, size_t n, size_t k, const float* a, const BT* b, float* c) {
  using V = typename Ops::V;
  const size_t count = n - j;
  V acc[R];
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) acc[r] = Ops::zero();
  for (size_t p = 0; p < k; ++p) {
    const V bv = load_weights_tail<Ops>(b + p * n + j, count);
#pragma GCC unroll 8
    for (size_t r = 0; r < R; ++r) acc[r] = Ops::fma(Ops::set1(a[(i + r) * k + p]), bv, acc[r]);
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < R; ++r) Ops::store_tail(c + (i + r) * n + j, acc[r], count);
}

// R rows: blocks of C vectors of outputs, then single vectors, then the tail. Enough accumulators
// in flight to cover the FMA's latency over a short k, as many as the registers hold (a 16-register
// set takes half of a 32-register one's).
template <typename Ops, size_t R, typename BT>
void gemm_nn_rows(size_t i, size_t n, size_t k, const float* a, const BT* b, float* c) {
  constexpr size_t W = Ops::kWidth;
  constexpr size_t C = (R == 1 ? 8 : 4) / (Ops::kRegisters >= 32 ? 1 : 2);
  size_t j = 0;
  for (; j + C * W <= n; j += C * W) gemm_nn_block<Ops, R, C>(i, j, n, k, a, b, c);
  for (; j + W <= n; j += W) gemm_nn_block<Ops, R, 1>(i, j, n, k, a, b, c);
  if (j < n) gemm_nn_tail<Ops, R>(i, j, n, k, a, b, c);
}

template <typename Ops, typename BT>
void gemm_nn(size_t m, size_t n, size_t k, const float* a, const BT* b, float* c) {
  if (k == 0) {
    std::memset(c, 0, m * n * sizeof(float));
    return;
  }
  size_t i = 0;
  for (; i + 4 <= m; i += 4) gemm_nn_rows<Ops, 4>(i, n, k, a, b, c);
  for (; i < m; ++i) gemm_nn_rows<Ops, 1>(i, n, k, a, b, c);
}

// Each output of c's m rows times its column's scale, a vector at a time (the same single
// multiplication per output as the reference's). A decode row's h . B^T has the model's width of
// outputs over a rank of inputs, so this loop runs over as many outputs as the products do, and a
// float at a time it was a good part of their cost.
template <typename Ops>
void scale_outputs(size_t m, size_t n, const float* scales, float* c) {
  constexpr size_t W = Ops::kWidth;
  for (size_t i = 0; i < m; ++i) {
    float* row = c + i * n;
    size_t j = 0;
    for (; j + W <= n; j += W) {
      Ops::store(row + j, Ops::mul(Ops::load(row + j), Ops::load(scales + j)));
    }
    if (j < n) {
      Ops::store_tail(row + j,
                      Ops::mul(Ops::load_tail(row + j, n - j), Ops::load_tail(scales + j, n - j)),
                      n - j);
    }
  }
}

// An int8 weight: the products over the widened values, then each output times its row's scale.
template <typename Ops>
void gemm_nt_q8(size_t m, size_t n, size_t k, const float* a, const int8_t* b, const float* scales,
                float* c) {
  gemm_nt<Ops>(m, n, k, a, b, c);
  scale_outputs<Ops>(m, n, scales, c);
}

// The same over b [k, n], whose scales are one per column.
template <typename Ops>
void gemm_nn_q8(size_t m, size_t n, size_t k, const float* a, const int8_t* b, const float* scales,
                float* c) {
  gemm_nn<Ops>(m, n, k, a, b, c);
  scale_outputs<Ops>(m, n, scales, c);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_GEMM_NT_IMPL_H_
