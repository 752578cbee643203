// The inner kernel of edgeshare::embedding_qc4w: one row of an int4 table (exir/quantize.py's
// qc4w) written as float32, q * scale per group.
//
// A row is `width` signed 4-bit values packed two to a byte (element 2j in the low nibble of byte
// j, 2j + 1 in the high one, two's complement) and width / group float16 scales. Each output is
// float(q) * float(scale): a 4-bit integer times a half is exact in float32, so every instruction
// set writes the same bits as the scalar reference and as torch's dequantization.
//
// One signature, one implementation per instruction set (dequantize_qc4w_row_<isa>.cc, each built
// with only its own instruction set enabled), and the scalar one is the reference. The config
// picks the best set the CPU runs once per process; tests call every set the CPU can run.
//
//   const DequantizeQc4wRowKernel& k = dequantize_qc4w_row_kernel();
//   k.row(width, group, packed_row, scales_row, out);
//
// Preconditions (checked by the caller, the operator, before any call): group >= 2 and even,
// width a multiple of group. No allocation; reentrant.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

// packed: width / 2 bytes; scales: width / group IEEE half bits; out: width floats.
using DequantizeQc4wRow = void (*)(size_t width, size_t group, const uint8_t* packed,
                                   const uint16_t* scales, float* out);

struct DequantizeQc4wRowKernel {
  DequantizeQc4wRow row;
};

void dequantize_qc4w_row_scalar(size_t width, size_t group, const uint8_t* packed,
                                const uint16_t* scales, float* out);
#if defined(__x86_64__)
void dequantize_qc4w_row_avx2(size_t width, size_t group, const uint8_t* packed,
                              const uint16_t* scales, float* out);
void dequantize_qc4w_row_avx512(size_t width, size_t group, const uint8_t* packed,
                                const uint16_t* scales, float* out);
#elif defined(__aarch64__)
void dequantize_qc4w_row_neon(size_t width, size_t group, const uint8_t* packed,
                              const uint16_t* scales, float* out);
#endif

// Every kernel this CPU runs, the reference (scalar) first (kernel_sets.h).
const kernels::KernelSets<DequantizeQc4wRowKernel>& dequantize_qc4w_row_sets();

// The kernel the process runs: dequantize_qc4w_row_sets().best().
const DequantizeQc4wRowKernel& dequantize_qc4w_row_kernel();

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_H_
