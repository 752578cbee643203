// What the int4 fully connected kernels cost, measured (printed, never asserted), at the shapes of
// //bench:llm's model ([out x in]: 1024 x 1024, 2816 x 1024, 1024 x 2816, 32000 x 1024), groups of
// 32 (or the OUTxIN shapes given as arguments), every path the CPU runs, int4, int5 (qb5w) and
// int8 (per row, qc8w; in blocks, qb8w, at 8 rows only) over the same shape. Per shape:
//   GEMV hot:      one row over one weight again and again (it stays in L2 or L3): the kernel's
//                  compute, cycles per weight at the clock measured at the start;
//   GEMV streamed: one row over copies of the weight taking turns, 96 MiB in all (three times
//                  L3), as a decode step reads its weights from memory; whole, and in column
//                  slabs (one call each) as the delegate runs it;
//   GEMM 8 rows:   a batch's 8 decode rows over one weight, hot and streamed (as the GEMV), for
//                  int4, int8 and int8 in blocks; on AVX-512 VNNI also the 4-row int4 tile over
//                  the same 8 rows (two passes), the 8-row tile's peer;
//   GEMM 64 rows:  a prefill's 64 rows over one weight (hot), the epilogue included (as in every
//                  case); on AVX-512 VNNI also the 4-row int4 tile.
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

