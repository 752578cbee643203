// What the integer kinds' probes (config.h's *_matches_reference) share: seeded weights and
// activations, and the check that a set's GEMM and GEMV give the scalar reference's bits.
// Internal to :config; each probe packs its own format's weights and calls its own kernels.
//
//   ProbeRandom random(8080);
//   const ProbeActivations x(rows, k, random);
//   return same_bits(rows, n, [&](float* y) { reference(..., x.q.data(), ..., y); },
//                    [&](float* y) { set.gemm(...); }, [&](float* y) { set.gemv(...); });

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_PROBE_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_PROBE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {

// A linear congruential sequence: the same values on every machine, so a probe that fails on one
// fails on all that run the same set.
class ProbeRandom {
 public:
  explicit ProbeRandom(uint32_t seed) : state_(seed) {}

  uint32_t next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_ >> 8;
  }
  int8_t int8() { return static_cast<int8_t>(static_cast<int>(next() % 255) - 127); }

  // count values of each kind: any bytes; int8 in -127..127; finite positive float16 scales
  // between 2^-14 and 2; biases in -1..1.
  std::vector<uint8_t> bytes(size_t count) {
    std::vector<uint8_t> values(count);
    for (uint8_t& v : values) v = static_cast<uint8_t>(next());
    return values;
  }
  std::vector<int8_t> int8s(size_t count) {
    std::vector<int8_t> values(count);
    for (int8_t& v : values) v = int8();
    return values;
  }
  std::vector<uint16_t> half_scales(size_t count) {
    std::vector<uint16_t> values(count);
    for (uint16_t& v : values) v = static_cast<uint16_t>(0x0400 + next() % 0x3C00);
    return values;
  }
  std::vector<float> biases(size_t count) {
    std::vector<float> values(count);
    for (float& v : values) v = static_cast<float>(next() % 2001) / 1000.0f - 1.0f;
    return values;
  }

 private:
  uint32_t state_;
};

// rows x k quantized activations (k a multiple of kActBlock) as the quantizer leaves them: int8
// values, a float scale and the int32 sum of each block of kActBlock.
struct ProbeActivations {
  ProbeActivations(size_t rows, size_t k, ProbeRandom& random)
      : q(rows * k), scales(rows * k / kActBlock), sums(rows * k / kActBlock) {
    for (float& v : scales) v = static_cast<float>(random.next() % 1000 + 1) / 4096.0f;
    for (int8_t& v : q) v = random.int8();
    for (size_t b = 0; b < sums.size(); ++b) {
      sums[b] = 0;
      for (size_t i = 0; i < kActBlock; ++i) sums[b] += q[b * kActBlock + i];
    }
  }

  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// True when `gemm` writes the bits `reference` writes for all `rows` rows of n outputs, and `gemv`
// those of the first row. Each writes into a buffer of other values first, so an output left
// unwritten is caught.
template <typename Reference, typename Gemm, typename Gemv>
bool same_bits(size_t rows, size_t n, Reference reference, Gemm gemm, Gemv gemv) {
  std::vector<float> want(rows * n), got(rows * n, 1.0f);
  reference(want.data());
  gemm(got.data());
  if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
  std::fill(got.begin(), got.end(), 1.0f);
  gemv(got.data());
  return std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0;
}

// same_bits for the kinds whose kernels share the int8 per-channel signatures (qc8w, qb8w, qb5w):
// `reference` and `gemm` over rows x k activations q (row stride q_stride), `gemv` over the first.
inline bool same_bits_qs8(QS8QC8WGemmFn reference, QS8QC8WGemmFn gemm, QS8QC8WGemvFn gemv,
                          const void* packed, size_t k, size_t n, size_t rows, const int8_t* q,
                          size_t q_stride, const float* x_scales, const int32_t* x_sums) {
  return same_bits(
      rows, n,
      [&](float* y) { reference(packed, k, n, rows, q, q_stride, x_scales, x_sums, y, n); },
      [&](float* y) { gemm(packed, k, n, rows, q, q_stride, x_scales, x_sums, y, n); },
      [&](float* y) { gemv(packed, k, n, q, x_scales, x_sums, y); });
}

}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_KERNELS_PROBE_H_
