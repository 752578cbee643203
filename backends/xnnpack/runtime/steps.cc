#include "edgeshare/backends/xnnpack/runtime/steps.h"

#include <algorithm>


namespace edgeshare {
namespace xnnpack {

using runtime::Error;
using runtime::Status;

namespace {

Status run_operator(uint32_t node, xnn_operator_t op, xnn_status setup, pthreadpool_t pool) {
  ES_CHECK_OR_RETURN_ERROR(setup == xnn_status_success, Error::DelegateExecutionFailed,
                           "XNNPACK setup of node %u failed (status %d)", node,
                           static_cast<int>(setup));
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

// One overload per step type, picked by std::visit.
struct Runner {
  uint32_t node;
  void* const* p;
  pthreadpool_t pool;

  Status operator()(const UnaryStep& s) const {
    pthreadpool_t t = pool_for(s.batch * s.channels, pool);
    return run_operator(node, s.op.get(),
                        s.setup(s.op.get(), s.batch, in(p, s.in), out(p, s.out), t), t);
  }
  Status operator()(const BinaryStep& s) const {
    pthreadpool_t t =
        pool_for(std::max(numel(s.a_rank, s.a_shape), numel(s.b_rank, s.b_shape)), pool);
    const xnn_status setup = s.setup(s.op.get(), s.a_rank, s.a_shape.data(), s.b_rank,
                                     s.b_shape.data(), in(p, s.a), in(p, s.b), out(p, s.out), t);
    return run_operator(node, s.op.get(), setup, t);
  }
  Status operator()(const PoolingStep& s) const {
    pthreadpool_t t = pool_for(s.batch * s.width, pool);
    const xnn_status setup = s.setup(s.op.get(), s.batch, s.width, in(p, s.in), out(p, s.out), t);
    return run_operator(node, s.op.get(), setup, t);
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
};

}  // namespace

Status run_step(const Step& step, void* const* pointers, pthreadpool_t pool) {
  return std::visit(Runner{step.node, pointers, pool}, step.op);
}

}  // namespace xnnpack
}  // namespace edgeshare
