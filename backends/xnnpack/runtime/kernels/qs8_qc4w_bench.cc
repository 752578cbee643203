// What the int4 fully connected kernels cost, measured (printed, never asserted), at the shapes of
// //bench:llm's model ([out x in]: 1024 x 1024, 2816 x 1024, 1024 x 2816, 32000 x 1024), groups of
// 32 (or the OUTxIN shapes given as arguments), every path the CPU runs, int4 and int8 over the
// same shape. Per shape:
//   GEMV hot:      one row over one weight again and again (it stays in L2 or L3): the kernel's
//                  compute, cycles per weight at the clock measured at the start;
//   GEMV streamed: one row over copies of the weight taking turns, 96 MiB in all (three times
//                  L3), as a decode step reads its weights from memory; whole, and in column
//                  slabs (one call each) as the delegate runs it;
//   GEMM 64 rows:  a prefill's 64 rows over one weight (hot), the epilogue included (as in every
//                  case).
// Every case runs once per round, rounds interleaved so that other jobs on the shared machine
// slow all alike; the best (minimum) and median over rounds are printed. The kernels run on rows
// quantized once (the quantizer is not what is measured).
//
//   ./bazelw run -c opt //backends/xnnpack/runtime/kernels:qs8_qc4w_bench [-- 576x576 ...]

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/kernels/config.h"
#include "edgeshare/backends/xnnpack/runtime/kernels/kernels.h"

namespace edgeshare {
namespace xnnpack {
namespace kernels {
namespace {

constexpr size_t kGroup = 32, kRows = 64, kRounds = 9;
constexpr size_t kStreamBytes = size_t{96} << 20;

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The core's clock in GHz: a chain of dependent one-cycle adds, best of several tries.
double clock_ghz() {
  constexpr uint64_t kIterations = 20'000'000;
  double best = 1e30;
  for (int attempt = 0; attempt < 5; ++attempt) {
    uint64_t v = 0, n = kIterations;
    const double start = now_ns();
    asm volatile(
        "1:\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(v), "+r"(n));
    best = std::min(best, now_ns() - start);
  }
  return 16.0 * kIterations / best;
}

// `bytes` in 2 MiB-aligned memory advised for huge pages, as the delegate keeps packed weights.
struct Huge {
  explicit Huge(size_t bytes) {
    const size_t rounded = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    p = std::aligned_alloc(2u << 20, rounded);
    if (p == nullptr) std::abort();
    madvise(p, rounded, MADV_HUGEPAGE);
  }
  ~Huge() { std::free(p); }
  Huge(const Huge&) = delete;
  Huge& operator=(const Huge&) = delete;
  void* p;
};

uint32_t next(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

struct Case {
  std::string name;
  double weights;  // per run
  double bytes;    // of weight read per run
  std::function<void()> run;
  std::vector<double> ns;
};

void bench_shape(size_t n, size_t k, double ghz) {
  uint32_t state = static_cast<uint32_t>(n * 31 + k);
  const size_t groups = k / kGroup;
  // The int4 weight, its packing, and copies of it for the streamed runs.
  const size_t qc4_bytes = qc4_packed_bytes(k, n, kGroup);
  const size_t qc4_copies = std::max<size_t>(2, kStreamBytes / qc4_bytes);
  // Copies one cache line apart from a multiple of 2 MiB are what huge pages give anyway.
  const size_t qc4_stride = (qc4_bytes + 4095) / 4096 * 4096;
  Huge qc4(qc4_stride * qc4_copies);
  {
    std::vector<uint8_t> nibbles(n * k / 2);
    for (uint8_t& b : nibbles) b = static_cast<uint8_t>(next(&state));
    std::vector<uint16_t> scales(n * groups);
    for (uint16_t& s : scales) s = static_cast<uint16_t>(0x1000 + next(&state) % 0x0800);
    std::vector<float> bias(n);
    for (float& b : bias) b = static_cast<float>(next(&state) % 2001) / 1000.0f - 1.0f;
    for (size_t c = 0; c < qc4_copies; ++c) {
      qc4w_pack(nibbles.data(), scales.data(), bias.data(), k, n, kGroup,
                static_cast<uint8_t*>(qc4.p) + c * qc4_stride);
    }
  }
  // The int8 weight of the same shape, the peer.
  const size_t qc8_bytes = qc8_packed_bytes(k, n);
  const size_t qc8_copies = std::max<size_t>(2, kStreamBytes / qc8_bytes);
  const size_t qc8_stride = (qc8_bytes + 4095) / 4096 * 4096;
  Huge qc8(qc8_stride * qc8_copies);
  {
    std::vector<int8_t> w(n * k);
    for (int8_t& b : w) b = static_cast<int8_t>(static_cast<int>(next(&state) % 255) - 127);
    const std::vector<float> scales(n, 1.0f / 1024);
    for (size_t c = 0; c < qc8_copies; ++c) {
      qc8w_pack(w.data(), scales.data(), nullptr, k, n,
                static_cast<uint8_t*>(qc8.p) + c * qc8_stride);
    }
  }
  // Rows quantized once, with their blocks' scales and sums.
  std::vector<float> x(kRows * k);
  for (float& v : x) v = static_cast<float>(next(&state) % 2001) / 100.0f - 10.0f;
  std::vector<int8_t> q(kRows * qc8_padded_k(k));
  std::vector<float> x_scales(kRows * act_blocks(k)), y(kRows * n);
  std::vector<int32_t> x_sums(kRows * act_blocks(k));
  qs8_quantize_scalar(x.data(), k, kRows, k, q.data(), qc8_padded_k(k), x_scales.data(),
                      x_sums.data());
  // Each run as the delegate runs it on quantized rows.
  auto qc4_gemv = [&](const QC4Kernels& set, const void* w, size_t in, size_t cols, float* out) {
    set.gemv(w, in, cols, kGroup, q.data(), x_scales.data(), x_sums.data(), out);
  };
  auto qc4_gemm = [&](const QC4Kernels& set, const void* w, size_t in, size_t cols, float* out) {
    set.gemm(w, in, cols, kGroup, kRows, q.data(), qc8_padded_k(in), x_scales.data(),
             x_sums.data(), out, cols);
  };
  auto qc8_gemv = [&](const QS8Kernels& set, const void* w, size_t in, size_t cols, float* out) {
    set.gemv(w, in, cols, q.data(), x_scales.data(), x_sums.data(), out);
  };
  auto qc8_gemm = [&](const QS8Kernels& set, const void* w, size_t in, size_t cols, float* out) {
    set.gemm(w, in, cols, kRows, q.data(), qc8_padded_k(in), x_scales.data(), x_sums.data(), out,
             cols);
  };

  const double weights = static_cast<double>(n) * k;
  // The delegate's column slabs at one thread: about 128 KiB of int8-sized weight each (an eighth
  // of this machine's 1 MiB L2), widths a multiple of 32 channels (packed_operator.cc).
  const size_t slabs =
      std::max<size_t>(1, std::min((n * k + (128u << 10) - 1) / (128u << 10), n / 32));
  const size_t slab = ((n + slabs - 1) / slabs + 31) / 32 * 32;
  std::vector<Case> cases;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!cpu_runs(isa)) continue;
    const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
    const std::string name = to_string(qc4_kernel_sets().up_to(isa).isa);
    if (isa != Isa::kAvxVnni) {
      cases.push_back({"int4 GEMV hot " + name,
                       weights,
                       static_cast<double>(qc4_bytes),
                       [&, set] { qc4_gemv(set, qc4.p, k, n, y.data()); },
                       {}});
    }
    if (isa != Isa::kScalar && isa != Isa::kAvxVnni) {
      cases.push_back({"int4 GEMV streamed " + name,
                       weights * qc4_copies,
                       static_cast<double>(qc4_bytes) * qc4_copies,
                       [&, set] {
                         for (size_t c = 0; c < qc4_copies; ++c) {
                           qc4_gemv(set, static_cast<uint8_t*>(qc4.p) + c * qc4_stride, k, n,
                                    y.data());
                         }
                       },
                       {}});
      cases.push_back({"int4 GEMV streamed, slabs " + name,
                       weights * qc4_copies,
                       static_cast<double>(qc4_bytes) * qc4_copies,
                       [&, set] {
                         for (size_t c = 0; c < qc4_copies; ++c) {
                           const uint8_t* w = static_cast<uint8_t*>(qc4.p) + c * qc4_stride;
                           for (size_t first = 0; first < n; first += slab) {
                             qc4_gemv(set, w + first / kQC4Tile * qc4_tile_bytes(k, kGroup), k,
                                      std::min(slab, n - first), y.data() + first);
                           }
                         }
                       },
                       {}});
      cases.push_back({"int4 GEMM 64 rows " + name,
                       weights * kRows,
                       static_cast<double>(qc4_bytes),
                       [&, set] { qc4_gemm(set, qc4.p, k, n, y.data()); },
                       {}});
    }
    const QS8Kernels qs8 = qs8_kernel_sets().up_to(isa).kernels;
    const std::string qs8_name = to_string(qs8_kernel_sets().up_to(isa).isa);
    cases.push_back({"int8 GEMV hot " + qs8_name,
                     weights,
                     static_cast<double>(qc8_bytes),
                     [&, qs8] { qc8_gemv(qs8, qc8.p, k, n, y.data()); },
                     {}});
    if (isa == Isa::kScalar) continue;
    cases.push_back({"int8 GEMV streamed " + qs8_name,
                     weights * qc8_copies,
                     static_cast<double>(qc8_bytes) * qc8_copies,
                     [&, qs8] {
                       for (size_t c = 0; c < qc8_copies; ++c) {
                         qc8_gemv(qs8, static_cast<uint8_t*>(qc8.p) + c * qc8_stride, k, n,
                                  y.data());
                       }
                     },
                     {}});
    cases.push_back({"int8 GEMM 64 rows " + qs8_name,
                     weights * kRows,
                     static_cast<double>(qc8_bytes),
                     [&, qs8] { qc8_gemm(qs8, qc8.p, k, n, y.data()); },
                     {}});
  }

  for (Case& c : cases) c.run();  // Warm: pages faulted in.
  for (size_t round = 0; round < kRounds; ++round) {
    for (Case& c : cases) {
      // Hot cases repeat within a round so that one timing is not a few microseconds.
      const size_t repeats =
          std::max<size_t>(1, static_cast<size_t>(2e6 / std::max(1.0, c.weights)));
      const double start = now_ns();
      for (size_t i = 0; i < repeats; ++i) c.run();
      c.ns.push_back((now_ns() - start) / repeats);
    }
  }
  std::printf("[%zu x %zu] int4 g%zu %.2f MiB packed (%zu copies streamed), int8 %.2f MiB (%zu)\n",
              n, k, kGroup, qc4_bytes / 1048576.0, qc4_copies, qc8_bytes / 1048576.0, qc8_copies);
  for (Case& c : cases) {
    std::sort(c.ns.begin(), c.ns.end());
    const double best = c.ns.front(), median = c.ns[c.ns.size() / 2];
    std::printf(
        "  %-34s best %10.1f us %6.1f GB/s %6.4f cyc/weight   median %10.1f us %6.1f GB/s\n",
        c.name.c_str(), best / 1e3, c.bytes / best, best * ghz / c.weights, median / 1e3,
        c.bytes / median);
  }
}

int run(int argc, char** argv) {
  const double ghz = clock_ghz();
  std::printf(
      "core clock %.2f GHz (dependent adds); %zu interleaved rounds, GB/s of weight bytes "
      "(GEMM: of the weight once)\n",
      ghz, kRounds);
  if (argc > 1) {
    for (int i = 1; i < argc; ++i) {
      size_t n = 0, k = 0;
      if (std::sscanf(argv[i], "%zux%zu", &n, &k) != 2 || n == 0 || k == 0 || k % kGroup != 0) {
        std::fprintf(stderr, "qs8_qc4w_bench: '%s' is not OUTxIN with IN a multiple of %zu\n",
                     argv[i], kGroup);
        return 2;
      }
      bench_shape(n, k, ghz);
    }
    return 0;
  }
  const size_t shapes[][2] = {{1024, 1024}, {2816, 1024}, {1024, 2816}, {32000, 1024}};
  for (const auto& shape : shapes) bench_shape(shape[0], shape[1], ghz);
  return 0;
}

}  // namespace
}  // namespace kernels
}  // namespace xnnpack
}  // namespace edgeshare

int main(int argc, char** argv) { return edgeshare::xnnpack::kernels::run(argc, argv); }
