// Which attention_row set runs: the best one this CPU supports, picked once per process.

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

using kernels::Isa;
using kernels::KernelSets;

const KernelSets<AttentionRowKernels>& attention_row_sets() {
  static const KernelSets<AttentionRowKernels> s({
    {{attention_row_f32_scalar, attention_row_f16_scalar}, Isa::kScalar},
#if defined(__x86_64__)
        {{attention_row_f32_avx2, attention_row_f16_avx2}, Isa::kAvx2},
        {{attention_row_f32_avx512, attention_row_f16_avx512}, Isa::kAvx512f},
#elif defined(__aarch64__)
        {{attention_row_f32_neon, attention_row_f16_neon}, Isa::kNeon},
#endif
  });
  return s;
}

const AttentionRowKernels& attention_row_kernels() { return attention_row_sets().best(); }

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
