// The int8, int4 and 5-bit fully connected's register blocks for aarch64 (kernels.h's qc8w, qb8w,
// qb5w and qc4w layouts, with aarch64's kQC8WeightOffset of 0), shared by the GEMV and
// GEMM files of the NEON, dot-product and i8mm sets, and the loop that runs a table of them over
// rows and tiles. Internal linkage throughout, as x86_common.h explains for x86: each file is
// compiled with its own -march, and each block only where its file's flags enable its instructions.
//
// Every block follows kernels.h's order: per activation block of kActBlock inputs, an exact int32
// dot per row and channel, converted to float once and fused into the row's float accumulator with
// the block's scale (times the weights' block or group scale where the layout has one); at the end
// the layout's epilogue (qc8w: fma(acc, w_scale, bias); qb8w: the same over its header's scales of
// 1, as qb5w's; qc4w: acc + bias). The integer dots are exact whatever the instructions, so every
// block gives the scalar reference's bits.
//
// The layouts' weights, read 16 bytes at a time, are a vector v of 4 channels (4v to 4v + 3) by 4
// consecutive inputs, byte 4c + i (qc8w and qb8w: each weight as a signed byte, one group of 4
// inputs per 64 bytes; qb5w: rebuilt as qb8w's; qc4w: + 8 as an unsigned nibble, the low nibbles
// one group and the high nibbles the next). A "step" is 8 inputs: two groups of 4, 8 vectors per
// tile.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_NEON_BLOCKS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_NEON_BLOCKS_H_

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

// What a block reads and writes: tiles from `tile0` (`tile_bytes` apart), rows of q from `q` and
// of the activation blocks' scales and sums from `x_scales` and `x_sums` (`blocks` apart), outputs
// at y (channel 0 of the first tile) of which the last tile's first `last_count`; `group` is the
// int4 layout's group size.
struct NeonArgs {
  const uint8_t* tile0;
  size_t tile_bytes, blocks, group;
  const int8_t* q;
  size_t q_stride;
  const float* x_scales;
  const int32_t* x_sums;
  float* y;
  size_t y_stride, last_count;
};

using NeonBlockFn = void (*)(const NeonArgs& a);

// Steps of 8 inputs in an activation block.
constexpr int kNeonSteps = static_cast<int>(kActBlock / 8);

// Four channels' floats from 16 bytes of a tile (bytes, so no float pointer aliases them).
inline float32x4_t load_floats(const uint8_t* p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }

// Four channels' float16 scales from 8 bytes, widened (exactly, subnormals too: FPCR's flush
// modes are off on Linux).
inline float32x4_t load_halves(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p)));
}

// The 4 activation bytes of inputs [i, i + 4) of a row in every 32-bit lane.
inline int8x16_t four_bytes_everywhere(const int8_t* q) {
  int32_t b;
  std::memcpy(&b, q, sizeof(b));
  return vreinterpretq_s8_s32(vdupq_n_s32(b));
}

// V consecutive 16-byte vectors from p into u[0, V).
template <int V>
inline void load_vectors(const uint8_t* p, uint8x16_t* u) {
#pragma GCC unroll 4
  for (int i = 0; i < V; ++i) u[i] = vld1q_u8(p + 16 * i);
}

// Two consecutive 16-byte vectors at p + kOffset with one LDP. GCC 12 pairs few of the one-row
// kernel's vld1q_u8 loads once it has scheduled them, so most vectors cost a load of their own
// (docs/kernels.md has the counts). The statement names no memory operand: the packed weights are
// never written while a kernel runs, and a memory operand makes GCC form every address in a
// register of its own.
template <int kOffset>
inline void load_pair(const uint8_t* p, uint8x16_t& a, uint8x16_t& b) {
  asm("ldp %q0, %q1, [%2, %3]" : "=w"(a), "=w"(b) : "r"(p), "i"(kOffset));
}

