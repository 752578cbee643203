// The inner kernel of edgeshare::cached_attention: one query row attending to a run of cached keys.
//
// A row's keys and values are `count` rows of `head_dim` elements each (one head of the cache, from
// its first visible position). The kernel computes softmax(scale * q.k, capped) . v in one pass
// over the keys (an online softmax: a running maximum and sum, the accumulated values rescaled when
// the maximum grows), so it needs no scratch memory beyond its stack and reads each key and value
// once. Keys and values are float32 or float16 (a cache stored in half precision); q and out are
// float32.
//
// One signature per kind, one implementation per instruction set (attention_row_<isa>.cc, each
// built with only its own instruction set enabled), and the scalar one is the reference. The config
// picks the best set the CPU runs once per process; tests call every set the CPU can run.
//
//   const AttentionRowKernels& k = attention_row_kernels();
//   k.f32(count, head_dim, q, keys, values, scale, softcap, out);
//
// Preconditions (checked by the caller, the operator, before any call): count >= 1,
// 1 <= head_dim <= kMaxAttentionHeadDim, softcap >= 0 (0: no cap). No allocation; reentrant.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/kernels/kernel_sets.h"

namespace edgeshare {
namespace runtime {
namespace portable {

// The largest head the kernels accumulate on their stack (models use 64 to 256).
constexpr size_t kMaxAttentionHeadDim = 512;

using AttentionRowF32 = void (*)(size_t count, size_t head_dim, const float* q, const float* keys,
                                 const float* values, float scale, float softcap, float* out);
// Keys and values as IEEE half-precision bits.
using AttentionRowF16 = void (*)(size_t count, size_t head_dim, const float* q,
                                 const uint16_t* keys, const uint16_t* values, float scale,
                                 float softcap, float* out);

struct AttentionRowKernels {
  AttentionRowF32 f32;
  AttentionRowF16 f16;
};

void attention_row_f32_scalar(size_t count, size_t head_dim, const float* q, const float* keys,
                              const float* values, float scale, float softcap, float* out);
void attention_row_f16_scalar(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                              const uint16_t* values, float scale, float softcap, float* out);
#if defined(__x86_64__)
void attention_row_f32_avx2(size_t count, size_t head_dim, const float* q, const float* keys,
                            const float* values, float scale, float softcap, float* out);
void attention_row_f16_avx2(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                            const uint16_t* values, float scale, float softcap, float* out);
void attention_row_f32_avx512(size_t count, size_t head_dim, const float* q, const float* keys,
                              const float* values, float scale, float softcap, float* out);
void attention_row_f16_avx512(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                              const uint16_t* values, float scale, float softcap, float* out);
#elif defined(__aarch64__)
void attention_row_f32_neon(size_t count, size_t head_dim, const float* q, const float* keys,
                            const float* values, float scale, float softcap, float* out);
void attention_row_f16_neon(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                            const uint16_t* values, float scale, float softcap, float* out);
#endif

// Every set this CPU runs, the reference (scalar) first (kernel_sets.h).
const kernels::KernelSets<AttentionRowKernels>& attention_row_sets();

// The set the process runs: attention_row_sets().best().
const AttentionRowKernels& attention_row_kernels();

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_ATTENTION_ROW_H_
