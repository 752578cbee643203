// edgeshare::lora_bgmv: each row's low-rank LoRA product with its own adapter slot's factors,
// out[i] = (a[s] . x[i]) . b[s] with s = adapters[i], zeros for a row on no adapter (s = -1).
//
// lora_bgmv(x [..., N, in] float, a [slots, rank, in] float|half, b [slots, rank, out] (as a),
//           adapters int64 [N]) -> out [..., N, out] float
// lora_bgmv_q8(x, a [slots, rank, in] int8, a_scales [slots, rank] float,
//              b [slots, rank, out] int8, b_scales [slots, out] float, adapters) -> out
//   the same over int8 factors with a scale per row of a and per output of b, each product scaled
//   as a whole (gemm_nt's q8 products, as the delegate runs an int8 adapter's).
//
// b is LoRA's B stored transposed, [rank, out]: a decode row's second product is then rank
// broadcasts times whole rows of b (gemm_nn), where over [out, rank] each output was a dot product
// of rank terms ending in a horizontal sum, more than half of this operator's arithmetic.
//
// Rows on one adapter that follow each other (a sequence's prefill chunk, or decode rows the
// engine sorted by adapter) are one run, computed as two products over the run's rows with the
// unpacked-weight kernels of gemm_nt.h (gemm_nt, then gemm_nn): the factors are read where they lie
// (the adapter tables an engine rewrites between steps), never packed. A run is cut into chunks of
// rows whose low-rank intermediate fits a fixed stack buffer, so nothing is allocated.
//
// The chunks are split across the current Threads (a long chunk into pieces of at least
// kGemmNtSplitRows rows, which gemm_nt.h promises give the same bits): in a decode step of a batch
// on many adapters this operator reads every adapter's factors, and on the calling thread alone it
// left the other threads idle for a quarter of the step.
//
// Reading those factors from far caches is most of this operator's time in a decode step, and the
// helper threads sit idle through the serial steps between two of its calls. So each call, as it
// ends, asks the helpers to warm the factors the next calls will read for this call's slots
// (warm_while_idle): a batch program makes the same calls in the same order every step, so a log
// of the calls, kept per Threads, says which come next.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "edgeshare/runtime/core/threads.h"
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
// Pieces handed to the threads at once (a step of 64 decode rows on as many adapters is one
// hand-off), and the most a chunk is cut into.
constexpr size_t kMaxPieces = 64;
constexpr size_t kMaxPiecesPerChunk = 8;

// Rows of one adapter slot (-1: none) whose products one thread computes.
struct Piece {
  const float* x;
  float* y;
  size_t rows;
  int64_t slot;
};

struct Job {
  const GemmNtKernels* gemm;
  ScalarType type;
  const void* a;
  const void* b;
  // int8 factors only: [slots, rank] and [slots, out].
  const float* a_scales = nullptr;
  const float* b_scales = nullptr;
  size_t rank, in, out_channels;
  Piece pieces[kMaxPieces];
  size_t count = 0;
};

// Asks for every cache line of one adapter's factor into L2 before the products read it. A decode
// row reads each adapter's factors once per step, from far caches or memory, in a few short streams
// the hardware prefetchers pick up late; asked for all at once, the lines arrive in parallel.
void prefetch(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(p + offset, 0, 2);
}

void run_piece(void* context, size_t index) {
  const Job& job = *static_cast<const Job*>(context);
  const Piece& piece = job.pieces[index];
  const size_t m = piece.rows;
  if (piece.slot < 0) {
    std::memset(piece.y, 0, m * job.out_channels * sizeof(float));
    return;
  }
  float low[kLowFloats];
  const size_t s = static_cast<size_t>(piece.slot);
  const size_t a_slot = job.rank * job.in, b_slot = job.out_channels * job.rank;
  if (job.type == ScalarType::Float) {
    const float* as = static_cast<const float*>(job.a) + s * a_slot;
    const float* bs = static_cast<const float*>(job.b) + s * b_slot;
    prefetch(as, a_slot * sizeof(float));
    prefetch(bs, b_slot * sizeof(float));
    job.gemm->f32(m, job.rank, job.in, piece.x, as, low);
    job.gemm->nn_f32(m, job.out_channels, job.rank, low, bs, piece.y);
  } else if (job.type == ScalarType::Char) {
    const auto* as = static_cast<const int8_t*>(job.a) + s * a_slot;
    const auto* bs = static_cast<const int8_t*>(job.b) + s * b_slot;
    prefetch(as, a_slot);
    prefetch(bs, b_slot);
    job.gemm->q8(m, job.rank, job.in, piece.x, as, job.a_scales + s * job.rank, low);
    job.gemm->nn_q8(m, job.out_channels, job.rank, low, bs, job.b_scales + s * job.out_channels,
                    piece.y);
  } else {
    const auto* as = static_cast<const uint16_t*>(job.a) + s * a_slot;
    const auto* bs = static_cast<const uint16_t*>(job.b) + s * b_slot;
    prefetch(as, a_slot * sizeof(uint16_t));
    prefetch(bs, b_slot * sizeof(uint16_t));
    job.gemm->f16(m, job.rank, job.in, piece.x, as, low);
    job.gemm->nn_f16(m, job.out_channels, job.rank, low, bs, piece.y);
  }
}

