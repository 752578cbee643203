// The reference qc4w row dequantization: one element at a time.

#include "edgeshare/runtime/kernels/portable/dequantize_qc4w_row.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {

void dequantize_qc4w_row_scalar(size_t width, size_t group, const uint8_t* packed,
                                const uint16_t* scales, float* out) {
  for (size_t j = 0; j < width; ++j) {
    const uint8_t byte = packed[j / 2];
    const int nibble = (j % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const int q = nibble >= 8 ? nibble - 16 : nibble;
    out[j] = static_cast<float>(q) * kernels::half_to_float(scales[j / group]);
  }
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
