// Which kernels a process runs: each kind's sets in one KernelSets table
// (runtime/kernels/kernel_sets.h), the widest the CPU runs within the EDGESHARE_ISA cap that passes
// the kind's probe, as XNNPACK's src/configs/gemm-config.c chooses its micro-kernels.
//
//   const QS8Kernels& set = qs8_kernel_sets().best();          // what the runtime runs
//   const QS8Kernels& avx2 = qs8_kernel_sets().up_to(Isa::kAvx2).kernels;   // what a test forces
//
// The int8, int4 and f16w kinds run only the delegate's kernels: their probe compares a set with
// the scalar reference, which is also their fallback. The f32 kind reads XNNPACK's own packing:
// its probe compares a set with XNNPACK's run of a probe weight (another XNNPACK or CPU that packs
// otherwise fails it), and where best_isa() is kScalar, or a set has no GEMM, XNNPACK's operators
// run those rows: over XNNPACK's packing the scalar reference is never faster than they are, so
// it is what tests compare with, not a fallback.
//
// Errors: check_* return InvalidArgument naming the broken precondition.
// Thread-safety: every function may be called from any thread; the first f32_kernel_sets() call
// runs the probe (XNNPACK must be initialised first: initialize_xnnpack()), others wait for it.
// Ownership: the returned sets are static; function pointers stay valid for the process.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_

#include <cstddef>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::kernels::Isa;
using runtime::kernels::KernelSets;

// The f32 kinds over XNNPACK's packing.
struct F32Kernels {
  F32GemvFn gemv = nullptr;
  F32GemmFn gemm = nullptr;  // Null: XNNPACK's operator runs several rows.
};

// The f32 sets (scalar reference, AVX2 and AVX-512 GEMV and GEMM), best() probed against
// XNNPACK on first use: see above for what best_isa() kScalar means.
const KernelSets<F32Kernels>& f32_kernel_sets();

// True when `gemv` (or `gemm`, at 2, 11 and 32 rows) reads XNNPACK's packing of a probe weight
// (odd sizes: a partial last tile) to the same size and the same bits as XNNPACK's run, on finite
// inputs and with a NaN. XNNPACK must be initialised with the delegate's allocator
// (initialize_xnnpack), else false.
bool f32_gemv_matches_xnnpack(F32GemvFn gemv);
bool f32_gemm_matches_xnnpack(F32GemmFn gemm);

// The int8 fully connected's kinds (kernels.h): the quantizer, the GEMV and the GEMM.
struct QS8Kernels {
  QS8QuantizeFn quantize = nullptr;
  QS8QC8WGemvFn gemv = nullptr;
  QS8QC8WGemmFn gemm = nullptr;
};

// The int8 sets, best() giving the scalar reference's bytes, scales, sums and floats on a probe.
const KernelSets<QS8Kernels>& qs8_kernel_sets();

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
// Errors: InvalidArgument when k or n is 0, packed is null or packed_bytes is not
// qc8_packed_bytes(k, n).
runtime::Status check_qs8_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// Scratch an int8 fully connected run of up to `max_rows` rows of k inputs and n outputs works in,
// held by the caller so that runs allocate nothing.
struct QS8Scratch {
  int8_t* q = nullptr;      // max_rows x qc8_padded_k(k) bytes.
  float* scales = nullptr;  // max_rows x act_blocks(k) floats.
  int32_t* sums = nullptr;  // max_rows x act_blocks(k) int32.
  size_t max_rows = 0;
};

// The same in two steps, for a weight run as column slabs (on several threads): the rows are
// quantized once into scratch (q, scales and sums), then each slab runs over them. A slab of channels
// [first, first + n) with `first` a multiple of kQC8Tile is the packing's tiles from
// packed + first / kQC8Tile * qc8_tile_bytes(k), and writes y + first.
// Errors: as above.
runtime::Status qs8_quantize_rows(const QS8Kernels& set, size_t k, size_t rows, const float* x,
                                  size_t x_stride, const QS8Scratch& scratch);

// The run arguments every quantized fully connected (int8, int8 in blocks, int4) checks before its
// kernels run over rows quantized into `scratch`: a GEMV and a GEMM (`has_kernels`), rows within
// the scratch, no null buffer and an output stride of at least n. `what` names the kind in the
// message ("int8 fully connected").
// Errors: InvalidArgument naming the broken one.
runtime::Status check_quantized_run(const char* what, bool has_kernels, size_t n, size_t rows,
                                    const QS8Scratch& scratch, const float* y, size_t y_stride);
runtime::Status qs8_qc8w_run_quantized(const QS8Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t rows,
                                       const QS8Scratch& scratch, float* y, size_t y_stride);

// The f32 x f16w fully connected's kinds (kernels.h): GEMV and GEMM over f16w_pack's layout.
struct F16WKernels {
  F32F16WGemvFn gemv = nullptr;
  F32F16WGemmFn gemm = nullptr;
};

// The f16w sets, best() giving the scalar reference's bits on a probe.
const KernelSets<F16WKernels>& f16w_kernel_sets();

// True when both kinds of `set` equal the scalar reference bit for bit on a probe (k and n not
// multiples of the tiles; 1, 2, 11 and 32 rows).
bool f16w_matches_reference(const F16WKernels& set);

// The preconditions of the f16w kernels for an [n, k] weight packed at `packed` in
// `packed_bytes` bytes (f16w_pack's layout).
// Errors: InvalidArgument when k or n is 0, packed is null or packed_bytes is not
// f16w_packed_bytes(k, n).
runtime::Status check_f16w_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// The root-mean-square norm (kernels.h). Defined in rmsnorm_config.cc.
struct RmsNormKernels {
  F32RmsNormFn rows = nullptr;
};

