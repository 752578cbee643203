// The reference attention row: plain loops, every key and value element read as a float.

#include "edgeshare/runtime/kernels/portable/attention_row.h"
#include "edgeshare/runtime/kernels/portable/attention_row_impl.h"
#include "edgeshare/runtime/kernels/half.h"

namespace edgeshare {
namespace runtime {
namespace portable {
namespace {

inline float load(float x) { return x; }
inline float load(uint16_t x) { return kernels::half_to_float(x); }

struct ScalarOps {
  template <typename KV>
  static float dot(const float* q, const KV* k, size_t n) {
    float sum = 0.0f;
    for (size_t d = 0; d < n; ++d) sum += q[d] * load(k[d]);
    return sum;
  }
  template <typename KV>
  static void axpy(float* acc, float p, const KV* v, size_t n) {
    for (size_t d = 0; d < n; ++d) acc[d] += p * load(v[d]);
  }
  static void scale(float* acc, float c, size_t n) {
    for (size_t d = 0; d < n; ++d) acc[d] *= c;
  }
};

}  // namespace

void attention_row_f32_scalar(size_t count, size_t head_dim, const float* q, const float* keys,
                              const float* values, float scale, float softcap, float* out) {
  internal::attention_row<ScalarOps>(count, head_dim, q, keys, values, scale, softcap, out);
}

void attention_row_f16_scalar(size_t count, size_t head_dim, const float* q, const uint16_t* keys,
                              const uint16_t* values, float scale, float softcap, float* out) {
  internal::attention_row<ScalarOps>(count, head_dim, q, keys, values, scale, softcap, out);
}

}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare
