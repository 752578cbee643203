// The delegate's own kernels: one signature per kind, and every implementation of it, by
// instruction set. A kind's scalar implementation is its reference: every other one gives the same
// bits (tests compare each path the CPU can run against it). config.h picks the set a process runs.
//
// f32 fully connected over XNNPACK's packing of an f32 [n, k] weight and bias: tiles of
// kF32Tile output channels, each [kF32Tile biases][k x kF32Tile weights] (input-major within the
// tile), the last tile zero-padded. The layout is XNNPACK's implementation, not its API, so
// config.h checks it against XNNPACK once per process before any of these read XNNPACK's bytes.
// Every output is XNNPACK's arithmetic: its bias, then one FMA per input in input order, then its
// clamp to (-inf, +inf) with x86's operand order (what a NaN becomes), so results are bitwise its.
//
//   const KernelSets<F32Kernels>& sets = f32_kernel_sets();   // config.h
//   if (sets.best_isa() != Isa::kScalar) sets.best().gemv(packed, k, n, x, y);
//
// Preconditions of every kernel (the caller checks them where it picks the kernel; config.h's
// check_* functions say which fails): k >= 1, n >= 1 (rows >= 1 for a GEMM), `packed` holds
// f32_packed_bytes(k, n) bytes, x and y hold the rows they are given, strides >= k and >= n.
// Errors: none; a kernel only computes.
// Thread-safety: kernels read their inputs and write only y: any number may run at once.
// Ownership: nothing is kept.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// Output channels per packed f32 tile: XNNPACK's nr for f32 on AVX-512 and on FMA3.
constexpr size_t kF32Tile = 16;

// Bytes of XNNPACK's packing of an f32 [n, k] weight with its bias.
constexpr size_t f32_packed_bytes(size_t k, size_t n) {
  return (n + kF32Tile - 1) / kF32Tile * kF32Tile * (k + 1) * sizeof(float);
}

// f32 GEMV: y[j] = clamp(bias[j] + sum_i w[j][i] * x[i]) for j < n, one row.
using F32GemvFn = void (*)(const float* packed, size_t k, size_t n, const float* x, float* y);
void f32_gemv_scalar(const float* packed, size_t k, size_t n, const float* x, float* y);
// Four tiles at a time, then two, then one (four FMA chains and streams in flight).
void f32_gemv_4x16_avx512f(const float* packed, size_t k, size_t n, const float* x, float* y);
void f32_gemv_4x16_avx2_fma(const float* packed, size_t k, size_t n, const float* x, float* y);

// f32 GEMM: `rows` rows of x (x_stride floats apart) to rows of y (y_stride floats apart), with
// `prefetch_bytes` at `prefetch` (may be null: the next slab a run will use) asked into L2 while
// it computes.
using F32GemmFn = void (*)(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                           size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                           size_t prefetch_bytes);
void f32_gemm_scalar(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                     size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                     size_t prefetch_bytes);
// 6 rows by 1 tile at a time (12 of AVX2's 16 registers as accumulators).
void f32_gemm_6x16_avx2_fma(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                            size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                            size_t prefetch_bytes);
// 8 rows by 2 tiles at a time (16 of AVX-512's 32 registers as accumulators).
void f32_gemm_8x32_avx512f(const float* packed, size_t k, size_t n, size_t rows, const float* x,
                           size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                           size_t prefetch_bytes);

// Dynamically quantized fully connected: float activations quantized to int8 at run time in
// blocks of kActBlock inputs (qs8: per row and block, symmetric, scale = max|x_b| / 127, round to
// nearest even; an all-zero block has scale 0 and zero values; a row's result never depends on
// the other rows), int8 weights with one float scale per output channel (qc8w: symmetric, from
// the file's canonical row-major int8 [n, k] and float scales [n]). Per row and channel:
//   d_b = the exact int32 dot of block b's int8 activations and weights
//   acc = fma(float(d_b), x_scale_b, acc) over the blocks in order, from 0
//   y   = fma(acc, w_scale, bias)
// Every path fuses the same multiply-adds in the same order, so every path gives the same bits,
// and a row's bits are the same from the GEMV and from the GEMM. Per-block activation scales keep
// an outlier channel from flattening the rest of its row (llama.cpp's Q8_0 activations are
// blocked the same way); the float work they add is one convert and one multiply-add per block.
//
// The packed layout (made once, at load, by qc8w_pack; in memory only): tiles of kQC8Tile output
// channels, each
//   [16 x float: the channel's scale]
//   [16 x float: the channel's bias, 0 without one]
//   [kp / 4 groups of 16 channels x 4 consecutive inputs, each weight + kQC8WeightOffset as a byte]
// with kp = k rounded up to kActBlock and weights past n or k zero. A group is what one 512-bit
// VNNI instruction (or two 256-bit multiply-adds) consumes against 4 broadcast activation bytes,
// so the one-row kernels stream the weight once, in order, 64 bytes at a time per tile. On x86 the
// weights go in as unsigned bytes (w + 128) because VNNI multiplies unsigned by signed bytes:
// against the signed activations each block's dot then carries 128 * the block's activation sum,
// which the kernels take off (the sums come with the quantized rows), and the stream stays one byte
// a weight. On aarch64 they go in as they are (offset 0): the dot products there (SDOT, SMMLA) and
// NEON's SMULL multiply signed by signed bytes, so an unsigned store would cost a sign flip per
// weight vector in every one-row kernel. The packing is made at load on the CPU that runs it,
// never stored, so the two architectures need not agree on it.
// Quantized rows are kp bytes long, zero past k.
#if defined(__aarch64__)
constexpr int32_t kQC8WeightOffset = 0;
#else
constexpr int32_t kQC8WeightOffset = 128;
#endif
// A stored qc8w or qb8w byte as the value the kernels multiply: w + kQC8WeightOffset.
constexpr int32_t qc8_stored_value(uint8_t stored) {
  return kQC8WeightOffset == 0 ? static_cast<int32_t>(static_cast<int8_t>(stored))
                               : static_cast<int32_t>(stored);
}
// The byte qc8w_pack and qb8w_pack store for weight w.
constexpr uint8_t qc8_stored_byte(int8_t w) {
  return static_cast<uint8_t>(static_cast<int32_t>(w) + kQC8WeightOffset);
}
constexpr size_t kActBlock = 32;
constexpr size_t kQC8Tile = 16;
constexpr size_t kQC8KBlock = 4;
constexpr size_t kQC8HeaderBytes = kQC8Tile * 2 * 4;

constexpr size_t qc8_padded_k(size_t k) { return (k + kActBlock - 1) / kActBlock * kActBlock; }
// Activation blocks (scales and sums) per row of k inputs.
constexpr size_t act_blocks(size_t k) { return qc8_padded_k(k) / kActBlock; }
constexpr size_t qc8_tile_bytes(size_t k) { return kQC8HeaderBytes + qc8_padded_k(k) * kQC8Tile; }
// Bytes of the packing of an [n, k] int8 weight.
constexpr size_t qc8_packed_bytes(size_t k, size_t n) {
  return (n + kQC8Tile - 1) / kQC8Tile * qc8_tile_bytes(k);
}

// Packs row-major int8 weights [n, k] (each in [-127, 127]) with their scales [n] and bias [n]
// (null: none) into qc8_packed_bytes(k, n) bytes at `packed` (64-byte aligned for the vector
// kernels' best speed).
void qc8w_pack(const int8_t* weight, const float* scales, const float* bias, size_t k, size_t n,
               void* packed);

// Quantizes `rows` rows of k floats (x_stride apart; finite) to qc8_padded_k(k) int8 each
// (q_stride apart, zero past k) with act_blocks(k) scales and int32 sums of the block's int8
// values per row (row r's at scales + r * act_blocks(k) and sums + r * act_blocks(k)).
using QS8QuantizeFn = void (*)(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                               size_t q_stride, float* scales, int32_t* sums);
void qs8_quantize_scalar(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                         size_t q_stride, float* scales, int32_t* sums);
void qs8_quantize_avx2(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                       size_t q_stride, float* scales, int32_t* sums);
void qs8_quantize_avx512f(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                          size_t q_stride, float* scales, int32_t* sums);
void qs8_quantize_neon(const float* x, size_t k, size_t rows, size_t x_stride, int8_t* q,
                       size_t q_stride, float* scales, int32_t* sums);

