#include "edgeshare/backends/xnnpack/runtime/steps.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Status;

namespace {

// Sets the operator up with `setup()` unless its memo holds `key` (the last setup's arguments),
// then runs it.
template <typename Setup>
Status run_operator(uint32_t node, xnn_operator_t op, SetupMemo* memo,
                    std::initializer_list<uintptr_t> key, Setup setup, pthreadpool_t pool) {
  if (memo->size != key.size() || !std::equal(key.begin(), key.end(), memo->key.begin())) {
    memo->size = 0;
    const xnn_status set_up = setup();
    ES_CHECK_OR_RETURN_ERROR(set_up == xnn_status_success, Error::DelegateExecutionFailed,
                             "XNNPACK setup of node %u failed (status %d)", node,
                             static_cast<int>(set_up));
    std::copy(key.begin(), key.end(), memo->key.begin());
    memo->size = key.size();
  }
  const xnn_status status = xnn_run_operator(op, pool);
  ES_CHECK_OR_RETURN_ERROR(status == xnn_status_success, Error::DelegateExecutionFailed,
                           "XNNPACK run of node %u failed (status %d)", node,
                           static_cast<int>(status));
  return Status();
}

// Elementwise steps smaller than this run on the calling thread, pool or not. At T=32 the
// reference model's are 32K-64K elements, 4-13 us on one core (XNNPACK add, sigmoid): a pool call
// costs a wake-up and a barrier, and on a busy machine the barrier waits for a descheduled pool
// thread (kPoolMinFlops in packed_operator.h says the same of small fully connected runs).
constexpr size_t kPoolMinElements = size_t{1} << 18;

pthreadpool_t pool_for(size_t elements, pthreadpool_t pool) {
  return elements >= kPoolMinElements ? pool : nullptr;
}

size_t numel(size_t rank, const std::array<size_t, XNN_MAX_TENSOR_DIMS>& shape) {
  size_t n = 1;
  for (size_t i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

const float* in(void* const* pointers, uint32_t id) {
  return static_cast<const float*>(pointers[id]);
}
float* out(void* const* pointers, uint32_t id) { return static_cast<float*>(pointers[id]); }

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// One overload per step type, picked by std::visit.
struct Runner {
  uint32_t node;
  void* const* p;
  pthreadpool_t pool;

  Status operator()(const UnaryStep& s) const {
    pthreadpool_t t = pool_for(s.batch * s.channels, pool);
    const float* x = in(p, s.in);
    float* y = out(p, s.out);
    return run_operator(
        node, s.op.get(), &s.memo, {address(x), address(y), s.batch, address(t)},
        [&] { return s.setup(s.op.get(), s.batch, x, y, t); }, t);
  }
  Status operator()(const BinaryStep& s) const {
    pthreadpool_t t =
        pool_for(std::max(numel(s.a_rank, s.a_shape), numel(s.b_rank, s.b_shape)), pool);
    const float* a = in(p, s.a);
    const float* b = in(p, s.b);
    float* y = out(p, s.out);
    static_assert(XNN_MAX_TENSOR_DIMS == 6, "the key lists six dims of each shape");
    const auto& as = s.a_shape;
    const auto& bs = s.b_shape;
    return run_operator(
        node, s.op.get(), &s.memo,
        {address(a), address(b), address(y), address(t), s.a_rank, as[0], as[1], as[2], as[3],
         as[4], as[5], s.b_rank, bs[0], bs[1], bs[2], bs[3], bs[4], bs[5]},
        [&] { return s.setup(s.op.get(), s.a_rank, as.data(), s.b_rank, bs.data(), a, b, y, t); },
        t);
  }
  Status operator()(const PoolingStep& s) const {
    pthreadpool_t t = pool_for(s.batch * s.width, pool);
    const float* x = in(p, s.in);
    float* y = out(p, s.out);
    return run_operator(
        node, s.op.get(), &s.memo, {address(x), address(y), s.batch, s.width, address(t)},
        [&] { return s.setup(s.op.get(), s.batch, s.width, x, y, t); }, t);
  }
  Status operator()(const FullyConnectedStep& s) const {
    // The shared operator locks itself for setup + run where it needs to.
    void* scratch = s.scratch_layout.bytes > 0 ? p[s.scratch] : nullptr;
    return s.packed->run(s.batch, in(p, s.in), out(p, s.out), s.scratch_layout, scratch, pool,
                         s.input_quantized);
  }
  Status operator()(const UnpackedFullyConnectedStep& s) const {
    // Low-rank products (rank 8-64 on one side): too little work to be worth a pool call.
    const float* scales = s.format->has_scales ? in(p, s.scales) : nullptr;
    s.format->run_unpacked(s.batch, s.out_channels, s.in_channels, in(p, s.in), p[s.weight], scales,
                           out(p, s.out));
    return Status();
  }
  Status operator()(const RmsNormStep& s) const {
    // A norm's rows are a few thousand floats: on the calling thread, as the small elementwise
    // steps run.
    kernels::rmsnorm_kernel_sets().best().rows(s.rows, s.channels, in(p, s.in), in(p, s.weight),
                                               s.epsilon, out(p, s.out));
    return Status();
  }
};

}  // namespace

Status run_step(const Step& step, void* const* pointers, pthreadpool_t pool) {
  return std::visit(Runner{step.node, pointers, pool}, step.op);
}

}  // namespace xnnpack
}  // namespace edgeshare