constexpr size_t kGroup = 32, kRows = 64, kBatchRows = 8, kRounds = 9;
constexpr size_t kStreamBytes = size_t{96} << 20;

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The core's clock in GHz: a chain of dependent one-cycle adds, best of several tries. The adds
// take a register, not an immediate: newer cores fold chains of immediate adds at rename (such a
// chain read 22 GHz on a 3.6 GHz Xeon).
double clock_ghz() {
  constexpr uint64_t kIterations = 20'000'000;
  double best = 1e30;
  for (int attempt = 0; attempt < 5; ++attempt) {
    uint64_t v = 0, n = kIterations, one = 1;
    const double start = now_ns();
    asm volatile(
        "1:\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(v), "+r"(n)
        : "r"(one));
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

// Copies of one packed weight for the streamed cases to take turns over: at least two, and
// kStreamBytes in all. Copies one cache line apart from a multiple of 2 MiB are what huge pages
// give anyway, so each starts on a 4 KiB boundary.
struct Copies {
  explicit Copies(size_t packed_bytes)
      : bytes(packed_bytes),
        count(std::max<size_t>(2, kStreamBytes / packed_bytes)),
        stride((packed_bytes + 4095) / 4096 * 4096),
        memory(stride * count) {}
  uint8_t* copy(size_t c) const { return static_cast<uint8_t*>(memory.p) + c * stride; }

  const size_t bytes, count, stride;
  Huge memory;
};

// A streamed case's run: `one` over each copy of a weight in turn.
template <typename One>
std::function<void()> over_copies(const Copies* weight, One one) {
  return [weight, one] {
    for (size_t c = 0; c < weight->count; ++c) one(weight->copy(c));
  };
}

// kRows rows quantized once, with their blocks' scales and sums, as the kernels read them.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// A random int4 weight [n x k] in groups of kGroup, packed into every copy.
void pack_qc4(size_t n, size_t k, uint32_t* state, Copies* out) {
  std::vector<uint8_t> nibbles(n * k / 2);
  for (uint8_t& b : nibbles) b = static_cast<uint8_t>(next(state));
  std::vector<uint16_t> scales(n * (k / kGroup));
  for (uint16_t& s : scales) s = static_cast<uint16_t>(0x1000 + next(state) % 0x0800);
  std::vector<float> bias(n);
  for (float& b : bias) b = static_cast<float>(next(state) % 2001) / 1000.0f - 1.0f;
  for (size_t c = 0; c < out->count; ++c) {
    qc4w_pack(nibbles.data(), scales.data(), bias.data(), k, n, kGroup, out->copy(c));
  }
}

// A random int8 weight [n x k] in blocks of kActBlock of the same shape, packed into every copy.
void pack_qb8(size_t n, size_t k, uint32_t* state, Copies* out) {
  std::vector<int8_t> w(n * k);
  for (int8_t& b : w) b = static_cast<int8_t>(static_cast<int>(next(state) % 255) - 127);
  std::vector<uint16_t> scales(n * (k / kActBlock));
  for (uint16_t& s : scales) s = static_cast<uint16_t>(0x1000 + next(state) % 0x0800);
  for (size_t c = 0; c < out->count; ++c) {
    qb8w_pack(w.data(), scales.data(), nullptr, k, n, out->copy(c));
  }
}

// A random int8 weight [n x k] of the same shape (the peer), packed into every copy.
void pack_qc8(size_t n, size_t k, uint32_t* state, Copies* out) {
  std::vector<int8_t> w(n * k);
  for (int8_t& b : w) b = static_cast<int8_t>(static_cast<int>(next(state) % 255) - 127);
  const std::vector<float> scales(n, 1.0f / 1024);
  for (size_t c = 0; c < out->count; ++c) {
    qc8w_pack(w.data(), scales.data(), nullptr, k, n, out->copy(c));
  }
}

// A random 5-bit weight [n x k] in blocks of 32 (every byte is a valid canonical one), packed into
// every copy.
void pack_qb5(size_t n, size_t k, uint32_t* state, Copies* out) {
  std::vector<uint8_t> bytes(n * k * 5 / 8);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(next(state));
  std::vector<uint16_t> scales(n * (k / kActBlock));
  for (uint16_t& s : scales) s = static_cast<uint16_t>(0x1000 + next(state) % 0x0800);
  for (size_t c = 0; c < out->count; ++c) {
    qb5w_pack(bytes.data(), scales.data(), nullptr, k, n, out->copy(c));
  }
}

QuantizedRows quantize_rows(size_t k, uint32_t* state) {
  std::vector<float> x(kRows * k);
  for (float& v : x) v = static_cast<float>(next(state) % 2001) / 100.0f - 10.0f;
  QuantizedRows rows{std::vector<int8_t>(kRows * qc8_padded_k(k)),
                     std::vector<float>(kRows * act_blocks(k)),
                     std::vector<int32_t>(kRows * act_blocks(k))};
  qs8_quantize_scalar(x.data(), k, kRows, k, rows.q.data(), qc8_padded_k(k), rows.scales.data(),
                      rows.sums.data());
  return rows;
}

// What one shape's cases run on: the weights (int4, int8 per row and in blocks), the rows and the
// output.
struct Operands {
  Operands(size_t out, size_t in)
      : n(out),
        k(in),
        qc4(qc4_packed_bytes(in, out, kGroup)),
        qc8(qc8_packed_bytes(in, out)),
        qb5(qb5_packed_bytes(in, out)),
        qb8(qb8_packed_bytes(in, out)) {
    uint32_t state = static_cast<uint32_t>(n * 31 + k);
    pack_qc4(n, k, &state, &qc4);
    pack_qc8(n, k, &state, &qc8);
    pack_qb5(n, k, &state, &qb5);
    pack_qb8(n, k, &state, &qb8);
    x = quantize_rows(k, &state);
    y.resize(kRows * n);
  }

  const size_t n, k;
  Copies qc4, qc8, qb5, qb8;
  QuantizedRows x;
  std::vector<float> y;
};

// Each run as the delegate runs it on quantized rows: `cols` output channels of a weight at `w`.
void qc4_gemv(const QC4Kernels& set, const QuantizedRows& x, const void* w, size_t in, size_t cols,
              float* out) {
  set.gemv(w, in, cols, kGroup, x.q.data(), x.scales.data(), x.sums.data(), out);
}

void qc4_gemm(QS8QC4WGemmFn gemm, size_t rows, const QuantizedRows& x, const void* w, size_t in,
              size_t cols, float* out) {
  gemm(w, in, cols, kGroup, rows, x.q.data(), qc8_padded_k(in), x.scales.data(), x.sums.data(),
       out, cols);
}

void qb8_gemm(const QB8Kernels& set, size_t rows, const QuantizedRows& x, const void* w, size_t in,
              size_t cols, float* out) {
  set.gemm(w, in, cols, rows, x.q.data(), qc8_padded_k(in), x.scales.data(), x.sums.data(), out,
           cols);
}

void qc8_gemv(const QS8Kernels& set, const QuantizedRows& x, const void* w, size_t in, size_t cols,
              float* out) {
  set.gemv(w, in, cols, x.q.data(), x.scales.data(), x.sums.data(), out);
}

void qc8_gemm(const QS8Kernels& set, size_t rows, const QuantizedRows& x, const void* w, size_t in,
              size_t cols, float* out) {
  set.gemm(w, in, cols, rows, x.q.data(), qc8_padded_k(in), x.scales.data(), x.sums.data(), out,
           cols);
}

// The delegate's column slab width at one thread: about 128 KiB of int8-sized weight each (an
// eighth of this machine's 1 MiB L2), a multiple of 32 channels (packed_operator.cc).
size_t slab_width(size_t n, size_t k) {
  const size_t slabs =
      std::max<size_t>(1, std::min((n * k + (128u << 10) - 1) / (128u << 10), n / 32));
  return ((n + slabs - 1) / slabs + 31) / 32 * 32;
}

struct Case {
  std::string name;
  double weights;  // per run
  double bytes;    // of weight read per run
  std::function<void()> run;
  std::vector<double> ns;
};

// An int4 GEMM at kBatchRows rows (a batch's decode step): over one weight (hot) and over the
// copies in turn (streamed).
void add_batch_cases(const std::string& name, QS8QC4WGemmFn gemm, Operands* o,
                     std::vector<Case>* cases) {
  const double weights = static_cast<double>(o->n) * o->k;
  const double bytes = static_cast<double>(o->qc4.bytes);
  const size_t copies = o->qc4.count;
  cases->push_back({name + " hot", weights * kBatchRows, bytes,
                    [o, gemm] {
                      qc4_gemm(gemm, kBatchRows, o->x, o->qc4.copy(0), o->k, o->n, o->y.data());
                    },
                    {}});
  cases->push_back({name + " streamed", weights * kBatchRows * copies, bytes * copies,
                    over_copies(&o->qc4,
                                [o, gemm](const uint8_t* w) {
                                  qc4_gemm(gemm, kBatchRows, o->x, w, o->k, o->n, o->y.data());
                                }),
                    {}});
}

// The int4 cases of one instruction set: GEMV hot; GEMV streamed whole and in slabs and GEMM at 8
// and 64 rows (none for scalar).
void add_qc4_cases(Isa isa, Operands* o, std::vector<Case>* cases) {
  const QC4Kernels set = qc4_kernel_sets().up_to(isa).kernels;
  const std::string name = to_string(qc4_kernel_sets().up_to(isa).isa);
  const double weights = static_cast<double>(o->n) * o->k;
  const double bytes = static_cast<double>(o->qc4.bytes);
  cases->push_back({"int4 GEMV hot " + name, weights, bytes,
                    [o, set] { qc4_gemv(set, o->x, o->qc4.copy(0), o->k, o->n, o->y.data()); },
                    {}});
  if (isa == Isa::kScalar) return;
  const size_t copies = o->qc4.count;
  cases->push_back({"int4 GEMV streamed " + name, weights * copies, bytes * copies,
                    over_copies(&o->qc4,
                                [o, set](const uint8_t* w) {
                                  qc4_gemv(set, o->x, w, o->k, o->n, o->y.data());
                                }),
                    {}});
  const size_t slab = slab_width(o->n, o->k);
  const size_t tile_bytes = qc4_tile_bytes(o->k, kGroup);
  cases->push_back({"int4 GEMV streamed, slabs " + name, weights * copies, bytes * copies,
                    over_copies(&o->qc4,
                                [o, set, slab, tile_bytes](const uint8_t* w) {
                                  for (size_t first = 0; first < o->n; first += slab) {
                                    qc4_gemv(set, o->x, w + first / kQC4Tile * tile_bytes, o->k,
                                             std::min(slab, o->n - first), o->y.data() + first);
                                  }
                                }),
                    {}});
  add_batch_cases("int4 GEMM 8 rows " + name, set.gemm, o, cases);
  if (isa == Isa::kAvx512Vnni) {
    add_batch_cases("int4 GEMM 8 rows 4x32", &qs8_qc4w_gemm_4x32_avx512vnni, o, cases);
  }
  cases->push_back({"int4 GEMM 64 rows " + name, weights * kRows, bytes,
                    [o, set] {
                      qc4_gemm(set.gemm, kRows, o->x, o->qc4.copy(0), o->k, o->n, o->y.data());
                    },
                    {}});
  if (isa == Isa::kAvx512Vnni) {
    cases->push_back({"int4 GEMM 64 rows 4x32", weights * kRows, bytes,
                      [o] {
                        qc4_gemm(&qs8_qc4w_gemm_4x32_avx512vnni, kRows, o->x, o->qc4.copy(0),
                                 o->k, o->n, o->y.data());
                      },
                      {}});
  }
}

// The int8-in-blocks GEMM at kBatchRows rows, hot and streamed (none for scalar).
void add_qb8_cases(Isa isa, Operands* o, std::vector<Case>* cases) {
  if (isa == Isa::kScalar) return;
  const QB8Kernels set = qb8_kernel_sets().up_to(isa).kernels;
  const std::string name = to_string(qb8_kernel_sets().up_to(isa).isa);
  const double weights = static_cast<double>(o->n) * o->k;
  const double bytes = static_cast<double>(o->qb8.bytes);
  const size_t copies = o->qb8.count;
  cases->push_back({"int8 block GEMM 8 rows hot " + name, weights * kBatchRows, bytes,
                    [o, set] {
                      qb8_gemm(set, kBatchRows, o->x, o->qb8.copy(0), o->k, o->n, o->y.data());
                    },
                    {}});
  cases->push_back({"int8 block GEMM 8 rows streamed " + name, weights * kBatchRows * copies,
                    bytes * copies,
                    over_copies(&o->qb8,
                                [o, set](const uint8_t* w) {
                                  qb8_gemm(set, kBatchRows, o->x, w, o->k, o->n, o->y.data());
                                }),
                    {}});
}

// The int8 cases of one instruction set: GEMV hot; GEMV streamed and GEMM at 8 and 64 rows (none
// for scalar).
void add_qc8_cases(Isa isa, Operands* o, std::vector<Case>* cases) {
  const QS8Kernels set = qs8_kernel_sets().up_to(isa).kernels;
  const std::string name = to_string(qs8_kernel_sets().up_to(isa).isa);
  const double weights = static_cast<double>(o->n) * o->k;
  const double bytes = static_cast<double>(o->qc8.bytes);
  cases->push_back({"int8 GEMV hot " + name, weights, bytes,
                    [o, set] { qc8_gemv(set, o->x, o->qc8.copy(0), o->k, o->n, o->y.data()); },
                    {}});
  if (isa == Isa::kScalar) return;
  const size_t copies = o->qc8.count;
  cases->push_back({"int8 GEMV streamed " + name, weights * copies, bytes * copies,
                    over_copies(&o->qc8,
                                [o, set](const uint8_t* w) {
                                  qc8_gemv(set, o->x, w, o->k, o->n, o->y.data());
                                }),
                    {}});
  cases->push_back({"int8 GEMM 8 rows hot " + name, weights * kBatchRows, bytes,
                    [o, set] {
                      qc8_gemm(set, kBatchRows, o->x, o->qc8.copy(0), o->k, o->n, o->y.data());
                    },
                    {}});
  cases->push_back({"int8 GEMM 8 rows streamed " + name, weights * kBatchRows * copies,
                    bytes * copies,
                    over_copies(&o->qc8,
                                [o, set](const uint8_t* w) {
                                  qc8_gemm(set, kBatchRows, o->x, w, o->k, o->n, o->y.data());
                                }),
                    {}});
  cases->push_back({"int8 GEMM 64 rows " + name, weights * kRows, bytes,
                    [o, set] {
                      qc8_gemm(set, kRows, o->x, o->qc8.copy(0), o->k, o->n, o->y.data());
                    },
                    {}});
}

// The int5 cases of one instruction set (AVX-VNNI's is AVX2's: none): GEMV hot; GEMV streamed and
// GEMM (none for scalar).
void add_qb5_cases(Isa isa, Operands* o, std::vector<Case>* cases) {
  if (isa == Isa::kAvxVnni) return;
  const QB5Kernels set = qb5_kernel_sets().up_to(isa).kernels;
  const std::string name = to_string(qb5_kernel_sets().up_to(isa).isa);
  const double weights = static_cast<double>(o->n) * o->k;
  const double bytes = static_cast<double>(o->qb5.bytes);
  const QuantizedRows* x = &o->x;
  auto gemv = [o, set, x](const void* w) {
    set.gemv(w, o->k, o->n, x->q.data(), x->scales.data(), x->sums.data(), o->y.data());
  };
  cases->push_back({"int5 GEMV hot " + name, weights, bytes, [o, gemv] { gemv(o->qb5.copy(0)); },
                    {}});
  if (isa == Isa::kScalar) return;
  const size_t copies = o->qb5.count;
  cases->push_back({"int5 GEMV streamed " + name, weights * copies, bytes * copies,
                    over_copies(&o->qb5, gemv), {}});
  cases->push_back({"int5 GEMM 64 rows " + name, weights * kRows, bytes,
                    [o, set, x] {
                      set.gemm(o->qb5.copy(0), o->k, o->n, kRows, x->q.data(), qc8_padded_k(o->k),
                               x->scales.data(), x->sums.data(), o->y.data(), o->n);
                    },
                    {}});
}

// Runs every case once per round, rounds interleaved, after one warm run each (pages faulted in).
void time_rounds(std::vector<Case>* cases) {
  for (Case& c : *cases) c.run();
  for (size_t round = 0; round < kRounds; ++round) {
    for (Case& c : *cases) {
      // Hot cases repeat within a round so that one timing is not a few microseconds.
      const size_t repeats =
          std::max<size_t>(1, static_cast<size_t>(2e6 / std::max(1.0, c.weights)));
      // One untimed run first: the case before may have streamed 96 MiB through the caches, and a
      // hot case timed once (a large weight) would otherwise read its weight from memory. A
      // streamed case just moves on to its next copies.
      c.run();
      const double start = now_ns();
      for (size_t i = 0; i < repeats; ++i) c.run();
      c.ns.push_back((now_ns() - start) / repeats);
    }
  }
}

// The shape's line, then each case's best and median.
void print_shape(const Operands& o, std::vector<Case>* cases, double ghz) {
  std::printf(
      "[%zu x %zu] int4 g%zu %.2f MiB packed (%zu copies streamed), int5 %.2f MiB (%zu), int8 "
      "%.2f MiB (%zu), int8 blocks %.2f MiB (%zu)\n",
      o.n, o.k, kGroup, o.qc4.bytes / 1048576.0, o.qc4.count, o.qb5.bytes / 1048576.0,
      o.qb5.count, o.qc8.bytes / 1048576.0, o.qc8.count, o.qb8.bytes / 1048576.0, o.qb8.count);
  for (Case& c : *cases) {
    std::sort(c.ns.begin(), c.ns.end());
    const double best = c.ns.front(), median = c.ns[c.ns.size() / 2];
    std::printf(
        "  %-42s best %10.1f us %6.1f GB/s %6.4f cyc/weight   median %10.1f us %6.1f GB/s\n",
        c.name.c_str(), best / 1e3, c.bytes / best, best * ghz / c.weights, median / 1e3,
        c.bytes / median);
  }
}

void bench_shape(size_t n, size_t k, double ghz) {
  Operands o(n, k);
  std::vector<Case> cases;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!cpu_runs(isa)) continue;
    add_qc4_cases(isa, &o, &cases);
    add_qb5_cases(isa, &o, &cases);
    add_qc8_cases(isa, &o, &cases);
    add_qb8_cases(isa, &o, &cases);
  }
  time_rounds(&cases);
  print_shape(o, &cases, ghz);
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
