// Test inputs for the f32 kernel tests: seeded values, and XNNPACK's f32 packing written out
// directly (so the kernels can be compared with the scalar reference at any size, whatever memory
// XNNPACK would have placed the packing in).

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_TEST_UTIL_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_TEST_UTIL_H_

#include <xnnpack.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// `count` values in [-1, 1) from `seed`.
inline std::vector<float> values(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = static_cast<float>(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  return v;
}

// An f32 [n, k] weight and its bias [n] in the layout kernels.h describes.
inline std::vector<float> pack_f32(const std::vector<float>& w, const std::vector<float>& bias,
                                   size_t k, size_t n) {
  std::vector<float> packed(f32_packed_bytes(k, n) / sizeof(float), 0.0f);
  const size_t tile = (k + 1) * kF32Tile;
  for (size_t j = 0; j < n; ++j) {
    float* t = packed.data() + j / kF32Tile * tile + j % kF32Tile;
    t[0] = bias[j];
    for (size_t i = 0; i < k; ++i) t[(i + 1) * kF32Tile] = w[j * k + i];
  }
  return packed;
}

// XNNPACK's own packing of an f32 [n, k] weight (bias may be null) in a region of the delegate's,
// as the weights cache makes it, and its operator (output rows `y_stride` apart) to run as the
// reference. `block` is null when creation failed or XNNPACK placed the packing elsewhere.
struct XnnpackF32 {
  XnnpackF32(const std::vector<float>& w, const float* bias, size_t k, size_t n, size_t y_stride)
      : region(f32_packed_bytes(k, n) + 4096, /*expected_blocks=*/1) {
    PackedRegionScope scope(&region);
    const float inf = std::numeric_limits<float>::infinity();
    if (xnn_create_fully_connected_nc_f32(k, n, k, y_stride, w.data(), bias, -inf, inf,
                                          /*flags=*/0, &op) != xnn_status_success) {
      return;
    }
    block = static_cast<const float*>(scope.last_block());
    size = scope.last_size();
  }
  ~XnnpackF32() {
    if (op != nullptr) xnn_delete_operator(op);
  }
  XnnpackF32(const XnnpackF32&) = delete;
  XnnpackF32& operator=(const XnnpackF32&) = delete;

  // XNNPACK's run of `rows` rows.
  bool run(size_t rows, const float* x, float* y) {
    return xnn_setup_fully_connected_nc_f32(op, rows, x, y, nullptr) == xnn_status_success &&
           xnn_run_operator(op, nullptr) == xnn_status_success;
  }

  PackedRegion region;
  xnn_operator_t op = nullptr;
  const float* block = nullptr;
  size_t size = 0;
};

// Whether XNNPACK packs f32 weights on this CPU in kernels.h's layout: the probe's size over an
// odd k (131, no multiple of an unroll). Where it chose another tile (on AMD's Zen cores its
// 4x16s4, inputs padded to fours and shuffled within them) the probe refuses every vector set,
// f32_kernel_sets() stays scalar and the delegate leaves f32 to XNNPACK.
inline bool xnnpack_packs_kernels_f32_layout() {
  constexpr size_t k = 131, n = 53;
  XnnpackF32 probe(values(n * k, 1), nullptr, k, n, n);
  return probe.block != nullptr && probe.size == f32_packed_bytes(k, n);
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_F32_TEST_UTIL_H_