// kernels.h's qc8w: per-channel scales in the header, blocks in order after it.
struct Qc8Layout {
  static constexpr int32_t kOffset = kQC8WeightOffset;
  static constexpr bool kBlockScales = false;
  static constexpr bool kHeaderScale = true;
  static const uint8_t* block(const uint8_t* tile, size_t b, size_t) {
    return tile + kQC8HeaderBytes + b * kActBlock * kQC8Tile;
  }
  static const uint8_t* scales(const uint8_t*, size_t, size_t) { return nullptr; }
  // Vectors v0 to v0 + V - 1 of step s: u[i] of the step's first group, u[V + i] of its second.
  template <int V>
  static void load(const uint8_t* block, int s, int v0, uint8x16_t (&u)[2 * V]) {
    load_vectors<V>(block + s * 128 + 16 * v0, u);
    load_vectors<V>(block + s * 128 + 64 + 16 * v0, u + V);
  }
  // load<4>(block, S, 0, u) for the one-row kernel: the step's 128 bytes in four pairs.
  template <int S>
  static void load_step(const uint8_t* block, uint8x16_t (&u)[8]) {
    load_pair<S * 128>(block, u[0], u[1]);
    load_pair<S * 128 + 32>(block, u[2], u[3]);
    load_pair<S * 128 + 64>(block, u[4], u[5]);
    load_pair<S * 128 + 96>(block, u[6], u[7]);
  }
};

// kernels.h's qb8w: qc8w's groups in pairs of blocks, each pair followed by its float16 scales;
// the header's scales of 1 make qc8w's epilogue its acc + bias.
struct Qb8Layout : Qc8Layout {
  static constexpr bool kBlockScales = true;
  static const uint8_t* block(const uint8_t* tile, size_t b, size_t) {
    return tile + qb8_block_offset(b);
  }
  static const uint8_t* scales(const uint8_t* tile, size_t b, size_t) {
    return tile + qb8_scales_offset(b);
  }
};

// kernels.h's qb5w: qb8w's tiles and arithmetic with each block as nibbles and fifth bits; a
// group's vector is rebuilt as the bytes qb8w stores, w + offset = (u & 15) | (bit 4 of u ?
// offset : 0xF0 + offset), from one nibble load (shifted for groups 4 to 7) and one bit test.
struct Qb5Layout : Qc8Layout {
  static constexpr bool kBlockScales = true;
  static const uint8_t* block(const uint8_t* tile, size_t b, size_t) {
    return tile + qb5_block_offset(b);
  }
  static const uint8_t* scales(const uint8_t* tile, size_t b, size_t) {
    return tile + qb5_scales_offset(b);
  }
  template <int V>
  static void load(const uint8_t* block, int s, int v0, uint8x16_t (&u)[2 * V]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int g = 2 * s + h;
#pragma GCC unroll 4
      for (int i = 0; i < V; ++i) {
        const uint8x16_t nibbles = vld1q_u8(block + g % 4 * 64 + 16 * (v0 + i));
        const uint8x16_t low =
            g >= 4 ? vshrq_n_u8(nibbles, 4) : vandq_u8(nibbles, vdupq_n_u8(0x0F));
        const uint8x16_t bits = vld1q_u8(block + kQB5NibbleBytes + 16 * (v0 + i));
        const uint8x16_t fifth = vtstq_u8(bits, vdupq_n_u8(static_cast<uint8_t>(1u << g)));
        const uint8x16_t high = vbslq_u8(fifth, vdupq_n_u8(static_cast<uint8_t>(kOffset)),
                                         vdupq_n_u8(static_cast<uint8_t>(0xF0 + kOffset)));
        u[h * V + i] = vorrq_u8(low, high);
      }
    }
  }
  template <int S>
  static void load_step(const uint8_t* block, uint8x16_t (&u)[8]) {
    load<4>(block, S, 0, u);
  }
};

// kernels.h's qc4w: 64-byte blocks of 8 inputs (a step), float16 scales per group of
// `group` inputs (one or more activation blocks), the bias alone in the header.
struct Qc4Layout {
  static constexpr int32_t kOffset = 8;
  static constexpr bool kBlockScales = true;
  static constexpr bool kHeaderScale = false;
  static const uint8_t* block(const uint8_t* tile, size_t b, size_t group) {
    const size_t per_group = group / kActBlock;
    return tile + qc4_blocks_offset(b / per_group, group) +
           b % per_group * (kActBlock / kQC4KBlock) * kQC4BlockBytes;
  }
  static const uint8_t* scales(const uint8_t* tile, size_t b, size_t group) {
    return tile + qc4_scales_offset(b / (group / kActBlock), group);
  }
  template <int V>
  static void load(const uint8_t* block, int s, int v0, uint8x16_t (&u)[2 * V]) {
    const uint8x16_t mask = vdupq_n_u8(0x0F);
    uint8x16_t both[V];
    load_vectors<V>(block + s * kQC4BlockBytes + 16 * v0, both);
#pragma GCC unroll 4
    for (int i = 0; i < V; ++i) {
      u[i] = vandq_u8(both[i], mask);
      u[V + i] = vshrq_n_u8(both[i], 4);
    }
  }
  // load<4>(block, S, 0, u) for the one-row kernel: the step's 64 bytes in two pairs.
  template <int S>
  static void load_step(const uint8_t* block, uint8x16_t (&u)[8]) {
    uint8x16_t both[4];
    load_pair<S * kQC4BlockBytes>(block, both[0], both[1]);
    load_pair<S * kQC4BlockBytes + 32>(block, both[2], both[3]);
    const uint8x16_t mask = vdupq_n_u8(0x0F);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      u[i] = vandq_u8(both[i], mask);
      u[4 + i] = vshrq_n_u8(both[i], 4);
    }
  }
};

// How 4 weight bytes meet 4 activation bytes per 32-bit lane, for one row and 4 channels:
//   Acc                 the running dot
//   init(start)         an Acc whose finish() is `start`
//   weights<L>(u)       the stored bytes as the operand the instructions take
//   start<L>(sum)       what a block's dot starts from, given the block's activation sum
//   accumulate(acc, w, x)
//   accumulate_lane<l>(acc, w, x)  (dot products) the same against lane l of x in every lane
//   finish(acc)         the 4 channels' int32 dots
// A signed dot takes the stored bytes as they are: qc8w's and qb8w's are the weights themselves
// (kQC8WeightOffset is 0 here), so a block starts from 0; qc4w's nibbles are small positive bytes,
// so it starts from -8 x the activation sum, as an unsigned-by-signed dot does.
template <class L>
inline int8x16_t signed_weights(uint8x16_t u) {
  static_assert(L::kOffset == 0 || L::kOffset == 8, "bytes a signed dot takes as they are");
  return vreinterpretq_s8_u8(u);
}
template <class L>
inline int32_t signed_start(int32_t sum) {
  return -L::kOffset * sum;
}

// ARMv8.0: SMULL's 16-bit products (at most 128 x 128, exact), added pairwise into 32 bits by
// SADALP: lanes (c, 2c') hold channel c's two partial sums until finish() adds them (ADDP).
struct NeonMullDot {
  struct Acc {
    int32x4_t lo, hi;  // Channels 0-1 and 2-3 of the vector, two partial sums each.
  };
  using Weights = int8x16_t;
  static Acc init(int32_t start) {
    const int32x4_t s = vsetq_lane_s32(start, vsetq_lane_s32(start, vdupq_n_s32(0), 0), 2);
    return {s, s};
  }
  template <class L>
  static Weights weights(uint8x16_t u) {
    return signed_weights<L>(u);
  }
  template <class L>
  static int32_t start(int32_t sum) {
    return signed_start<L>(sum);
  }
  static Acc accumulate(Acc acc, Weights w, int8x16_t x) {
    acc.lo = vpadalq_s16(acc.lo, vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    acc.hi = vpadalq_s16(acc.hi, vmull_high_s8(w, x));
    return acc;
  }
  static int32x4_t finish(Acc acc) { return vpaddq_s32(acc.lo, acc.hi); }
};

#if defined(__ARM_FEATURE_DOTPROD)
// SDOT: four signed 4-byte dots into the four lanes.
struct SdotDot {
  using Acc = int32x4_t;
  using Weights = int8x16_t;
  static Acc init(int32_t start) { return vdupq_n_s32(start); }
  template <class L>
  static Weights weights(uint8x16_t u) {
    return signed_weights<L>(u);
  }
  template <class L>
  static int32_t start(int32_t sum) {
    return signed_start<L>(sum);
  }
  static Acc accumulate(Acc acc, Weights w, int8x16_t x) { return vdotq_s32(acc, w, x); }
  // The by-element form: lane kLane of x (4 activation bytes) against every lane of w.
  template <int kLane>
  static Acc accumulate_lane(Acc acc, Weights w, int8x16_t x) {
    return vdotq_laneq_s32(acc, w, x, kLane);
  }
  static int32x4_t finish(Acc acc) { return acc; }
};
#endif

#if defined(__ARM_FEATURE_MATMUL_INT8)
// USDOT (i8mm): unsigned weights by signed activations, as VNNI's VPDPBUSD, for a layout stored
// with an offset (qc4w's nibbles): the stored bytes go in as they are and each block starts from
// -offset x its activation sum.
struct UsdotDot {
  using Acc = int32x4_t;
  using Weights = uint8x16_t;
  static Acc init(int32_t start) { return vdupq_n_s32(start); }
  template <class L>
  static Weights weights(uint8x16_t u) {
    static_assert(L::kOffset > 0, "USDOT reads the weights as unsigned bytes");
    return u;
  }
  template <class L>
  static int32_t start(int32_t sum) {
    return -L::kOffset * sum;
  }
  static Acc accumulate(Acc acc, Weights w, int8x16_t x) { return vusdotq_s32(acc, w, x); }
  template <int kLane>
  static Acc accumulate_lane(Acc acc, Weights w, int8x16_t x) {
    return vusdotq_laneq_s32(acc, w, x, kLane);
  }
  static int32x4_t finish(Acc acc) { return acc; }
};
#endif

// Stores the channels [4 * v0, 4 * (v0 + V)) of a row's tile, `out` holding them from channel
// 4 * v0, of which only those below `count`.
template <int V>
inline void store_channels(float* y, const float* out, int v0, size_t count) {
  const size_t first = 4 * static_cast<size_t>(v0);
  if (first >= count) return;
  constexpr size_t kChannels = 4 * V;
  const size_t n = count - first < kChannels ? count - first : kChannels;
  std::memcpy(y + first, out, n * sizeof(float));
}

// R rows by T tiles with a per-lane dot, V of a tile's 4 vectors (4V channels) at a time: a pass
// over the activation blocks per V vectors, so that R x T x V accumulators (and their floats)
// stay in registers.
template <class L, class D, int R, int T, int V>
void neon_block(const NeonArgs& a) {
  static_assert(4 % V == 0, "V divides a tile's 4 vectors");
  for (int v0 = 0; v0 < 4; v0 += V) {
    float32x4_t f[R][T][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) f[r][t][v] = vdupq_n_f32(0.0f);
      }
    }
    for (size_t b = 0; b < a.blocks; ++b) {
      typename D::Acc acc[R][T][V];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const typename D::Acc start =
            D::init(D::template start<L>(a.x_sums[r * a.blocks + b]));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) acc[r][t][v] = start;
        }
      }
      const uint8_t* blocks[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) blocks[t] = L::block(a.tile0 + t * a.tile_bytes, b, a.group);
#pragma GCC unroll 4
      for (int s = 0; s < kNeonSteps; ++s) {
        typename D::Weights w[T][2 * V];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          uint8x16_t u[2 * V];
          L::template load<V>(blocks[t], s, v0, u);
#pragma GCC unroll 8
          for (int i = 0; i < 2 * V; ++i) w[t][i] = D::template weights<L>(u[i]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int8_t* x = a.q + r * a.q_stride + b * kActBlock + 8 * s;
          const int8x16_t xl = four_bytes_everywhere(x);
          const int8x16_t xh = four_bytes_everywhere(x + 4);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
              acc[r][t][v] = D::accumulate(acc[r][t][v], w[t][v], xl);
              acc[r][t][v] = D::accumulate(acc[r][t][v], w[t][V + v], xh);
            }
          }
        }
      }
      if constexpr (L::kBlockScales) {
        float32x4_t ws[T][V];
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const uint8_t* scales = L::scales(a.tile0 + t * a.tile_bytes, b, a.group);
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) ws[t][v] = load_halves(scales + 8 * (v0 + v));
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float32x4_t xs = vdupq_n_f32(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
              const float32x4_t d = vcvtq_f32_s32(D::finish(acc[r][t][v]));
              f[r][t][v] = vfmaq_f32(f[r][t][v], d, vmulq_f32(xs, ws[t][v]));
            }
          }
        }
      } else {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float32x4_t xs = vdupq_n_f32(a.x_scales[r * a.blocks + b]);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
              f[r][t][v] = vfmaq_f32(f[r][t][v], vcvtq_f32_s32(D::finish(acc[r][t][v])), xs);
            }
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* header = a.tile0 + t * a.tile_bytes;
      const size_t count = t + 1 == T ? a.last_count : kQC8Tile;
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        float out[4 * V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          const int c = 4 * (v0 + v);
          if constexpr (L::kHeaderScale) {
            vst1q_f32(out + 4 * v, vfmaq_f32(load_floats(header + 4 * (kQC8Tile + c)),
                                             f[r][t][v], load_floats(header + 4 * c)));
          } else {
            vst1q_f32(out + 4 * v, vaddq_f32(f[r][t][v], load_floats(header + 4 * c)));
          }
        }
        store_channels<V>(a.y + r * a.y_stride + t * kQC8Tile, out, v0, count);
      }
    }
  }
}

#if defined(__ARM_FEATURE_DOTPROD)
// Step S (groups 2S and 2S + 1, inputs [8S, 8S + 8)) of one row's block against T whole tiles.
// The by-element dot takes a group's 4 activation bytes from lane 2S % 4 (and the next) of the
// block's half x, so the 8 groups need no broadcast of their own.
template <class L, class D, int T, int S>
inline void gemv_step(const uint8_t* const (&blocks)[T], const int8x16_t x,
                      typename D::Acc (&acc)[T][4]) {
  constexpr int kLane = 2 * S % 4;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    uint8x16_t u[8];
    L::template load_step<S>(blocks[t], u);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      acc[t][v] = D::template accumulate_lane<kLane>(acc[t][v], D::template weights<L>(u[v]), x);
      acc[t][v] =
          D::template accumulate_lane<kLane + 1>(acc[t][v], D::template weights<L>(u[4 + v]), x);
    }
  }
}

template <class L, class D, int T, int... S>
inline void gemv_steps(const uint8_t* const (&blocks)[T], const int8x16x2_t& x,
                       typename D::Acc (&acc)[T][4], std::integer_sequence<int, S...>) {
  (gemv_step<L, D, T, S>(blocks, x.val[S / 2], acc), ...);
}

// One row by T whole tiles (16 channels each) with a by-element dot (SDOT, USDOT): per activation
// block one load of its 32 bytes serves every group and tile, and one load of each tile's 16
// scales; the weights come in LDP pairs (load_pair). neon_block's order of operations, so the
// same bits.
template <class L, class D, int T>
void neon_gemv_lanes(const NeonArgs& a) {
  float32x4_t f[T][4];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) f[t][v] = vdupq_n_f32(0.0f);
  }
  for (size_t b = 0; b < a.blocks; ++b) {
    const int8x16x2_t x = vld1q_s8_x2(a.q + b * kActBlock);
    const typename D::Acc start = D::init(D::template start<L>(a.x_sums[b]));
    typename D::Acc acc[T][4];
    const uint8_t* blocks[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      blocks[t] = L::block(a.tile0 + t * a.tile_bytes, b, a.group);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[t][v] = start;
    }
    gemv_steps<L, D, T>(blocks, x, acc, std::make_integer_sequence<int, kNeonSteps>{});
    const float xs = a.x_scales[b];
    if constexpr (L::kBlockScales) {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const uint8x16x2_t halves = vld1q_u8_x2(L::scales(a.tile0 + t * a.tile_bytes, b, a.group));
        const float16x8_t lo = vreinterpretq_f16_u8(halves.val[0]);
        const float16x8_t hi = vreinterpretq_f16_u8(halves.val[1]);
        const float32x4_t ws[4] = {vcvt_f32_f16(vget_low_f16(lo)), vcvt_high_f32_f16(lo),
                                   vcvt_f32_f16(vget_low_f16(hi)), vcvt_high_f32_f16(hi)};
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          const float32x4_t d = vcvtq_f32_s32(D::finish(acc[t][v]));
          f[t][v] = vfmaq_f32(f[t][v], d, vmulq_n_f32(ws[v], xs));
        }
      }
    } else {
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) {
          f[t][v] = vfmaq_n_f32(f[t][v], vcvtq_f32_s32(D::finish(acc[t][v])), xs);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    const uint8_t* header = a.tile0 + t * a.tile_bytes;
    float32x4_t out[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      if constexpr (L::kHeaderScale) {
        out[v] = vfmaq_f32(load_floats(header + 4 * (kQC8Tile + 4 * v)), f[t][v],
                           load_floats(header + 16 * v));
      } else {
        out[v] = vaddq_f32(f[t][v], load_floats(header + 16 * v));
      }
    }
    float* y = a.y + t * kQC8Tile;
    if (t + 1 < T || a.last_count == kQC8Tile) {
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) vst1q_f32(y + 4 * v, out[v]);
    } else {
      float lanes[kQC8Tile];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) vst1q_f32(lanes + 4 * v, out[v]);
      store_channels<4>(y, lanes, 0, a.last_count);
    }
  }
}
#endif

