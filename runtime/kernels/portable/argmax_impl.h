// What every vector argmax set shares (argmax_<isa>.cc): the reference's rule for a NaN first score
// and the scalar ends of both passes, so that the sets differ only in their vector loops.
//
// Each set finds the largest non-NaN score in one pass, then the first index holding it: a NaN
// first score is the reference's answer (nothing compares greater than it); any other NaN never
// is, and a vector maximum of (score, running) that keeps the running value when the score is a
// NaN passes over them.

#ifndef EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_IMPL_H_
#define EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_IMPL_H_

#include <cstddef>

namespace edgeshare {
namespace runtime {
namespace portable {
namespace argmax_impl {

// True when the reference answers 0 whatever follows: the first score is a NaN.
inline bool first_is_nan(const float* x) { return x[0] != x[0]; }

// The largest of `largest` and the non-NaN scores x[from, n).
inline float largest_from(size_t from, size_t n, const float* x, float largest) {
  for (size_t i = from; i < n; ++i) {
    if (x[i] > largest) largest = x[i];
  }
  return largest;
}

// The first index at or after `from` whose score equals `largest` (one the first pass found).
inline size_t first_equal_from(size_t from, size_t n, const float* x, float largest) {
  for (size_t i = from; i < n; ++i) {
    if (x[i] == largest) return i;
  }
  return 0;
}

}  // namespace argmax_impl
}  // namespace portable
}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_PORTABLE_ARGMAX_IMPL_H_