// The norm's sets, best() giving the scalar reference's bits on a probe.
const KernelSets<RmsNormKernels>& rmsnorm_kernel_sets();

// True when `set` equals the scalar reference bit for bit on a probe (rows of 1 to 40 channels,
// whole and partial blocks of 16, and a row of 577).
bool rmsnorm_matches_reference(const RmsNormKernels& set);

// The int4 fully connected's kinds (kernels.h): GEMV and GEMM over the qc4w packing, each with
// its fused float epilogue; the activations are quantized with a QS8Kernels set's quantizer.
// Defined in qc4w_config.cc.
struct QC4Kernels {
  QS8QC4WGemvFn gemv = nullptr;
  QS8QC4WGemmFn gemm = nullptr;
};

// The int4 sets, best() giving the scalar reference's bits on a probe.
const KernelSets<QC4Kernels>& qc4_kernel_sets();

// True when both kinds of `set` give the scalar reference's bits on a probe (every group size,
// rows around the blocks, n not a multiple of the tiles).
bool qc4_matches_reference(const QC4Kernels& set);

// The preconditions of the int4 kernels for an [n, k] weight in groups of `group` packed at
// `packed` in `packed_bytes` bytes (qc4w_pack's layout).
// Errors: InvalidArgument when k or n is 0, group is not 32, 64 or 128, k is not a multiple of
// it, packed is null or packed_bytes is not qc4_packed_bytes(k, n, group).
runtime::Status check_qc4_kernel_args(size_t k, size_t n, size_t group, const void* packed,
                                      size_t packed_bytes);

// The int4 fully connected over rows already quantized into `scratch` (qs8_quantize_rows, with
// their blocks' scales and sums): GEMV for one row, GEMM for more,
// into rows of y (y_stride floats apart). A slab of channels [first, first + n) with `first` a
// multiple of kQC4Tile is the packing's tiles from packed + first / kQC4Tile *
// qc4_tile_bytes(k, group), and writes y + first.
// Errors: InvalidArgument when check_qc4_kernel_args fails, rows exceed the scratch, a buffer is
// null, the output stride is too short or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qc4w_run_quantized(const QC4Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t group,
                                       size_t rows, const QS8Scratch& scratch, float* y,
                                       size_t y_stride);

// The int8 fully connected with block scales (kernels.h's qb8w): GEMV and GEMM over its packing;
// the activations are quantized with a QS8Kernels set's quantizer. Defined in qb8w_config.cc.
struct QB8Kernels {
  QS8QB8WGemvFn gemv = nullptr;
  QS8QB8WGemmFn gemm = nullptr;
};

// The qb8w sets, best() giving the scalar reference's bits on a probe.
const KernelSets<QB8Kernels>& qb8_kernel_sets();

// True when both kinds of `set` give the scalar reference's bits on a probe (an odd number of
// blocks, rows around the tiles' blocks, n not a multiple of the tiles).
bool qb8_matches_reference(const QB8Kernels& set);

// The preconditions of the qb8w kernels for an [n, k] weight packed at `packed` in `packed_bytes`
// bytes (qb8w_pack's layout).
// Errors: InvalidArgument when k or n is 0, k is not a multiple of kActBlock, packed is null or
// packed_bytes is not qb8_packed_bytes(k, n).
runtime::Status check_qb8_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// The qb8w fully connected over rows already quantized into `scratch` (qs8_quantize_rows): GEMV
// for one row, GEMM for more, into rows of y (y_stride floats apart). A slab of channels
// [first, first + n) with `first` a multiple of kQC8Tile is the packing's tiles from
// packed + first / kQC8Tile * qb8_tile_bytes(k), and writes y + first.
// Errors: InvalidArgument when check_qb8_kernel_args fails, rows exceed the scratch, a buffer is
// null, the output stride is too short or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qb8w_run_quantized(const QB8Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t rows,
                                       const QS8Scratch& scratch, float* y, size_t y_stride);

// The 5-bit fully connected with block scales (kernels.h's qb5w): GEMV and GEMM over its
// packing; the activations are quantized with a QS8Kernels set's quantizer. Defined in
// qb5w_config.cc.
struct QB5Kernels {
  QS8QB5WGemvFn gemv = nullptr;
  QS8QB5WGemmFn gemm = nullptr;
};

// The qb5w sets, best() giving the scalar reference's bits on a probe.
const KernelSets<QB5Kernels>& qb5_kernel_sets();

// True when both kinds of `set` give the scalar reference's bits on a probe (an odd number of
// blocks, rows around the tiles' blocks, n not a multiple of the tiles, every 5-bit value).
bool qb5_matches_reference(const QB5Kernels& set);

// The preconditions of the qb5w kernels for an [n, k] weight packed at `packed` in `packed_bytes`
// bytes (qb5w_pack's layout).
// Errors: InvalidArgument when k or n is 0, k is not a multiple of kActBlock, packed is null or
// packed_bytes is not qb5_packed_bytes(k, n).
runtime::Status check_qb5_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes);

// The qb5w fully connected over rows already quantized into `scratch` (qs8_quantize_rows), as
// qs8_qb8w_run_quantized over qb5w's packing (a slab's tiles from packed + first / kQC8Tile *
// qb5_tile_bytes(k)).
// Errors: InvalidArgument when check_qb5_kernel_args fails, rows exceed the scratch, a buffer is
// null, the output stride is too short or a kind of `set` is missing; y is not written then.
runtime::Status qs8_qb5w_run_quantized(const QB5Kernels& set, const void* packed,
                                       size_t packed_bytes, size_t k, size_t n, size_t rows,
                                       const QS8Scratch& scratch, float* y, size_t y_stride);

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_CONFIG_H_
