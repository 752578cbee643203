// The int4 fully connected's part of config.h: which kernels a process runs, and the run.

#include <cstdint>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/probe.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

bool qc4_matches_reference(const QC4Kernels& set) {
  if (set.gemv == nullptr || set.gemm == nullptr) return false;
  ProbeRandom random(4242);
  for (size_t group : {size_t{32}, size_t{64}, size_t{128}}) {
    // 384 inputs: 12, 6 and 3 groups, so the probe also meets a pair of groups with one.
    const size_t k = 3 * 128, n = 85, rows = 11;
    const std::vector<uint8_t> w = random.bytes(n * k / 2);
    const std::vector<uint16_t> scales = random.half_scales(n * (k / group));
    const std::vector<float> bias = random.biases(n);
    const ProbeActivations x(rows, k, random);
    std::vector<uint8_t> packed(qc4_packed_bytes(k, n, group));
    qc4w_pack(w.data(), scales.data(), bias.data(), k, n, group, packed.data());
    const uint8_t* p = packed.data();
    const bool same = same_bits(
        rows, n,
        [&](float* y) {
          qs8_qc4w_gemm_scalar(p, k, n, group, rows, x.q.data(), k, x.scales.data(), x.sums.data(),
                               y, n);
        },
        [&](float* y) {
          set.gemm(p, k, n, group, rows, x.q.data(), k, x.scales.data(), x.sums.data(), y, n);
        },
        [&](float* y) { set.gemv(p, k, n, group, x.q.data(), x.scales.data(), x.sums.data(), y); });
    if (!same) return false;
  }
  return true;
}

const KernelSets<QC4Kernels>& qc4_kernel_sets() {
  static const KernelSets<QC4Kernels> sets(
      {
          {{&qs8_qc4w_gemv_scalar, &qs8_qc4w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&qs8_qc4w_gemv_2x16_avx2, &qs8_qc4w_gemm_8x16_avx2}, Isa::kAvx2},
          {{&qs8_qc4w_gemv_2x16_avxvnni, &qs8_qc4w_gemm_8x16_avxvnni}, Isa::kAvxVnni},
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
    set.gemm(packed, k, n, group, rows, scratch.q, qc8_padded_k(k), scratch.scales, scratch.sums, y,
             y_stride);
  }
  return Status();
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
