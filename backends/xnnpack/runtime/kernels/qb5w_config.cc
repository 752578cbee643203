// The 5-bit-with-block-scales fully connected's part of config.h: which kernels a process runs,
// and the run.

#include <cstdint>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/probe.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

bool qb5_matches_reference(const QB5Kernels& set) {
  if (set.gemv == nullptr || set.gemm == nullptr) return false;
  ProbeRandom random(5050);
  // 5 blocks: two pairs and one block alone; 85 channels: a partial last tile.
  constexpr size_t k = 5 * kActBlock, n = 85, rows = 11;
  // Every byte is a valid canonical 5-bit weight.
  const std::vector<uint8_t> w = random.bytes(n * k * 5 / 8);
  const std::vector<uint16_t> scales = random.half_scales(n * (k / kActBlock));
  const std::vector<float> bias = random.biases(n);
  const ProbeActivations x(rows, k, random);
  std::vector<uint8_t> packed(qb5_packed_bytes(k, n));
  qb5w_pack(w.data(), scales.data(), bias.data(), k, n, packed.data());
  return same_bits_qs8(&qs8_qb5w_gemm_scalar, set.gemm, set.gemv, packed.data(), k, n, rows,
                       x.q.data(), k, x.scales.data(), x.sums.data());
}

const KernelSets<QB5Kernels>& qb5_kernel_sets() {
  // AVX-VNNI and AVX-512 F without VNNI run AVX2's blocks: the 5-bit unpacking, not the dot, is
  // what a 256-bit VNNI would save on, and it costs the same there.
  static const KernelSets<QB5Kernels> sets(
      {
          {{&qs8_qb5w_gemv_scalar, &qs8_qb5w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&qs8_qb5w_gemv_4x16_avx2, &qs8_qb5w_gemm_4x16_avx2}, Isa::kAvx2},
          {{&qs8_qb5w_gemv_4x16_avx512vnni, &qs8_qb5w_gemm_8x32_avx512vnni}, Isa::kAvx512Vnni},
#elif defined(__aarch64__)
          {{&qs8_qb5w_gemv_1x16_neon, &qs8_qb5w_gemm_2x16_neon}, Isa::kNeon},
          {{&qs8_qb5w_gemv_2x16_neondot, &qs8_qb5w_gemm_4x16_neondot}, Isa::kNeonDot},
          {{&qs8_qb5w_gemv_2x16_neoni8mm, &qs8_qb5w_gemm_4x16_neoni8mm}, Isa::kNeonI8mm},
#endif
      },
      &qb5_matches_reference);
  return sets;
}

Status check_qb5_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "int5 block kernel: a [%zu x %zu] weight has no inputs or outputs", n,
                           k);
  ES_CHECK_OR_RETURN_ERROR(k % kActBlock == 0, Error::InvalidArgument,
                           "int5 block kernel: a [%zu x %zu] weight's %zu inputs are not a "
                           "multiple of the block of %zu",
                           n, k, k, kActBlock);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "int5 block kernel: the [%zu x %zu] weight has no packing", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == qb5_packed_bytes(k, n), Error::InvalidArgument,
                           "int5 block kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, qb5_packed_bytes(k, n));
  return Status();
}

Status qs8_qb5w_run_quantized(const QB5Kernels& set, const void* packed, size_t packed_bytes,
                              size_t k, size_t n, size_t rows, const QS8Scratch& scratch, float* y,
                              size_t y_stride) {
  ES_RETURN_IF_ERROR(check_qb5_kernel_args(k, n, packed, packed_bytes));
  const bool has_kernels = set.gemv != nullptr && set.gemm != nullptr;
  const char* what = "int5 block fully connected";
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
