// Prints the C++ fully connected weight format rows (fc_format.h), one per line, for checks
// against the Python side's rows: name, weight dtype, quant scheme, scales dtype (-1: none),
// whether the scales are per group, and the bits a stored value takes (all as numbers the
// files use: schema/scalar_type.fbs and xnnpack_graph.fbs).

#include <cstdio>

#include "edgeshare/backends/xnnpack/runtime/fc_format.h"

int main() {
  size_t count = 0;
  const edgeshare::xnnpack::FcFormat* const* rows = edgeshare::xnnpack::fc_formats(&count);
  for (size_t i = 0; i < count; ++i) {
    const edgeshare::xnnpack::FcFormat& f = *rows[i];
    std::printf("%s %d %d %d %d %zu\n", f.name, static_cast<int>(f.weight_dtype),
                static_cast<int>(f.quant_scheme),
                f.has_scales ? static_cast<int>(f.scales_dtype) : -1, f.group_scales ? 1 : 0,
                f.value_bits);
  }
  return 0;
}
