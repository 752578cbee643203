// Which kernels a process runs: chosen once, by CPU features and a probe, as XNNPACK's
// src/configs/gemm-config.c chooses its micro-kernels.
//
// f32_kernels() is the set the delegate runs over XNNPACK's packed f32 weights: per kind, the
// widest implementation this CPU runs, kept only when a probe shows it reads XNNPACK's packing of
// a probe weight to the same size and bits as XNNPACK's own run (another XNNPACK or CPU that packs
// otherwise leaves that kind to XNNPACK). A kind without a kernel there (null) runs XNNPACK's
// operators: over XNNPACK's packing the scalar reference is never faster than they are, so it is
// the reference that tests compare with, not a fallback.
//
//   ES_RETURN_IF_ERROR(check_f32_kernel_args(k, n, packed, packed_bytes));   // where chosen
//   const F32Kernels& set = f32_kernels();
//   if (set.gemv != nullptr) set.gemv(packed, k, n, x, y);   // else XNNPACK's operator runs
//
// Tests force the lesser paths with f32_kernels_up_to(Isa::kAvx2Fma) and compare each with the
// scalar reference (f32_kernels_up_to(Isa::kScalar)).
//
// Errors: check_* return InvalidArgument naming the broken precondition.
// Thread-safety: every function may be called from any thread; the first f32_kernels() call runs
// the probe (XNNPACK must be initialised first: initialize_xnnpack()), others wait for it.
// Ownership: the returned sets are static; function pointers stay valid for the process.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_

#include <cstddef>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// Instruction sets the kernel files are written for, each a superset of the one before but
// AVX-VNNI, which CPUs with AVX-512 may lack (every pick checks cpu_runs, not just the order).
enum class Isa {
  kScalar,
  kAvx2Fma,     // AVX2 and FMA3.
  kAvxVnni,     // AVX2, FMA3 and AVX-VNNI (VPDPBUSD on 256-bit vectors, VEX-encoded).
  kAvx512f,     // AVX-512 Foundation.
  kAvx512Vnni,  // AVX-512 F, BW, VL and VNNI.
};
const char* to_string(Isa isa);
// Whether this CPU runs `isa` (kScalar: always).
bool cpu_runs(Isa isa);

struct F32Kernels {
  Isa gemv_isa = Isa::kScalar;
  F32GemvFn gemv = nullptr;  // Null: XNNPACK's operator runs one row.
  Isa gemm_isa = Isa::kScalar;
  F32GemmFn gemm = nullptr;  // Null: XNNPACK's operator runs several rows.
};

// Per kind, the widest implementation this CPU runs at or below `max_isa` (the scalar reference
// when nothing wider), unprobed: for tests, which force every path the CPU runs.
F32Kernels f32_kernels_up_to(Isa max_isa);

// The set this process runs over XNNPACK's packing (see above), chosen and probed on first use.
const F32Kernels& f32_kernels();

// True when `gemv` (or `gemm`, at 2, 11 and 32 rows) reads XNNPACK's packing of a probe weight
// (odd sizes: a partial last tile) to the same size and the same bits as XNNPACK's run, on finite
// inputs and with a NaN. XNNPACK must be initialised with the delegate's allocator
// (initialize_xnnpack), else false.
bool f32_gemv_matches_xnnpack(F32GemvFn gemv);
bool f32_gemm_matches_xnnpack(F32GemmFn gemm);

// The int8 fully connected's kinds (kernels.h): the quantizer, the integer dot's GEMV and GEMM.
// The epilogue has one implementation (qc8w_dequantize).
struct QS8Kernels {
  Isa quantize_isa = Isa::kScalar;
  QS8QuantizeFn quantize = nullptr;
  Isa gemv_isa = Isa::kScalar;
  QS8QC8WGemvFn gemv = nullptr;
  Isa gemm_isa = Isa::kScalar;
  QS8QC8WGemmFn gemm = nullptr;
};

// Per kind, the widest implementation this CPU runs at or below `max_isa` (the scalar reference
// when nothing wider), unchecked: for tests, which force every path the CPU runs.
QS8Kernels qs8_kernels_up_to(Isa max_isa);

// The set this process runs: per kind the widest the CPU runs, kept only when it gives the scalar
// reference's bytes, scales and accumulators on a probe at first use (else the scalar reference,
// which is the fallback here: nothing else computes this). Never null.
const QS8Kernels& qs8_kernels();

// True when every kind of `set` equals the scalar reference on a probe (rows around the blocks,
// k and n not multiples of the tiles).
bool qs8_matches_reference(const QS8Kernels& set);

// The preconditions the f32 kernels share (kernels.h) for an [n, k] weight packed at `packed` in
// `packed_bytes` bytes.
// Errors: InvalidArgument when k or n is 0, packed is null or packed_bytes is not
// f32_packed_bytes(k, n).
runtime::Status check_f32_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// The preconditions of the int8 kernels for an [n, k] weight packed at `packed` in
// `packed_bytes` bytes (qc8w_pack's layout), run over `rows` rows.
// Errors: InvalidArgument when k or n is 0, k is too long for exact int32 sums, packed is null or
// packed_bytes is not qc8_packed_bytes(k, n).
runtime::Status check_qs8_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// Scratch an int8 fully connected run of up to `max_rows` rows of k inputs and n outputs works in,
// held by the caller so that runs allocate nothing.
struct QS8Scratch {
  int8_t* q = nullptr;      // max_rows x qc8_padded_k(k) bytes.
  float* scales = nullptr;  // max_rows floats.
  int32_t* acc = nullptr;   // max_rows x n int32.
  size_t max_rows = 0;
};