// The root-mean-square norm of `rows` rows of `channels` floats each (channels >= 1; y may not
// overlap x or w): y[r, c] = w[c] * (x[r, c] * (1 / sqrt(sum / channels + eps))), sum the row's
// squares. So that every set gives the scalar reference's bits, the sum has one order: 16 lanes,
// lane j adding the squares of channels j, j + 16, j + 32, ... in turn with one fused multiply-add
// each, then folded in halves (lanes j and j + 8, then j and j + 4, j and j + 2, 0 and 1).
using F32RmsNormFn = void (*)(size_t rows, size_t channels, const float* x, const float* w,
                              float eps, float* y);
void f32_rmsnorm_scalar(size_t rows, size_t channels, const float* x, const float* w, float eps,
                        float* y);
void f32_rmsnorm_avx2(size_t rows, size_t channels, const float* x, const float* w, float eps,
                      float* y);
void f32_rmsnorm_avx512f(size_t rows, size_t channels, const float* x, const float* w, float eps,
                         float* y);
void f32_rmsnorm_neon(size_t rows, size_t channels, const float* x, const float* w, float eps,
                      float* y);

// The int8 fully connected over quantized rows: x_scales and x_sums as the quantizer writes them.
// GEMV: one row to y[0, n).
using QS8QC8WGemvFn = void (*)(const void* packed, size_t k, size_t n, const int8_t* q,
                               const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemv_scalar(const void* packed, size_t k, size_t n, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y);
// Four tiles at a time (four streams in flight), as the f32 GEMV.
void qs8_qc8w_gemv_4x16_avx2(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemv_4x16_avxvnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                   const float* x_scales, const int32_t* x_sums, float* y);
// GEMM: `rows` rows (q_stride bytes apart; scales and sums act_blocks(k) apart) to rows of y
// (y_stride floats apart).
using QS8QC8WGemmFn = void (*)(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                               size_t q_stride, const float* x_scales, const int32_t* x_sums,
                               float* y, size_t y_stride);
void qs8_qc8w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                          size_t y_stride);
void qs8_qc8w_gemm_4x16_avx2(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qc8w_gemm_4x16_avxvnni(const void* packed, size_t k, size_t n, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qc8w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t rows,
                                   const int8_t* q, size_t q_stride, const float* x_scales,
                                   const int32_t* x_sums, float* y, size_t y_stride);
// aarch64 (qs8_neon_blocks.h): NEON's one tile (SMULL, SADALP) and two rows by one tile; the dot
// product's two tiles (SDOT by element) and four rows by one tile; i8mm's two tiles (the dot
// product's) and four rows by one tile with SMMLA (rows in pairs).
void qs8_qc8w_gemv_1x16_neon(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemm_2x16_neon(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qc8w_gemv_2x16_neondot(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemm_4x16_neondot(const void* packed, size_t k, size_t n, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qc8w_gemv_2x16_neoni8mm(const void* packed, size_t k, size_t n, const int8_t* q,
                                 const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qc8w_gemm_4x16_neoni8mm(const void* packed, size_t k, size_t n, size_t rows,
                                 const int8_t* q, size_t q_stride, const float* x_scales,
                                 const int32_t* x_sums, float* y, size_t y_stride);

// int8 weights with one float16 scale per block of kActBlock inputs (qb8w: symmetric, llama.cpp's
// Q8_0 grain; the file's canonical layout is int8 [n, k] and float16 scales [n, k / kActBlock], k a
// multiple of kActBlock), activations as above. Per row and channel:
//   d_b = the exact int32 dot of block b's int8 activations and weights
//   acc = fma(float(d_b), x_scale_b * w_scale_b, acc) over the blocks in order, from 0, the
//         product rounded to float first
//   y   = acc + bias
// as the int4 kernels below do per group; every path gives the scalar reference's bits. A scale
// per block keeps one large weight from coarsening the other k - 32 of its row.
//
// The packed layout (made once, at load, by qb8w_pack): tiles of kQC8Tile output channels, each
//   [16 x float: 1.0][16 x float: the channel's bias, 0 without one]   (qc8w's header)
//   per pair of blocks (b, b + 1):
//     [block b: kActBlock / 4 groups of 16 channels x 4 inputs, each weight as qc8w stores it]
//     [block b + 1: likewise]
//     [16 x float16: block b's scales][16 x float16: block b + 1's scales]
// (an odd last block has zero weights and scales in place of its pair's second), so every group
// and every pair's scales start on a 64-byte line. The header's scales of 1 let the int8 kernels'
// epilogue fma(acc, scale, bias) serve both layouts: fma(acc, 1, bias) is acc + bias exactly.
constexpr size_t kQB8BlockBytes = kActBlock * kQC8Tile;
constexpr size_t kQB8ScaleBytes = kQC8Tile * 2;
constexpr size_t kQB8PairBytes = 2 * kQB8BlockBytes + 2 * kQB8ScaleBytes;

// Where block b's groups and its 16 scales start within a tile.
constexpr size_t qb8_block_offset(size_t b) {
  return kQC8HeaderBytes + b / 2 * kQB8PairBytes + b % 2 * kQB8BlockBytes;
}
constexpr size_t qb8_scales_offset(size_t b) {
  return kQC8HeaderBytes + b / 2 * kQB8PairBytes + 2 * kQB8BlockBytes + b % 2 * kQB8ScaleBytes;
}
constexpr size_t qb8_tile_bytes(size_t k) {
  return kQC8HeaderBytes + (act_blocks(k) + 1) / 2 * kQB8PairBytes;
}
// Bytes of the packing of an [n, k] int8 weight with block scales.
constexpr size_t qb8_packed_bytes(size_t k, size_t n) {
  return (n + kQC8Tile - 1) / kQC8Tile * qb8_tile_bytes(k);
}

// Packs row-major int8 weights [n, k] (each in [-127, 127]; k a multiple of kActBlock) with their
// float16 scales (uint16 bits, [n, k / kActBlock]) and bias [n] (null: none) into
// qb8_packed_bytes(k, n) bytes at `packed` (64-byte aligned for the vector kernels' best speed).
void qb8w_pack(const int8_t* weight, const uint16_t* scales, const float* bias, size_t k, size_t n,
               void* packed);

// The qb8w fully connected over quantized rows, with the int8 kinds' signatures (k: a multiple of
// kActBlock, so the quantized rows are k bytes long).
using QS8QB8WGemvFn = QS8QC8WGemvFn;
using QS8QB8WGemmFn = QS8QC8WGemmFn;
void qs8_qb8w_gemv_scalar(const void* packed, size_t k, size_t n, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                          size_t y_stride);
// As the qc8w kernels of the same names; the AVX2 ones also need F16C.
void qs8_qb8w_gemv_4x16_avx2(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_4x16_avx2(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qb8w_gemv_4x16_avxvnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_4x16_avxvnni(const void* packed, size_t k, size_t n, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qb8w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                   const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t rows,
                                   const int8_t* q, size_t q_stride, const float* x_scales,
                                   const int32_t* x_sums, float* y, size_t y_stride);
// aarch64: as the qc8w kernels of the same names.
void qs8_qb8w_gemv_1x16_neon(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_2x16_neon(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qb8w_gemv_2x16_neondot(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_4x16_neondot(const void* packed, size_t k, size_t n, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qb8w_gemv_2x16_neoni8mm(const void* packed, size_t k, size_t n, const int8_t* q,
                                 const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb8w_gemm_4x16_neoni8mm(const void* packed, size_t k, size_t n, size_t rows,
                                 const int8_t* q, size_t q_stride, const float* x_scales,
                                 const int32_t* x_sums, float* y, size_t y_stride);

// 5-bit weights with one float16 scale per block of kActBlock inputs (qb5w: signed values in
// [-16, 15], llama.cpp Q5_0's grain and size, 5.5 bits a weight), activations as above. The file's
// canonical layout is uint8 [n, k * 5 / 8]: per row and block of 32 values u = w + 16 (in [0, 31]),
// 16 bytes of low nibbles (value 2j in the low nibble of byte j, 2j + 1 in its high one), then 4
// bytes whose little-endian bit i is bit 4 of value i; and float16 scales [n, k / kActBlock].
// The arithmetic is qb8w's (same order of float operations, bit for bit the scalar reference's on
// every path); only the weights' bytes differ.
//
// The packed layout (made once, at load, by qb5w_pack): tiles of kQC8Tile output channels, each
//   [16 x float: 1.0][16 x float: the channel's bias, 0 without one]   (qb8w's header)
//   per pair of blocks (b, b + 1):
//     [block b: 4 x 64 nibble bytes, then 64 bytes of fifth bits]
//     [block b + 1: likewise]
//     [16 x float16: block b's scales][16 x float16: block b + 1's scales]
// A block's 8 groups are qb8w's (16 channels x 4 inputs, byte 4c + i for channel c and input i of
// the group); nibble vector v's byte holds the low 4 bits of u in group v's byte in its low nibble
// and of group v + 4's in its high one, and byte i of the fifth bits holds bit 4 of u in group
// g's byte i at bit g. So a vector kernel rebuilds a group's 64 bytes as the bytes qb8w stores
// from one nibble load and one bit test: w + 128 = (u & 15) | (bit 4 of u ? 0x80 : 0x70) on x86,
// w = (u & 15) | (bit 4 of u ? 0 : 0xF0) on aarch64.
constexpr size_t kQB5NibbleBytes = kActBlock * kQC8Tile / 2;
constexpr size_t kQB5BitsBytes = kActBlock * kQC8Tile / 8;
constexpr size_t kQB5BlockBytes = kQB5NibbleBytes + kQB5BitsBytes;
constexpr size_t kQB5PairBytes = 2 * kQB5BlockBytes + 2 * kQB8ScaleBytes;
// Bytes of one row's block in the canonical layout (32 values at 5 bits).
constexpr size_t kQB5RowBlockBytes = kActBlock * 5 / 8;

// Where block b's nibbles (its fifth bits follow them) and its 16 scales start within a tile.
constexpr size_t qb5_block_offset(size_t b) {
  return kQC8HeaderBytes + b / 2 * kQB5PairBytes + b % 2 * kQB5BlockBytes;
}
constexpr size_t qb5_scales_offset(size_t b) {
  return kQC8HeaderBytes + b / 2 * kQB5PairBytes + 2 * kQB5BlockBytes + b % 2 * kQB8ScaleBytes;
}
constexpr size_t qb5_tile_bytes(size_t k) {
  return kQC8HeaderBytes + (act_blocks(k) + 1) / 2 * kQB5PairBytes;
}
// Bytes of the packing of an [n, k] 5-bit weight with block scales.
constexpr size_t qb5_packed_bytes(size_t k, size_t n) {
  return (n + kQC8Tile - 1) / kQC8Tile * qb5_tile_bytes(k);
}

// Packs canonical 5-bit weights ([n, k * 5 / 8] bytes as above; k a multiple of kActBlock) with
// their float16 scales (uint16 bits, [n, k / kActBlock]) and bias [n] (null: none) into
// qb5_packed_bytes(k, n) bytes at `packed` (64-byte aligned for the vector kernels' best speed).
void qb5w_pack(const uint8_t* weight, const uint16_t* scales, const float* bias, size_t k,
               size_t n, void* packed);

// The qb5w fully connected over quantized rows, with the int8 kinds' signatures (k: a multiple of
// kActBlock).
using QS8QB5WGemvFn = QS8QC8WGemvFn;
using QS8QB5WGemmFn = QS8QC8WGemmFn;
void qs8_qb5w_gemv_scalar(const void* packed, size_t k, size_t n, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums, float* y,
                          size_t y_stride);
// As the qb8w kernels of the same names (AVX2 with FMA and F16C).
void qs8_qb5w_gemv_4x16_avx2(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_4x16_avx2(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qb5w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, const int8_t* q,
                                   const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t rows,
                                   const int8_t* q, size_t q_stride, const float* x_scales,
                                   const int32_t* x_sums, float* y, size_t y_stride);
// aarch64: as the qb8w kernels of the same names over each group rebuilt as qb8w's bytes.
void qs8_qb5w_gemv_1x16_neon(const void* packed, size_t k, size_t n, const int8_t* q,
                             const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_2x16_neon(const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                             size_t q_stride, const float* x_scales, const int32_t* x_sums,
                             float* y, size_t y_stride);
void qs8_qb5w_gemv_2x16_neondot(const void* packed, size_t k, size_t n, const int8_t* q,
                                const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_4x16_neondot(const void* packed, size_t k, size_t n, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qb5w_gemv_2x16_neoni8mm(const void* packed, size_t k, size_t n, const int8_t* q,
                                 const float* x_scales, const int32_t* x_sums, float* y);
void qs8_qb5w_gemm_4x16_neoni8mm(const void* packed, size_t k, size_t n, size_t rows,
                                 const int8_t* q, size_t q_stride, const float* x_scales,
                                 const int32_t* x_sums, float* y, size_t y_stride);

// f32 activations times IEEE half weights (f16w), f32 output: the weights are read as halves (half
// the bytes of f32, what one-row runs are bound by) and widened in registers, with no convert of
// the activations or the output around the kernel. Each output is its bias, then one FMA per input
// in input order over the exactly widened weight, with no clamp (a NaN stays a NaN), so every path
// gives the scalar reference's bits.
//
// The packed layout (made once, at load, by f16w_pack from the file's canonical row-major half
// [n, k] weight and half bias [n]): tiles of kF16WTile output channels, each
//   [16 x float: the channels' biases, widened; 0 without one]
//   [k x 16 x half: input-major, so one input's 16 weights are 32 consecutive bytes]
// with channels past n zero. A one-row kernel streams each tile once, in order.
constexpr size_t kF16WTile = 16;

constexpr size_t f16w_tile_bytes(size_t k) { return kF16WTile * (4 + 2 * k); }
// Bytes of the packing of a half [n, k] weight with its bias.
constexpr size_t f16w_packed_bytes(size_t k, size_t n) {
  return (n + kF16WTile - 1) / kF16WTile * f16w_tile_bytes(k);
}

// Packs row-major half weights [n, k] and their half bias [n] (null: none) into
// f16w_packed_bytes(k, n) bytes at `packed` (64-byte aligned for the vector kernels' best speed).
void f16w_pack(const uint16_t* weight, const uint16_t* bias, size_t k, size_t n, void* packed);

// f32 x f16w GEMV: y[j] = bias[j] + sum_i w[j][i] * x[i] for j < n, one row.
using F32F16WGemvFn = void (*)(const void* packed, size_t k, size_t n, const float* x, float* y);
void f32_f16w_gemv_scalar(const void* packed, size_t k, size_t n, const float* x, float* y);
// Four tiles at a time, then two, then one (four FMA chains and streams in flight), as the f32
// GEMV; the AVX2 one also needs F16C.
void f32_f16w_gemv_4x16_avx2_f16c(const void* packed, size_t k, size_t n, const float* x, float* y);
void f32_f16w_gemv_4x16_avx512f(const void* packed, size_t k, size_t n, const float* x, float* y);
// aarch64 NEON (f32_f16w_neon.h): two tiles at a time, then one.
void f32_f16w_gemv_2x16_neon(const void* packed, size_t k, size_t n, const float* x, float* y);

// f32 x f16w GEMM: `rows` rows of x (x_stride floats apart) to rows of y (y_stride floats apart),
// with `prefetch_bytes` at `prefetch` (may be null) asked into L2 while it computes, as the f32
// GEMM. Each widened weight vector serves every row of a block.
using F32F16WGemmFn = void (*)(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                               size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                               size_t prefetch_bytes);
void f32_f16w_gemm_scalar(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                          size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                          size_t prefetch_bytes);
// 4 rows by 1 tile at a time (8 of AVX2's 16 registers as accumulators); needs F16C.
void f32_f16w_gemm_4x16_avx2_f16c(const void* packed, size_t k, size_t n, size_t rows,
                                  const float* x, size_t x_stride, float* y, size_t y_stride,
                                  const void* prefetch, size_t prefetch_bytes);
// 8 rows by 2 tiles at a time, as the f32 AVX-512 GEMM.
void f32_f16w_gemm_8x32_avx512f(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                                size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                                size_t prefetch_bytes);
// 4 rows by 1 tile at a time, aarch64 NEON (the prefetch hint unused).
void f32_f16w_gemm_4x16_neon(const void* packed, size_t k, size_t n, size_t rows, const float* x,
                             size_t x_stride, float* y, size_t y_stride, const void* prefetch,
                             size_t prefetch_bytes);


// Dynamically quantized int4 fully connected: activations as above (qs8, blocks of kActBlock),
// weights signed 4-bit in groups of `group` inputs (32, 64 or 128: whole activation blocks) with
// one float16 scale per channel and group (qc4w, exir/quantize.py; the file's canonical layout is
// uint8 [n, k / 2], element 2i in the low nibble of byte i, two's complement, and float16 scales
// [n, k / group]). Per row and channel:
//   d_b = the exact int32 dot of activation block b's int8 values and int4 weights
//   acc = fma(float(d_b), x_scale_b * w_scale_g, acc) over the blocks in order (g: b's group),
//         from 0, the product x_scale_b * w_scale_g rounded to float first
//   y   = acc + bias
// Every path fuses the same multiply-adds in the same order, so every path gives the same bits.
//
// The packed layout (made once, at load, by qc4w_pack): tiles of kQC4Tile output channels, each
//   [16 x float: the channel's bias, 0 without one]
//   per pair of groups (g, g + 1):
//     [group / 8 blocks of 64 bytes: group g][group / 8 blocks: group g + 1]
//     [16 x float16: group g's scales][16 x float16: group g + 1's scales]
// (an odd last group has zero blocks and scales in place of its pair's second), so every block
// and every pair's scales start on a 64-byte line and no load of a kernel straddles two lines.
// A block holds 8 consecutive inputs i0..i0+7 of the 16 channels: byte 4c + j has input i0 + j of
// channel c in its low nibble and input i0 + 4 + j in its high nibble, each as weight + 8 (0..15),
// so an unsigned-by-signed dot (VNNI's, or AVX2's multiply-add) reads the low nibbles against 4
// broadcast activation bytes and the high nibbles against the next 4. The + 8 adds 8 * (the sum of
// the activation block) to each block's dot, which the kernels subtract (the quantizer's sums).
// Channels past n are zero. k is a multiple of the group, so quantized rows have no padding.
constexpr size_t kQC4Tile = 16;
constexpr size_t kQC4KBlock = 8;
constexpr size_t kQC4BlockBytes = 64;
constexpr size_t kQC4HeaderBytes = kQC4Tile * 4;
constexpr size_t kQC4ScaleBytes = kQC4Tile * 2;

// Bytes of one group's blocks, and of a pair of groups with their scales.
constexpr size_t qc4_blocks_bytes(size_t group) { return group / kQC4KBlock * kQC4BlockBytes; }
constexpr size_t qc4_pair_bytes(size_t group) {
  return 2 * qc4_blocks_bytes(group) + 2 * kQC4ScaleBytes;
}
// Where group g's blocks and its 16 scales start within a tile.
constexpr size_t qc4_blocks_offset(size_t g, size_t group) {
  return kQC4HeaderBytes + g / 2 * qc4_pair_bytes(group) + g % 2 * qc4_blocks_bytes(group);
}
constexpr size_t qc4_scales_offset(size_t g, size_t group) {
  return kQC4HeaderBytes + g / 2 * qc4_pair_bytes(group) + 2 * qc4_blocks_bytes(group) +
         g % 2 * kQC4ScaleBytes;
}
constexpr size_t qc4_tile_bytes(size_t k, size_t group) {
  return kQC4HeaderBytes + (k / group + 1) / 2 * qc4_pair_bytes(group);
}
// Bytes of the packing of an [n, k] int4 weight in groups of `group`.
constexpr size_t qc4_packed_bytes(size_t k, size_t n, size_t group) {
  return (n + kQC4Tile - 1) / kQC4Tile * qc4_tile_bytes(k, group);
}

// Packs the canonical int4 weight (uint8 [n, k / 2]) with its float16 scales (uint16 bits,
// [n, k / group]) and bias [n] (null: none) into qc4_packed_bytes(k, n, group) bytes at `packed`
// (64-byte aligned for the vector kernels' best speed: every load then stays within a line).
void qc4w_pack(const uint8_t* weight, const uint16_t* scales, const float* bias, size_t k, size_t n,
               size_t group, void* packed);

// GEMV: one row (q: k int8, x_scales and x_sums: its blocks' as the quantizer writes them) to
// y[0, n).
using QS8QC4WGemvFn = void (*)(const void* packed, size_t k, size_t n, size_t group,
                               const int8_t* q, const float* x_scales, const int32_t* x_sums,
                               float* y);
void qs8_qc4w_gemv_scalar(const void* packed, size_t k, size_t n, size_t group, const int8_t* q,
                          const float* x_scales, const int32_t* x_sums, float* y);
// Two tiles at a time (two weight streams).
void qs8_qc4w_gemv_2x16_avx2(const void* packed, size_t k, size_t n, size_t group,
                             const int8_t* q, const float* x_scales, const int32_t* x_sums,
                             float* y);
// Two tiles at a time, AVX-VNNI's dot.
void qs8_qc4w_gemv_2x16_avxvnni(const void* packed, size_t k, size_t n, size_t group,
                                const int8_t* q, const float* x_scales, const int32_t* x_sums,
                                float* y);
// Four tiles at a time (four weight streams).
void qs8_qc4w_gemv_4x16_avx512vnni(const void* packed, size_t k, size_t n, size_t group,
                                   const int8_t* q, const float* x_scales, const int32_t* x_sums,
                                   float* y);
// GEMM: `rows` rows (q_stride bytes apart, scales and sums act_blocks(k) apart) to rows of y
// (y_stride floats apart); each weight block is unpacked once for a tile of rows.
using QS8QC4WGemmFn = void (*)(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                               const int8_t* q, size_t q_stride, const float* x_scales,
                               const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qc4w_gemm_scalar(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                          const int8_t* q, size_t q_stride, const float* x_scales,
                          const int32_t* x_sums, float* y, size_t y_stride);
// Eight rows by one tile at a time (the rows left over four, two, then one at a time).
void qs8_qc4w_gemm_8x16_avx2(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                             const int8_t* q, size_t q_stride, const float* x_scales,
                             const int32_t* x_sums, float* y, size_t y_stride);
// Eight rows by one tile at a time, AVX-VNNI's dot (the rows left over four, two, then one at a
// time).
void qs8_qc4w_gemm_8x16_avxvnni(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                                const int8_t* q, size_t q_stride, const float* x_scales,
                                const int32_t* x_sums, float* y, size_t y_stride);
// Four rows by two tiles at a time.
void qs8_qc4w_gemm_4x32_avx512vnni(const void* packed, size_t k, size_t n, size_t group,
                                   size_t rows, const int8_t* q, size_t q_stride,
                                   const float* x_scales, const int32_t* x_sums, float* y,
                                   size_t y_stride);
// Eight rows by two tiles at a time, the rest as the four-row tile: a batch's eight decode rows
// unpack each weight block once.
void qs8_qc4w_gemm_8x32_avx512vnni(const void* packed, size_t k, size_t n, size_t group,
                                   size_t rows, const int8_t* q, size_t q_stride,
                                   const float* x_scales, const int32_t* x_sums, float* y,
                                   size_t y_stride);
// aarch64: as the qc8w kernels of the same names, each block's dot from -8 x its activation sum;
// the nibbles are small positive bytes, so SDOT's GEMV also serves the i8mm set.
void qs8_qc4w_gemv_1x16_neon(const void* packed, size_t k, size_t n, size_t group,
                             const int8_t* q, const float* x_scales, const int32_t* x_sums,
                             float* y);
void qs8_qc4w_gemm_2x16_neon(const void* packed, size_t k, size_t n, size_t group, size_t rows,
                             const int8_t* q, size_t q_stride, const float* x_scales,
                             const int32_t* x_sums, float* y, size_t y_stride);
void qs8_qc4w_gemv_2x16_neondot(const void* packed, size_t k, size_t n, size_t group,
                                const int8_t* q, const float* x_scales, const int32_t* x_sums,
                                float* y);
void qs8_qc4w_gemm_4x16_neondot(const void* packed, size_t k, size_t n, size_t group,
                                size_t rows, const int8_t* q, size_t q_stride,
                                const float* x_scales, const int32_t* x_sums, float* y,
                                size_t y_stride);
void qs8_qc4w_gemm_4x16_neoni8mm(const void* packed, size_t k, size_t n, size_t group,
                                 size_t rows, const int8_t* q, size_t q_stride,
                                 const float* x_scales, const int32_t* x_sums, float* y,
                                 size_t y_stride);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_KERNELS_H_
