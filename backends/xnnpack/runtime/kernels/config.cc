#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

#include <xnnpack.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

using runtime::Error;
using runtime::Status;

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2Fma:
      return "avx2_fma";
    case Isa::kAvx512f:
      return "avx512f";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "unknown";
}

bool cpu_runs(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
#if defined(__x86_64__)
    case Isa::kAvx2Fma:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512f:
      return __builtin_cpu_supports("avx512f") && cpu_runs(Isa::kAvx2Fma);
    case Isa::kAvx512Vnni:
      return cpu_runs(Isa::kAvx512f) && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
    default:
      return false;
  }
}

namespace {

// Whether both `isa` is at most `max_isa` and the CPU runs it.
bool usable(Isa isa, Isa max_isa) { return isa <= max_isa && cpu_runs(isa); }

}  // namespace

F32Kernels f32_kernels_up_to(Isa max_isa) {
  F32Kernels set;
  set.gemv = &f32_gemv_scalar;
  set.gemm = &f32_gemm_scalar;
#if defined(__x86_64__)
  if (usable(Isa::kAvx512f, max_isa)) {
    set.gemv_isa = Isa::kAvx512f;
    set.gemv = &f32_gemv_4x16_avx512f;
    set.gemm_isa = Isa::kAvx512f;
    set.gemm = &f32_gemm_8x32_avx512f;
  } else if (usable(Isa::kAvx2Fma, max_isa)) {
    set.gemv_isa = Isa::kAvx2Fma;
    set.gemv = &f32_gemv_4x16_avx2_fma;
  }
#endif
  return set;
}

const F32Kernels& f32_kernels() {
  static const F32Kernels set = [] {
    F32Kernels best = f32_kernels_up_to(Isa::kAvx512Vnni);
    if (best.gemv_isa == Isa::kScalar || !f32_gemv_matches_xnnpack(best.gemv)) {
      best.gemv_isa = Isa::kScalar;
      best.gemv = nullptr;
    }
    if (best.gemm_isa == Isa::kScalar || !f32_gemm_matches_xnnpack(best.gemm)) {
      best.gemm_isa = Isa::kScalar;
      best.gemm = nullptr;
    }
    return best;
  }();
  return set;
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

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare
