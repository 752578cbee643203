// The root-mean-square norm's sets (config.h).

#include <cstdint>
#include <cstring>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

bool rmsnorm_matches_reference(const RmsNormKernels& set) {
  if (set.rows == nullptr) return false;
  uint32_t state = 1234;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>((state >> 8) % 20001) / 1000.0f - 10.0f;
  };
  constexpr size_t kRows = 3;
  auto matches = [&](size_t channels) {
    std::vector<float> x(kRows * channels), w(channels), want(kRows * channels),
        got(kRows * channels, 1.0f);
    for (float& v : x) v = next();
    for (float& v : w) v = next();
    f32_rmsnorm_scalar(kRows, channels, x.data(), w.data(), 1e-5f, want.data());
    set.rows(kRows, channels, x.data(), w.data(), 1e-5f, got.data());
    return std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  };
  for (size_t channels = 1; channels <= 40; ++channels) {
    if (!matches(channels)) return false;
  }
  return matches(577);
}

const KernelSets<RmsNormKernels>& rmsnorm_kernel_sets() {
  static const KernelSets<RmsNormKernels> sets(
      {
          {{&f32_rmsnorm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&f32_rmsnorm_avx2}, Isa::kAvx2},
          {{&f32_rmsnorm_avx512f}, Isa::kAvx512f},
#elif defined(__aarch64__)
          {{&f32_rmsnorm_neon}, Isa::kNeon},
#endif
      },
      &rmsnorm_matches_reference);
  return sets;
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
