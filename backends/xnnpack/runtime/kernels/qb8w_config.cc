// The int8-with-block-scales fully connected's part of config.h: which kernels a process runs, and
// the run.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

bool qb8_matches_reference(const QB8Kernels& set) {
  if (set.gemv == nullptr || set.gemm == nullptr) return false;
  uint32_t state = 8080;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  // 5 blocks: two pairs and one block alone; 85 channels: a partial last tile.
  constexpr size_t k = 5 * kActBlock, n = 85, rows = 11, blocks = k / kActBlock;
  std::vector<int8_t> w(n * k), q(rows * k);
  std::vector<uint16_t> scales(n * blocks);
  std::vector<float> bias(n), x_scales(rows * blocks);
  std::vector<int32_t> x_sums(rows * blocks);
  for (int8_t& v : w) v = static_cast<int8_t>(static_cast<int>(next() % 255) - 127);
  // Finite positive float16 values between 2^-14 and 2.
  for (uint16_t& v : scales) v = static_cast<uint16_t>(0x0400 + next() % 0x3C00);
  for (float& v : bias) v = static_cast<float>(next() % 2001) / 1000.0f - 1.0f;
  for (float& v : x_scales) v = static_cast<float>(next() % 1000 + 1) / 4096.0f;
  for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(next() % 255) - 127);
  for (size_t b = 0; b < x_sums.size(); ++b) {
    x_sums[b] = 0;
    for (size_t i = 0; i < kActBlock; ++i) x_sums[b] += q[b * kActBlock + i];
  }
  std::vector<uint8_t> packed(qb8_packed_bytes(k, n));
  qb8w_pack(w.data(), scales.data(), bias.data(), k, n, packed.data());
  std::vector<float> want(rows * n), got(rows * n, 1.0f);
  qs8_qb8w_gemm_scalar(packed.data(), k, n, rows, q.data(), k, x_scales.data(), x_sums.data(),
                       want.data(), n);
  set.gemm(packed.data(), k, n, rows, q.data(), k, x_scales.data(), x_sums.data(), got.data(), n);
  if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
  std::fill(got.begin(), got.end(), 1.0f);
  set.gemv(packed.data(), k, n, q.data(), x_scales.data(), x_sums.data(), got.data());
  return std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0;
}

const KernelSets<QB8Kernels>& qb8_kernel_sets() {
  // As the int8 sets: AVX-512 F without VNNI runs AVX2's dot.
  static const KernelSets<QB8Kernels> sets(
      {
          {{&qs8_qb8w_gemv_scalar, &qs8_qb8w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&qs8_qb8w_gemv_4x16_avx2, &qs8_qb8w_gemm_4x16_avx2}, Isa::kAvx2},
          {{&qs8_qb8w_gemv_4x16_avxvnni, &qs8_qb8w_gemm_4x16_avxvnni}, Isa::kAvxVnni},
          {{&qs8_qb8w_gemv_4x16_avx2, &qs8_qb8w_gemm_4x16_avx2}, Isa::kAvx512f},
          {{&qs8_qb8w_gemv_4x16_avx512vnni, &qs8_qb8w_gemm_8x32_avx512vnni}, Isa::kAvx512Vnni},
#elif defined(__aarch64__)
          {{&qs8_qb8w_gemv_1x16_neon, &qs8_qb8w_gemm_2x16_neon}, Isa::kNeon},
          {{&qs8_qb8w_gemv_2x16_neondot, &qs8_qb8w_gemm_4x16_neondot}, Isa::kNeonDot},
          {{&qs8_qb8w_gemv_2x16_neoni8mm, &qs8_qb8w_gemm_4x16_neoni8mm}, Isa::kNeonI8mm},
#endif
      },
      &qb8_matches_reference);
  return sets;
}

Status check_qb8_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "int8 block kernel: a [%zu x %zu] weight has no inputs or outputs", n,
                           k);
  ES_CHECK_OR_RETURN_ERROR(k % kActBlock == 0, Error::InvalidArgument,
                           "int8 block kernel: a [%zu x %zu] weight's %zu inputs are not a "
                           "multiple of the block of %zu",
                           n, k, k, kActBlock);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "int8 block kernel: the [%zu x %zu] weight has no packing", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == qb8_packed_bytes(k, n), Error::InvalidArgument,
                           "int8 block kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, qb8_packed_bytes(k, n));
  return Status();
}

Status qs8_qb8w_run_quantized(const QB8Kernels& set, const void* packed, size_t packed_bytes,
                              size_t k, size_t n, size_t rows, const QS8Scratch& scratch, float* y,
                              size_t y_stride) {
  ES_RETURN_IF_ERROR(check_qb8_kernel_args(k, n, packed, packed_bytes));
  const bool has_kernels = set.gemv != nullptr && set.gemm != nullptr;
  const char* what = "int8 block fully connected";
  ES_RETURN_IF_ERROR(check_quantized_run(what, has_kernels, n, rows, scratch, y, y_stride));
  if (rows == 0) return Status();
  if (rows == 1) {
    set.gemv(packed, k, n, scratch.q, scratch.scales, scratch.sums, y);
  } else {
    set.gemm(packed, k, n, rows, scratch.q, qc8_padded_k(k), scratch.scales, scratch.sums, y,
             y_stride);
  }
  return Status();
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