// Calls whose factors the helpers warm ahead of the caller, the nearest first, as far as
// kMaxWarmRanges ranges (two per slot and call) go.
constexpr size_t kWarmCallsAhead = 4;
constexpr size_t kMaxLoggedCalls = 1024;

// One call's factor tables: slot s's factors are the a_slot_bytes at a + s * a_slot_bytes and the
// b_slot_bytes at b + s * b_slot_bytes.
struct CallFactors {
  const void* a;
  const void* b;
  size_t a_slot_bytes, b_slot_bytes;
  bool operator==(const CallFactors& o) const {
    return a == o.a && b == o.b && a_slot_bytes == o.a_slot_bytes &&
           b_slot_bytes == o.b_slot_bytes;
  }
};

// The calls one Threads has run, in the order they first came (a resource of each Threads of 2+
// threads). Entries of a program that is gone stay until the log fills and starts over: warming
// them costs helper time, never a fault. `busy` keeps a second caller under the same Threads out
// (it warms nothing).
struct CallLog {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;
  CallFactors calls[kMaxLoggedCalls];
  size_t count = 0;
  size_t last = 0;
};

void* make_call_log(size_t /*threads*/) { return new (std::nothrow) CallLog(); }
void destroy_call_log(void* log) { delete static_cast<CallLog*>(log); }

const size_t kNoLogSlot = Threads::kMaxResources;
const size_t g_log_slot = [] {
  ThreadsResource log;
  log.create = &make_call_log;
  log.destroy = &destroy_call_log;
  Result<size_t> slot = register_threads_resource(log);
  return slot.ok() ? *slot : kNoLogSlot;
}();

// This call's place in the log (added at the end when new; the log starts over when full).
size_t log_call(CallLog& log, const CallFactors& call) {
  const size_t guess = log.last + 1 < log.count ? log.last + 1 : 0;
  if (guess < log.count && log.calls[guess] == call) return log.last = guess;
  for (size_t i = 0; i < log.count; ++i) {
    if (log.calls[i] == call) return log.last = i;
  }
  if (log.count == kMaxLoggedCalls) log.count = 0;
  log.calls[log.count] = call;
  return log.last = log.count++;
}

// Asks the helpers to warm, for the slots of `slot`'s rows, the factors of the calls that came
// after this one the last time.
void warm_next_calls(const CallFactors& call, const int64_t* slot, size_t rows) {
  const Threads* threads = current_threads();
  if (threads == nullptr || g_log_slot == kNoLogSlot) return;
  auto* log = static_cast<CallLog*>(threads->resource(g_log_slot));
  if (log == nullptr || log->busy.test_and_set(std::memory_order_acquire)) return;
  const size_t at = log_call(*log, call);
  int64_t slots[kMaxWarmRanges / 2];
  size_t distinct = 0;
  for (size_t i = 0; i < rows && distinct < kMaxWarmRanges / 2; ++i) {
    if (slot[i] >= 0 && std::find(slots, slots + distinct, slot[i]) == slots + distinct) {
      slots[distinct++] = slot[i];
    }
  }
  WarmRange ranges[kMaxWarmRanges];
  size_t count = 0;
  for (size_t k = 1; k <= kWarmCallsAhead && k < log->count; ++k) {
    const CallFactors& next = log->calls[(at + k) % log->count];
    for (size_t j = 0; j < distinct && count + 2 <= kMaxWarmRanges; ++j) {
      const size_t s = static_cast<size_t>(slots[j]);
      ranges[count++] = {static_cast<const char*>(next.a) + s * next.a_slot_bytes,
                         next.a_slot_bytes};
      ranges[count++] = {static_cast<const char*>(next.b) + s * next.b_slot_bytes,
                         next.b_slot_bytes};
    }
  }
  log->busy.clear(std::memory_order_release);
  if (count > 0) warm_while_idle(ranges, count);
}

