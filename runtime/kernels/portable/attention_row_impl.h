// The online-softmax row loop shared by every instruction set's attention_row: each set supplies
// its dot product, its scaled accumulate and its rescale over head_dim elements (Ops), and how a
// key or value element is read (float, or half converted on load). Included only by the
// attention_row_<isa>.cc files, so each instantiation is compiled for its own instruction set.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_IMPL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_IMPL_H_

#include <cmath>
#include <cstddef>
#include <limits>

#include "edgeshare/runtime/kernels/portable/attention_row.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace internal {

// Scores are computed a block of keys at a time, then folded into the running softmax.
constexpr size_t kAttentionKeyBlock = 32;

template <class Ops, typename KV>
inline void attention_row(size_t count, size_t head_dim, const float* q, const KV* keys,
                          const KV* values, float scale, float softcap, float* out) {
  alignas(64) float acc[kMaxAttentionHeadDim];
  float scores[kAttentionKeyBlock];
  for (size_t d = 0; d < head_dim; ++d) acc[d] = 0.0f;
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  for (size_t base = 0; base < count; base += kAttentionKeyBlock) {
    const size_t n = count - base < kAttentionKeyBlock ? count - base : kAttentionKeyBlock;
    float block_max = -std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < n; ++j) {
      float s = Ops::dot(q, keys + (base + j) * head_dim, head_dim) * scale;
      if (softcap > 0.0f) s = softcap * std::tanh(s / softcap);
      scores[j] = s;
      block_max = s > block_max ? s : block_max;
    }
    if (block_max > running_max) {
      // exp(-inf) is 0: the first block zeroes nothing that matters (acc and sum are 0).
      const float correction = std::exp(running_max - block_max);
      running_sum *= correction;
      Ops::scale(acc, correction, head_dim);
      running_max = block_max;
    }
    for (size_t j = 0; j < n; ++j) {
      const float p = std::exp(scores[j] - running_max);
      running_sum += p;
      Ops::axpy(acc, p, values + (base + j) * head_dim, head_dim);
    }
  }
  const float inv = 1.0f / running_sum;
  for (size_t d = 0; d < head_dim; ++d) out[d] = acc[d] * inv;
}

}  // namespace internal
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_IMPL_H_
