// The int4 fully connected's part of config.h: which kernels a process runs, and the run.

#include <cstdint>
#include <cstring>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

bool qc4_matches_reference(const QC4Kernels& set) {
  if (set.gemv == nullptr || set.gemm == nullptr) return false;
  uint32_t state = 4242;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (size_t group : {size_t{32}, size_t{64}, size_t{128}}) {
    // 384 inputs: 12, 6 and 3 groups, so the probe also meets a pair of groups with one.
    const size_t k = 3 * 128, n = 85, rows = 11, groups = k / group;
    std::vector<uint8_t> w(n * k / 2);
    std::vector<uint16_t> scales(n * groups);
    std::vector<float> bias(n), x_scales(rows * k / kActBlock);
    std::vector<int32_t> x_sums(rows * k / kActBlock);
    std::vector<int8_t> q(rows * k);
    for (uint8_t& v : w) v = static_cast<uint8_t>(next());
    // Finite positive float16 values between 2^-14 and 2.
    for (uint16_t& v : scales) v = static_cast<uint16_t>(0x0400 + next() % 0x3C00);
    for (float& v : bias) v = static_cast<float>(next() % 2001) / 1000.0f - 1.0f;
    for (float& v : x_scales) v = static_cast<float>(next() % 1000 + 1) / 4096.0f;
    for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(next() % 255) - 127);
    std::vector<uint8_t> packed(qc4_packed_bytes(k, n, group));
    qc4w_pack(w.data(), scales.data(), bias.data(), k, n, group, packed.data());
    for (size_t b = 0; b < x_sums.size(); ++b) {
      x_sums[b] = 0;
      for (size_t i = 0; i < kActBlock; ++i) x_sums[b] += q[b * kActBlock + i];
    }
    std::vector<float> want(rows * n), got(rows * n, 1.0f);
    qs8_qc4w_gemm_scalar(packed.data(), k, n, group, rows, q.data(), k, x_scales.data(),
                         x_sums.data(), want.data(), n);
    set.gemm(packed.data(), k, n, group, rows, q.data(), k, x_scales.data(), x_sums.data(),
             got.data(), n);
    if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
    set.gemv(packed.data(), k, n, group, q.data(), x_scales.data(), x_sums.data(), got.data());
    if (std::memcmp(want.data(), got.data(), n * sizeof(float)) != 0) return false;
  }
  return true;
}

const KernelSets<QC4Kernels>& qc4_kernel_sets() {
  static const KernelSets<QC4Kernels> sets(
      {
          {{&qs8_qc4w_gemv_scalar, &qs8_qc4w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&qs8_qc4w_gemv_2x16_avx2, &qs8_qc4w_gemm_2x16_avx2}, Isa::kAvx2},
          {{&qs8_qc4w_gemv_4x16_avx512vnni, &qs8_qc4w_gemm_8x32_avx512vnni}, Isa::kAvx512Vnni},
#elif defined(__aarch64__)
          {{&qs8_qc4w_gemv_1x16_neon, &qs8_qc4w_gemm_2x16_neon}, Isa::kNeon},
          {{&qs8_qc4w_gemv_2x16_neondot, &qs8_qc4w_gemm_4x16_neondot}, Isa::kNeonDot},
          {{&qs8_qc4w_gemv_2x16_neondot, &qs8_qc4w_gemm_4x16_neoni8mm}, Isa::kNeonI8mm},
#endif
      },
      &qc4_matches_reference);
  return sets;
}

Status check_qc4_kernel_args(size_t k, size_t n, size_t group, const void* packed,
                             size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "int4 kernel: a [%zu x %zu] weight has no inputs or outputs", n, k);
  ES_CHECK_OR_RETURN_ERROR(group == 32 || group == 64 || group == 128, Error::InvalidArgument,
                           "int4 kernel: group size %zu is not 32, 64 or 128", group);
  ES_CHECK_OR_RETURN_ERROR(k % group == 0, Error::InvalidArgument,
                           "int4 kernel: a [%zu x %zu] weight's %zu inputs are not a multiple of "
                           "the group size %zu",
                           n, k, k, group);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "int4 kernel: the [%zu x %zu] weight has no packing", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == qc4_packed_bytes(k, n, group), Error::InvalidArgument,
                           "int4 kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, qc4_packed_bytes(k, n, group));
  return Status();
}

Status qs8_qc4w_run_quantized(const QC4Kernels& set, const void* packed, size_t packed_bytes,
                              size_t k, size_t n, size_t group, size_t rows,
                              const QS8Scratch& scratch, float* y, size_t y_stride) {
  ES_RETURN_IF_ERROR(check_qc4_kernel_args(k, n, group, packed, packed_bytes));
  const bool has_kernels = set.gemv != nullptr && set.gemm != nullptr;
  ES_RETURN_IF_ERROR(
      check_quantized_run("int4 fully connected", has_kernels, n, rows, scratch, y, y_stride));
  if (rows == 0) return Status();
  if (rows == 1) {
    set.gemv(packed, k, n, group, scratch.q, scratch.scales, scratch.sums, y);
  } else {
    set.gemm(packed, k, n, group, rows, scratch.q, qc8_padded_k(k), scratch.scales, scratch.sums,
             y, y_stride);
  }
  return Status();
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
