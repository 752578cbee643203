// The group loop every dequantize_qc4w_row instruction set shares (internal to the kernels).

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_IMPL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_IMPL_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace internal {

// Block::kElements elements (an even count) per Block::run(packed, scale, out) within each group,
// and the scalar reference for what is left of a group (the operator admits any even group).
template <typename Block>
inline void dequantize_qc4w_row_groups(size_t width, size_t group, const uint8_t* packed,
                                       const uint16_t* scales, float* out) {
  for (size_t g = 0; g < width; g += group) {
    const float scale = kernels::half_to_float(scales[g / group]);
    size_t j = g;
    for (; j + Block::kElements <= g + group; j += Block::kElements) {
      Block::run(packed + j / 2, scale, out + j);
    }
    if (j < g + group) {
      const size_t rest = g + group - j;
      dequantize_qc4w_row_scalar(rest, rest, packed + j / 2, scales + g / group, out + j);
    }
  }
}

}  // namespace internal
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_DEQUANTIZE_QC4W_ROW_IMPL_H_
