#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

#include <xnnpack.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/probe.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

namespace {

// The f32 probe: a set XNNPACK's packing reads the same as XNNPACK (the GEMM only where it has
// one).
bool f32_matches_xnnpack(const F32Kernels& set) {
  return f32_gemv_matches_xnnpack(set.gemv) &&
         (set.gemm == nullptr || f32_gemm_matches_xnnpack(set.gemm));
}

}  // namespace

const KernelSets<F32Kernels>& f32_kernel_sets() {
  static const KernelSets<F32Kernels> sets(
      {
          {{&f32_gemv_scalar, &f32_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&f32_gemv_4x16_avx2_fma, &f32_gemm_6x16_avx2_fma}, Isa::kAvx2},
          {{&f32_gemv_4x16_avx512f, &f32_gemm_8x32_avx512f}, Isa::kAvx512f},
#endif
      },
      &f32_matches_xnnpack);
  return sets;
}

namespace {

// XNNPACK packs a probe weight (odd sizes: a partial last tile, inputs not a multiple of any
// unroll) and runs `rows` rows of it, on finite inputs and then with a NaN; `run(block, x, y)` must
// give the same bits from the same packed bytes.
template <typename Run>
bool probe(size_t rows, Run run) {
  constexpr size_t k = 131, n = 53;
  std::vector<float> w(n * k), bias(n), x(rows * k), want(rows * n), got(rows * n);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  };
  for (float& v : w) v = next();
  for (float& v : bias) v = next();
  for (float& v : x) v = next();
  PackedRegion region(f32_packed_bytes(k, n) + 4096, /*expected_blocks=*/1);
  xnn_operator_t op = nullptr;
  const void* block = nullptr;
  size_t size = 0;
  {
    PackedRegionScope scope(&region);
    const float inf = std::numeric_limits<float>::infinity();
    if (xnn_create_fully_connected_nc_f32(k, n, k, n, w.data(), bias.data(), -inf, inf,
                                          /*flags=*/0, &op) != xnn_status_success) {
      return false;
    }
    block = scope.last_block();
    size = scope.last_size();
  }
  bool same = block != nullptr && size == f32_packed_bytes(k, n) &&
              xnn_setup_fully_connected_nc_f32(op, rows, x.data(), want.data(), nullptr) ==
                  xnn_status_success &&
              xnn_run_operator(op, nullptr) == xnn_status_success;
  // Then the same with a NaN input: what a NaN becomes is the clamp's operand order.
  for (int round = 0; round < 2 && same; ++round) {
    if (round == 1) {
      x[7] = std::numeric_limits<float>::quiet_NaN();
      same = xnn_run_operator(op, nullptr) == xnn_status_success;
    }
    run(static_cast<const float*>(block), x.data(), got.data());
    same = same && std::memcmp(want.data(), got.data(), got.size() * sizeof(float)) == 0;
  }
  xnn_delete_operator(op);
  return same;
}

}  // namespace

bool f32_gemv_matches_xnnpack(F32GemvFn gemv) {
  if (gemv == nullptr) return false;
  return probe(
      1, [gemv](const float* block, const float* x, float* y) { gemv(block, 131, 53, x, y); });
}

bool f32_gemm_matches_xnnpack(F32GemmFn gemm) {
  if (gemm == nullptr) return false;
  // 2 rows (one partial block), 11 (a whole block and 3 rows), 32 (four blocks).
  for (size_t rows : {2u, 11u, 32u}) {
    const bool same = probe(rows, [gemm, rows](const float* block, const float* x, float* y) {
      gemm(block, 131, 53, rows, x, 131, y, 53, nullptr, 0);
    });
    if (!same) return false;
  }
  return true;
}

bool qs8_matches_reference(const QS8Kernels& set) {
  if (set.quantize == nullptr || set.gemv == nullptr || set.gemm == nullptr) return false;
  constexpr size_t k = 133, n = 85, rows = 11;
  const size_t kp = qc8_padded_k(k), blocks = act_blocks(k);
  ProbeRandom random(777);
  std::vector<float> x(rows * k), w_scales(n);
  for (float& v : x) v = static_cast<float>(random.next() % 20001) / 1000.0f - 10.0f;
  const std::vector<int8_t> w = random.int8s(n * k);
  for (float& v : w_scales) v = static_cast<float>(random.next() % 1000 + 1) / 65536.0f;
  const std::vector<float> bias = random.biases(n);
  std::vector<uint8_t> packed(qc8_packed_bytes(k, n));
  qc8w_pack(w.data(), w_scales.data(), bias.data(), k, n, packed.data());
  std::vector<int8_t> want_q(rows * kp), got_q(rows * kp, 1);
  std::vector<float> want_scales(rows * blocks), got_scales(rows * blocks);
  std::vector<int32_t> want_sums(rows * blocks), got_sums(rows * blocks, 1);
  qs8_quantize_scalar(x.data(), k, rows, k, want_q.data(), kp, want_scales.data(),
                      want_sums.data());
  set.quantize(x.data(), k, rows, k, got_q.data(), kp, got_scales.data(), got_sums.data());
  if (want_q != got_q || want_sums != got_sums ||
      std::memcmp(want_scales.data(), got_scales.data(), rows * blocks * 4) != 0) {
    return false;
  }
  return same_bits_qs8(&qs8_qc8w_gemm_scalar, set.gemm, set.gemv, packed.data(), k, n, rows,
                       want_q.data(), kp, want_scales.data(), want_sums.data());
}

const KernelSets<QS8Kernels>& qs8_kernel_sets() {
  // Per set, the widest quantizer and integer dot the Isa has (AVX-512 F without VNNI: AVX2's dot).
  static const KernelSets<QS8Kernels> sets(
      {
          {{&qs8_quantize_scalar, &qs8_qc8w_gemv_scalar, &qs8_qc8w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&qs8_quantize_avx2, &qs8_qc8w_gemv_4x16_avx2, &qs8_qc8w_gemm_4x16_avx2}, Isa::kAvx2},
          {{&qs8_quantize_avx2, &qs8_qc8w_gemv_4x16_avxvnni, &qs8_qc8w_gemm_4x16_avxvnni},
           Isa::kAvxVnni},
          {{&qs8_quantize_avx512f, &qs8_qc8w_gemv_4x16_avx2, &qs8_qc8w_gemm_4x16_avx2},
           Isa::kAvx512f},
          {{&qs8_quantize_avx512f, &qs8_qc8w_gemv_4x16_avx512vnni, &qs8_qc8w_gemm_8x32_avx512vnni},
           Isa::kAvx512Vnni},
#elif defined(__aarch64__)
          {{&qs8_quantize_neon, &qs8_qc8w_gemv_1x16_neon, &qs8_qc8w_gemm_2x16_neon}, Isa::kNeon},
          {{&qs8_quantize_neon, &qs8_qc8w_gemv_2x16_neondot, &qs8_qc8w_gemm_4x16_neondot},
           Isa::kNeonDot},
          {{&qs8_quantize_neon, &qs8_qc8w_gemv_2x16_neoni8mm, &qs8_qc8w_gemm_4x16_neoni8mm},
           Isa::kNeonI8mm},
#endif
      },
      &qs8_matches_reference);
  return sets;
}

Status check_qs8_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "int8 kernel: a [%zu x %zu] weight has no inputs or outputs", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "int8 kernel: the [%zu x %zu] weight has no packing", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == qc8_packed_bytes(k, n), Error::InvalidArgument,
                           "int8 kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, qc8_packed_bytes(k, n));
  return Status();
}

Status qs8_quantize_rows(const QS8Kernels& set, size_t k, size_t rows, const float* x,
                         size_t x_stride, const QS8Scratch& scratch) {
  ES_CHECK_OR_RETURN_ERROR(set.quantize != nullptr, Error::InvalidArgument,
                           "int8 fully connected: the kernel set has no quantizer");
  ES_CHECK_OR_RETURN_ERROR(rows <= scratch.max_rows, Error::InvalidArgument,
                           "int8 fully connected: %zu rows, the scratch holds %zu", rows,
                           scratch.max_rows);
  ES_CHECK_OR_RETURN_ERROR(rows == 0 || (x != nullptr && scratch.q != nullptr &&
                                         scratch.scales != nullptr && scratch.sums != nullptr),
                           Error::InvalidArgument,
                           "int8 fully connected: a null input or scratch buffer");
  ES_CHECK_OR_RETURN_ERROR(x_stride >= k, Error::InvalidArgument,
                           "int8 fully connected: input stride %zu is shorter than rows of %zu "
                           "inputs",
                           x_stride, k);
  if (rows != 0) {
    set.quantize(x, k, rows, x_stride, scratch.q, qc8_padded_k(k), scratch.scales, scratch.sums);
  }
  return Status();
}

Status check_quantized_run(const char* what, bool has_kernels, size_t n, size_t rows,
                           const QS8Scratch& scratch, const float* y, size_t y_stride) {
  ES_CHECK_OR_RETURN_ERROR(has_kernels, Error::InvalidArgument,
                           "%s: the kernel set lacks a GEMV or a GEMM", what);
  ES_CHECK_OR_RETURN_ERROR(rows <= scratch.max_rows, Error::InvalidArgument,
                           "%s: %zu rows, the scratch holds %zu", what, rows, scratch.max_rows);
  ES_CHECK_OR_RETURN_ERROR(rows == 0 || (y != nullptr && scratch.q != nullptr &&
                                         scratch.scales != nullptr && scratch.sums != nullptr),
                           Error::InvalidArgument, "%s: a null output or scratch buffer", what);
  ES_CHECK_OR_RETURN_ERROR(y_stride >= n, Error::InvalidArgument,
                           "%s: output stride %zu is shorter than rows of %zu outputs", what,
                           y_stride, n);
  return Status();
}

