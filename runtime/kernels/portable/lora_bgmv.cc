// edgeshare::lora_bgmv: each row's low-rank LoRA product with its own adapter slot's factors,
// out[i] = b[s] . (a[s] . x[i]) with s = adapters[i], zeros for a row on no adapter (s = -1).
//
// lora_bgmv(x [..., N, in] float, a [slots, rank, in] float|half, b [slots, out, rank] (as a),
//           adapters int64 [N]) -> out [..., N, out] float
//
// Rows on one adapter that follow each other (a sequence's prefill chunk, or decode rows the
// engine sorted by adapter) are one run, computed as two products over the run's rows with the
// unpacked-weight kernels of gemm_nt.h: the factors are read where they lie (the adapter tables
// an engine rewrites between steps), never packed. A run is cut into chunks of rows whose
// low-rank intermediate fits a fixed stack buffer, so nothing is allocated.

#include <cstdint>
#include <cstring>

#include "edgeshare/runtime/kernels/kernel_registry.h"
#include "edgeshare/runtime/kernels/portable/gemm_nt.h"
#include "edgeshare/runtime/kernels/portable/kernel_util.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

// Floats of the low-rank intermediate on the stack: 16 rows at rank 256.
constexpr size_t kLowFloats = 4096;
constexpr size_t kMaxRank = 256;

Status lora_bgmv(Args args) {
  const char* op = "edgeshare::lora_bgmv";
  ES_RETURN_IF_ERROR(expect_args(args, 5, op));
  ES_ASSIGN_OR_RETURN(Tensor * x, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * a, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * b, tensor_arg(args, 2, op));
  ES_ASSIGN_OR_RETURN(Tensor * adapters, tensor_arg(args, 3, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, 4, op));

  const ScalarType type = a->scalar_type();
  ES_CHECK_OR_RETURN_ERROR(
      (type == ScalarType::Float || type == ScalarType::Half) && b->scalar_type() == type,
      Error::NotSupported, "%s: the factors are %s and %s; both Float or both Half is supported",
      op, to_string(type), to_string(b->scalar_type()));
  ES_CHECK_OR_RETURN_ERROR(x->dim() >= 2 && a->dim() == 3 && b->dim() == 3, Error::InvalidProgram,
                           "%s: x must be [..., rows, in], a [slots, rank, in], b [slots, out, "
                           "rank]",
                           op);
  const size_t rows = x->size(x->dim() - 1 - 1), in = x->size(x->dim() - 1);
  const size_t slots = a->size(0), rank = a->size(1), out_channels = b->size(1);
  ES_CHECK_OR_RETURN_ERROR(
      static_cast<size_t>(a->size(2)) == in && static_cast<size_t>(b->size(0)) == slots &&
          static_cast<size_t>(b->size(2)) == rank,
      Error::InvalidProgram, "%s: a [%zu, %zu, %d] and b [%d, %zu, %d] do not fit x's %zu inputs",
      op, slots, rank, a->size(2), b->size(0), out_channels, b->size(2), in);
  ES_CHECK_OR_RETURN_ERROR(rank >= 1 && rank <= kMaxRank, Error::NotSupported,
                           "%s: rank %zu is outside 1..%zu", op, rank, kMaxRank);
  ES_CHECK_OR_RETURN_ERROR(adapters->scalar_type() == ScalarType::Long && adapters->dim() == 1 &&
                               static_cast<size_t>(adapters->size(0)) == rows,
                           Error::InvalidProgram, "%s: adapters must be int64 [%zu], one per row",
                           op, rows);
  const int64_t* slot = adapters->data<int64_t>();
  for (size_t i = 0; i < rows; ++i) {
    ES_CHECK_OR_RETURN_ERROR(slot[i] >= -1 && slot[i] < static_cast<int64_t>(slots),
                             Error::InvalidArgument,
                             "%s: row %zu's adapter slot %lld is outside -1..%zu", op, i,
                             static_cast<long long>(slot[i]), slots - 1);
  }
  Shape shape = shape_of(*x);
  shape.sizes[shape.rank - 1] = static_cast<int32_t>(out_channels);
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));

  const GemmNtKernels& gemm = gemm_nt_kernels();
  size_t leading = 1;
  for (size_t d = 0; d + 2 < x->dim(); ++d) leading *= static_cast<size_t>(x->size(d));
  const size_t chunk_rows = kLowFloats / rank;
  float low[kLowFloats];
  const size_t a_slot = rank * in, b_slot = out_channels * rank;
  for (size_t p = 0; p < leading; ++p) {
    const float* xs = x->data<float>() + p * rows * in;
    float* ys = out->data<float>() + p * rows * out_channels;
    size_t i = 0;
    while (i < rows) {
      size_t end = i + 1;
      while (end < rows && slot[end] == slot[i] && end - i < chunk_rows) ++end;
      const size_t m = end - i;
      float* y = ys + i * out_channels;
      if (slot[i] < 0) {
        std::memset(y, 0, m * out_channels * sizeof(float));
      } else if (type == ScalarType::Float) {
        const float* as = a->data<float>() + static_cast<size_t>(slot[i]) * a_slot;
        const float* bs = b->data<float>() + static_cast<size_t>(slot[i]) * b_slot;
        gemm.f32(m, rank, in, xs + i * in, as, low);
        gemm.f32(m, out_channels, rank, low, bs, y);
      } else {
        const auto* as =
            static_cast<const uint16_t*>(a->const_data()) + static_cast<size_t>(slot[i]) * a_slot;
        const auto* bs =
            static_cast<const uint16_t*>(b->const_data()) + static_cast<size_t>(slot[i]) * b_slot;
        gemm.f16(m, rank, in, xs + i * in, as, low);
        gemm.f16(m, out_channels, rank, low, bs, y);
      }
      i = end;
    }
  }
  return Status();
}

const bool registered = register_kernel("edgeshare::lora_bgmv", lora_bgmv, 4).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