// y = the int8 fully connected of `rows` rows of x (x_stride floats apart) into rows of y
// (y_stride floats apart): quantize, integer dot (GEMV for one row, GEMM for more), epilogue,
// with `set`'s kernels.
// Errors: InvalidArgument when check_qs8_kernel_args fails, rows exceed the scratch, a buffer is
// null or a stride is too short, or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qc8w_fully_connected(const QS8Kernels& set, const void* packed,
                                         size_t packed_bytes, size_t k, size_t n, size_t rows,
                                         const float* x, size_t x_stride, float* y, size_t y_stride,
                                         const QS8Scratch& scratch);

// The same in two steps, for a weight run as column slabs (on several threads): the rows are
// quantized once into scratch.q and scratch.scales, then each slab runs the dot and the epilogue
// over them with an accumulator block of its own (`acc`: rows x n int32). A slab of channels
// [first, first + n) with `first` a multiple of kQC8Tile is the packing's tiles from
// packed + first / kQC8Tile * qc8_tile_bytes(k), and writes y + first.
// Errors: as above.
runtime::Status qs8_quantize_rows(const QS8Kernels& set, size_t k, size_t rows, const float* x,
                                  size_t x_stride, const QS8Scratch& scratch);
runtime::Status qs8_qc8w_run_quantized(const QS8Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t rows,
                                       const QS8Scratch& scratch, int32_t* acc, float* y,
                                       size_t y_stride);

// The f32 x f16w fully connected's kinds (kernels.h): GEMV and GEMM over f16w_pack's layout.
// The AVX2 path also needs F16C (checked with it: an AVX2 CPU without F16C runs the scalar one).
struct F16WKernels {
  Isa gemv_isa = Isa::kScalar;
  F32F16WGemvFn gemv = nullptr;
  Isa gemm_isa = Isa::kScalar;
  F32F16WGemmFn gemm = nullptr;
};

// Per kind, the widest implementation this CPU runs at or below `max_isa` (the scalar reference
// when nothing wider), unchecked: for tests, which force every path the CPU runs.
F16WKernels f16w_kernels_up_to(Isa max_isa);

// The set this process runs: per kind the widest the CPU runs, kept only when it gives the scalar
// reference's bits on a probe at first use (else the scalar reference, which is the fallback
// here: nothing else computes this). Never null.
const F16WKernels& f16w_kernels();

// True when both kinds of `set` equal the scalar reference bit for bit on a probe (k and n not
// multiples of the tiles; 1, 2, 11 and 32 rows).
bool f16w_matches_reference(const F16WKernels& set);

// The preconditions of the f16w kernels for an [n, k] weight packed at `packed` in
// `packed_bytes` bytes (f16w_pack's layout).
// Errors: InvalidArgument when k or n is 0, packed is null or packed_bytes is not
// f16w_packed_bytes(k, n).
runtime::Status check_f16w_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// The int4 fully connected's kinds (kernels.h): GEMV and GEMM over the qc4w packing, each with
// its fused float epilogue; the activations are quantized with a QS8Kernels set's quantizer.
// Defined in qc4w_config.cc.
struct QC4Kernels {
  Isa gemv_isa = Isa::kScalar;
  QS8QC4WGemvFn gemv = nullptr;
  Isa gemm_isa = Isa::kScalar;
  QS8QC4WGemmFn gemm = nullptr;
};

// Per kind, the widest implementation this CPU runs at or below `max_isa` (the AVX2 one also
// needs F16C), unchecked: for tests, which force every path the CPU runs.
QC4Kernels qc4_kernels_up_to(Isa max_isa);

// The set this process runs: the widest the CPU runs, kept only when it gives the scalar
// reference's bits on a probe at first use (else the scalar reference). Never null.
const QC4Kernels& qc4_kernels();

// True when both kinds of `set` give the scalar reference's bits on a probe (every group size,
// rows around the blocks, n not a multiple of the tiles).
bool qc4_matches_reference(const QC4Kernels& set);

// The preconditions of the int4 kernels for an [n, k] weight in groups of `group` packed at
// `packed` in `packed_bytes` bytes (qc4w_pack's layout).
// Errors: InvalidArgument when k or n is 0, group is not 32, 64 or 128, k is not a multiple of
// it, packed is null or packed_bytes is not qc4_packed_bytes(k, n, group).
runtime::Status check_qc4_kernel_args(size_t k, size_t n, size_t group, const void* packed,
                                      size_t packed_bytes);

// The int4 fully connected over rows already quantized into `scratch` (qs8_quantize_rows) with
// their group sums in `xsum8` (qs8_group_sums, rows x k / group): GEMV for one row, GEMM for more,
// into rows of y (y_stride floats apart). A slab of channels [first, first + n) with `first` a
// multiple of kQC4Tile is the packing's tiles from packed + first / kQC4Tile *
// qc4_tile_bytes(k, group), and writes y + first.
// Errors: InvalidArgument when check_qc4_kernel_args fails, rows exceed the scratch, a buffer is
// null, the output stride is too short or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qc4w_run_quantized(const QC4Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t group,
                                       size_t rows, const QS8Scratch& scratch,
                                       const int32_t* xsum8, float* y, size_t y_stride);

// All of it for `rows` rows of x (x_stride floats apart): quantize with `qs8`'s quantizer, group
// sums into `xsum8` (rows x k / group int32, held by the caller), then qs8_qc4w_run_quantized.
// Errors: as qs8_quantize_rows and qs8_qc4w_run_quantized; y is not written then.
runtime::Status qs8_qc4w_fully_connected(const QS8Kernels& qs8, const QC4Kernels& set,
                                         const void* packed, size_t packed_bytes, size_t k,
                                         size_t n, size_t group, size_t rows, const float* x,
                                         size_t x_stride, float* y, size_t y_stride,
                                         const QS8Scratch& scratch, int32_t* xsum8);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_