Status qs8_qc8w_run_quantized(const QS8Kernels& set, const void* packed, size_t packed_bytes,
                              size_t k, size_t n, size_t rows, const QS8Scratch& scratch, float* y,
                              size_t y_stride) {
  ES_RETURN_IF_ERROR(check_qs8_kernel_args(k, n, packed, packed_bytes));
  const bool has_kernels = set.gemv != nullptr && set.gemm != nullptr;
  ES_RETURN_IF_ERROR(
      check_quantized_run("int8 fully connected", has_kernels, n, rows, scratch, y, y_stride));
  if (rows == 0) return Status();
  const size_t kp = qc8_padded_k(k);
  if (rows == 1) {
    set.gemv(packed, k, n, scratch.q, scratch.scales, scratch.sums, y);
  } else {
    set.gemm(packed, k, n, rows, scratch.q, kp, scratch.scales, scratch.sums, y, y_stride);
  }
  return Status();
}

Status check_f32_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "f32 packed kernel: a [%zu x %zu] weight has no inputs or outputs", n,
                           k);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "f32 packed kernel: the [%zu x %zu] weight's packing is not in memory "
                           "the delegate placed",
                           n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == f32_packed_bytes(k, n), Error::InvalidArgument,
                           "f32 packed kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, f32_packed_bytes(k, n));
  return Status();
}

bool f16w_matches_reference(const F16WKernels& set) {
  if (set.gemv == nullptr || set.gemm == nullptr) return false;
  constexpr size_t k = 131, n = 85, rows = 32;
  uint32_t state = 4242;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  std::vector<uint16_t> w(n * k), bias(n);
  // Finite halves of every exponent (subnormals too), both signs.
  for (uint16_t& v : w) v = static_cast<uint16_t>(next() % 0x7C00u) | ((next() & 1u) << 15);
  for (uint16_t& v : bias) v = static_cast<uint16_t>(next() % 0x5C00u) | ((next() & 1u) << 15);
  std::vector<float> x(rows * k);
  for (float& v : x) v = static_cast<float>(next() % 20001) / 1000.0f - 10.0f;
  std::vector<uint8_t> packed(f16w_packed_bytes(k, n));
  f16w_pack(w.data(), bias.data(), k, n, packed.data());
  std::vector<float> want(rows * n), got(rows * n);
  f32_f16w_gemm_scalar(packed.data(), k, n, rows, x.data(), k, want.data(), n, nullptr, 0);
  for (size_t r : {2u, 11u, 32u}) {
    std::fill(got.begin(), got.end(), 1.0f);
    set.gemm(packed.data(), k, n, r, x.data(), k, got.data(), n, nullptr, 0);
    if (std::memcmp(got.data(), want.data(), r * n * sizeof(float)) != 0) return false;
  }
  std::fill(got.begin(), got.end(), 1.0f);
  set.gemv(packed.data(), k, n, x.data(), got.data());
  return std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0;
}

const KernelSets<F16WKernels>& f16w_kernel_sets() {
  static const KernelSets<F16WKernels> sets(
      {
          {{&f32_f16w_gemv_scalar, &f32_f16w_gemm_scalar}, Isa::kScalar},
#if defined(__x86_64__)
          {{&f32_f16w_gemv_4x16_avx2_f16c, &f32_f16w_gemm_4x16_avx2_f16c}, Isa::kAvx2},
          {{&f32_f16w_gemv_4x16_avx512f, &f32_f16w_gemm_8x32_avx512f}, Isa::kAvx512f},
#elif defined(__aarch64__)
          {{&f32_f16w_gemv_2x16_neon, &f32_f16w_gemm_4x16_neon}, Isa::kNeon},
#endif
      },
      &f16w_matches_reference);
  return sets;
}

Status check_f16w_kernel_args(size_t k, size_t n, const void* packed, size_t packed_bytes) {
  ES_CHECK_OR_RETURN_ERROR(k > 0 && n > 0, Error::InvalidArgument,
                           "f16 weight kernel: a [%zu x %zu] weight has no inputs or outputs", n,
                           k);
  ES_CHECK_OR_RETURN_ERROR(packed != nullptr, Error::InvalidArgument,
                           "f16 weight kernel: the [%zu x %zu] weight has no packing", n, k);
  ES_CHECK_OR_RETURN_ERROR(packed_bytes == f16w_packed_bytes(k, n), Error::InvalidArgument,
                           "f16 weight kernel: the [%zu x %zu] weight's packing is %zu bytes, the "
                           "kernels read %zu",
                           n, k, packed_bytes, f16w_packed_bytes(k, n));
  return Status();
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
