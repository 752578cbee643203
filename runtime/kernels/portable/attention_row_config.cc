// Which attention_row set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/attention_row.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

struct Sets {
  AttentionRowKernels sets[3];
  size_t count = 0;
};

Sets detect() {
  Sets s;
  s.sets[s.count++] = {"scalar", attention_row_f32_scalar, attention_row_f16_scalar};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    s.sets[s.count++] = {"avx2", attention_row_f32_avx2, attention_row_f16_avx2};
  }
  if (__builtin_cpu_supports("avx512f")) {
    s.sets[s.count++] = {"avx512", attention_row_f32_avx512, attention_row_f16_avx512};
  }
#endif
  return s;
}

const Sets& sets() {
  static const Sets s = detect();
  return s;
}

}  // namespace

const AttentionRowKernels* attention_row_kernel_sets(size_t* count) {
  *count = sets().count;
  return sets().sets;
}

const AttentionRowKernels& attention_row_kernels() { return sets().sets[sets().count - 1]; }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