// Both operators: x, a, [a_scales,] b, [b_scales,] adapters, out.
Status run_lora(Args args, bool quantized) {
  const char* op = quantized ? "edgeshare::lora_bgmv_q8" : "edgeshare::lora_bgmv";
  ES_RETURN_IF_ERROR(expect_args(args, quantized ? 7 : 5, op));
  const size_t b_arg = quantized ? 3 : 2, adapters_arg = quantized ? 5 : 3;
  ES_ASSIGN_OR_RETURN(Tensor * x, float_arg(args, 0, op));
  ES_ASSIGN_OR_RETURN(Tensor * a, tensor_arg(args, 1, op));
  ES_ASSIGN_OR_RETURN(Tensor * b, tensor_arg(args, b_arg, op));
  ES_ASSIGN_OR_RETURN(Tensor * adapters, tensor_arg(args, adapters_arg, op));
  ES_ASSIGN_OR_RETURN(Tensor * out, float_arg(args, adapters_arg + 1, op));

  const ScalarType type = a->scalar_type();
  if (quantized) {
    ES_CHECK_OR_RETURN_ERROR(type == ScalarType::Char && b->scalar_type() == type,
                             Error::NotSupported,
                             "%s: the factors are %s and %s; int8 is supported", op,
                             to_string(type), to_string(b->scalar_type()));
  } else {
    ES_CHECK_OR_RETURN_ERROR(
        (type == ScalarType::Float || type == ScalarType::Half) && b->scalar_type() == type,
        Error::NotSupported, "%s: the factors are %s and %s; both Float or both Half is supported",
        op, to_string(type), to_string(b->scalar_type()));
  }
  ES_CHECK_OR_RETURN_ERROR(x->dim() >= 2 && a->dim() == 3 && b->dim() == 3, Error::InvalidProgram,
                           "%s: x must be [..., rows, in], a [slots, rank, in], b [slots, rank, "
                           "out]",
                           op);
  const size_t rows = x->size(x->dim() - 1 - 1), in = x->size(x->dim() - 1);
  const size_t slots = a->size(0), rank = a->size(1), out_channels = b->size(2);
  ES_CHECK_OR_RETURN_ERROR(
      static_cast<size_t>(a->size(2)) == in && static_cast<size_t>(b->size(0)) == slots &&
          static_cast<size_t>(b->size(1)) == rank,
      Error::InvalidProgram, "%s: a [%zu, %zu, %d] and b [%d, %d, %zu] do not fit x's %zu inputs",
      op, slots, rank, a->size(2), b->size(0), b->size(1), out_channels, in);
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
  const float* a_scales = nullptr;
  const float* b_scales = nullptr;
  if (quantized) {
    ES_ASSIGN_OR_RETURN(Tensor * as, float_arg(args, 2, op));
    ES_ASSIGN_OR_RETURN(Tensor * bs, float_arg(args, 4, op));
    ES_CHECK_OR_RETURN_ERROR(as->dim() == 2 && static_cast<size_t>(as->size(0)) == slots &&
                                 static_cast<size_t>(as->size(1)) == rank && bs->dim() == 2 &&
                                 static_cast<size_t>(bs->size(0)) == slots &&
                                 static_cast<size_t>(bs->size(1)) == out_channels,
                             Error::InvalidProgram,
                             "%s: the scales must be [%zu, %zu] (a's) and [%zu, %zu] (b's)", op,
                             slots, rank, slots, out_channels);
    a_scales = as->data<float>();
    b_scales = bs->data<float>();
  }
  Shape shape = shape_of(*x);
  shape.sizes[shape.rank - 1] = static_cast<int32_t>(out_channels);
  ES_RETURN_IF_ERROR(resize_output(*out, shape, op));

  Job job;
  job.gemm = &gemm_nt_kernels();
  job.type = type;
  job.a_scales = a_scales;
  job.b_scales = b_scales;
  job.a = a->const_data();
  job.b = b->const_data();
  job.rank = rank;
  job.in = in;
  job.out_channels = out_channels;
  size_t leading = 1;
  for (size_t d = 0; d + 2 < x->dim(); ++d) leading *= static_cast<size_t>(x->size(d));
  const size_t chunk_rows = kLowFloats / rank;
  auto flush = [&job]() {
    parallel_for(job.count, run_piece, &job);
    job.count = 0;
  };
  for (size_t p = 0; p < leading; ++p) {
    const float* xs = x->data<float>() + p * rows * in;
    float* ys = out->data<float>() + p * rows * out_channels;
    size_t i = 0;
    while (i < rows) {
      size_t end = i + 1;
      while (end < rows && slot[end] == slot[i] && end - i < chunk_rows) ++end;
      const size_t m = end - i;
      // A long chunk in pieces of at least kGemmNtSplitRows rows (the same bits as one product).
      const size_t pieces =
          m >= 2 * kGemmNtSplitRows ? std::min(m / kGemmNtSplitRows, kMaxPiecesPerChunk) : 1;
      size_t first = i;
      for (size_t k = 0; k < pieces; ++k) {
        const size_t count = m / pieces + (k < m % pieces ? 1 : 0);
        if (job.count == kMaxPieces) flush();
        Piece& piece = job.pieces[job.count++];
        piece.x = xs + first * in;
        piece.y = ys + first * out_channels;
        piece.rows = count;
        piece.slot = slot[i];
        first += count;
      }
      i = end;
    }
  }
  flush();
  const size_t element = element_size(type);
  warm_next_calls(
      CallFactors{job.a, job.b, rank * in * element, out_channels * rank * element}, slot, rows);
  return Status();
}

Status lora_bgmv(Args args) { return run_lora(args, /*quantized=*/false); }
Status lora_bgmv_q8(Args args) { return run_lora(args, /*quantized=*/true); }

const bool registered = register_kernel("edgeshare::lora_bgmv", lora_bgmv, 4).ok() &&
                        register_kernel("edgeshare::lora_bgmv_q8", lora_bgmv_q8, 6).ok();

}  // namespace
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