#if defined(__ARM_FEATURE_MATMUL_INT8)
// R rows (in pairs) by one tile with the int8 matrix multiply (i8mm), V of the tile's 4 vectors at
// a time: SMMLA where the stored bytes are the signed weights (qc8w, qb8w, qb5w), USMMLA where they
// carry an offset (qc4w's nibbles, each block from -8 x its activation sum). Either multiplies a
// 2 x 8 matrix of weight bytes by the transpose of a 2 x 8 of signed ones into a 2 x 2 of int32:
// two channels' 8 consecutive inputs (one 32-bit zip of a step's two groups) against two rows' 8
// activations. So each accumulator holds (channel a, row 0), (a, row 1), (b, row 0), (b, row 1),
// and its float stays in that order through the epilogue; each zipped weight vector serves R / 2
// row pairs.
template <class L, int R, int V>
void neon_block_mmla(const NeonArgs& a) {
  static_assert(R % 2 == 0 && 4 % V == 0, "rows in pairs; V divides a tile's 4 vectors");
  constexpr int P = R / 2, M = 2 * V;  // Row pairs; channel pairs per pass.
  const uint8_t* tile = a.tile0;
  for (int v0 = 0; v0 < 4; v0 += V) {
    float32x4_t f[P][M];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) f[p][m] = vdupq_n_f32(0.0f);
    }
    for (size_t b = 0; b < a.blocks; ++b) {
      int32x4_t acc[P][M];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const int32_t s0 = -L::kOffset * a.x_sums[2 * p * a.blocks + b];
        const int32_t s1 = -L::kOffset * a.x_sums[(2 * p + 1) * a.blocks + b];
        const int32x4_t start = vcombine_s32(vset_lane_s32(s1, vdup_n_s32(s0), 1),
                                             vset_lane_s32(s1, vdup_n_s32(s0), 1));
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[p][m] = start;
      }
      const uint8_t* block = L::block(tile, b, a.group);
#pragma GCC unroll 4
      for (int s = 0; s < kNeonSteps; ++s) {
        uint8x16_t u[2 * V], z[M];
        L::template load<V>(block, s, v0, u);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          const uint32x4_t first = vreinterpretq_u32_u8(u[v]);
          const uint32x4_t second = vreinterpretq_u32_u8(u[V + v]);
          z[2 * v] = vreinterpretq_u8_u32(vzip1q_u32(first, second));
          z[2 * v + 1] = vreinterpretq_u8_u32(vzip2q_u32(first, second));
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const int8_t* x0 = a.q + 2 * p * a.q_stride + b * kActBlock + 8 * s;
          const int8x16_t x = vcombine_s8(vld1_s8(x0), vld1_s8(x0 + a.q_stride));
#pragma GCC unroll 8
          for (int m = 0; m < M; ++m) {
            if constexpr (L::kOffset == 0) {
              acc[p][m] = vmmlaq_s32(acc[p][m], vreinterpretq_s8_u8(z[m]), x);
            } else {
              acc[p][m] = vusmmlaq_s32(acc[p][m], z[m], x);
            }
          }
        }
      }
      // Channel pair m = 2v + e is channels 4(v0 + v) + 2e and + 1: its scales duplicated.
      float32x4_t xs[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const float32x2_t pair = vset_lane_f32(a.x_scales[(2 * p + 1) * a.blocks + b],
                                               vdup_n_f32(a.x_scales[2 * p * a.blocks + b]), 1);
        xs[p] = vcombine_f32(pair, pair);
      }
      if constexpr (L::kBlockScales) {
        const uint8_t* scales = L::scales(tile, b, a.group);
        float32x4_t ws[M];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          const float32x4_t four = load_halves(scales + 8 * (v0 + v));
          ws[2 * v] = vzip1q_f32(four, four);
          ws[2 * v + 1] = vzip2q_f32(four, four);
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
          for (int m = 0; m < M; ++m) {
            f[p][m] = vfmaq_f32(f[p][m], vcvtq_f32_s32(acc[p][m]), vmulq_f32(xs[p], ws[m]));
          }
        }
      } else {
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
          for (int m = 0; m < M; ++m) {
            f[p][m] = vfmaq_f32(f[p][m], vcvtq_f32_s32(acc[p][m]), xs[p]);
          }
        }
      }
    }
    float out[R][4 * V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const int c = 4 * (v0 + v);
      const float32x4_t bias = load_floats(tile + 4 * (L::kHeaderScale ? kQC8Tile + c : c));
      const float32x4_t bias_pairs[2] = {vzip1q_f32(bias, bias), vzip2q_f32(bias, bias)};
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 2
        for (int e = 0; e < 2; ++e) {
          float lanes[4];
          if constexpr (L::kHeaderScale) {
            const float32x4_t scale = load_floats(tile + 4 * c);
            const float32x4_t scale_pair = e == 0 ? vzip1q_f32(scale, scale)
                                                  : vzip2q_f32(scale, scale);
            vst1q_f32(lanes, vfmaq_f32(bias_pairs[e], f[p][2 * v + e], scale_pair));
          } else {
            vst1q_f32(lanes, vaddq_f32(f[p][2 * v + e], bias_pairs[e]));
          }
          // (channel a, row 0), (a, row 1), (b, row 0), (b, row 1).
          out[2 * p][4 * v + 2 * e] = lanes[0];
          out[2 * p + 1][4 * v + 2 * e] = lanes[1];
          out[2 * p][4 * v + 2 * e + 1] = lanes[2];
          out[2 * p + 1][4 * v + 2 * e + 1] = lanes[3];
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) store_channels<V>(a.y + r * a.y_stride, out[r], v0, a.last_count);
  }
}
#endif

// Runs blocks of up to kMaxRows rows by kMaxTiles tiles over every row and tile of a layout whose
// tiles are `tile_bytes` long (the int8 layouts' and the int4 one's tiles are all 16 channels).
template <int kMaxRows, int kMaxTiles>
inline void neon_run_blocks(const NeonBlockFn (&blocks)[kMaxRows][kMaxTiles], const void* packed,
                            size_t tile_bytes, size_t group, size_t k, size_t n, size_t rows,
                            const int8_t* q, size_t q_stride, const float* x_scales,
                            const int32_t* x_sums, float* y, size_t y_stride) {
  const uint8_t* w = static_cast<const uint8_t*>(packed);
  const size_t tiles = (n + kQC8Tile - 1) / kQC8Tile;
  const size_t last_count = n - (tiles - 1) * kQC8Tile;
  const size_t nb = act_blocks(k);
  for (size_t r = 0; r < rows; r += kMaxRows) {
    const size_t block_rows = rows - r < kMaxRows ? rows - r : kMaxRows;
    for (size_t t = 0; t < tiles; t += kMaxTiles) {
      const size_t block_tiles = tiles - t < kMaxTiles ? tiles - t : kMaxTiles;
      const NeonArgs args{w + t * tile_bytes,
                          tile_bytes,
                          nb,
                          group,
                          q + r * q_stride,
                          q_stride,
                          x_scales + r * nb,
                          x_sums + r * nb,
                          y + r * y_stride + t * kQC8Tile,
                          y_stride,
                          t + block_tiles == tiles ? last_count : kQC8Tile};
      blocks[block_rows - 1][block_tiles - 1](args);
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_QS8_NEON_BLOCKS_H_
