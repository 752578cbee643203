// Which dequantize_qc4w_row kernel runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Kernels {
  DequantizeQc4wRowKernel kernels[3];
  size_t count = 0;
};

Kernels detect() {
  Kernels k;
  k.kernels[k.count++] = {"scalar", dequantize_qc4w_row_scalar};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) k.kernels[k.count++] = {"avx2", dequantize_qc4w_row_avx2};
  if (__builtin_cpu_supports("avx512f")) {
    k.kernels[k.count++] = {"avx512", dequantize_qc4w_row_avx512};
  }
#endif
  return k;
}

const Kernels& kernels() {
  static const Kernels k = detect();
  return k;
}

}  // namespace

const DequantizeQc4wRowKernel* dequantize_qc4w_row_kernels(size_t* count) {
  *count = kernels().count;
  return kernels().kernels;
}

const DequantizeQc4wRowKernel& dequantize_qc4w_row_kernel() {
  return kernels().kernels[kernels().count - 1];
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
