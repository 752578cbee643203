// roofline: the machine's bounds for bench/lora, measured in the same run as the latencies.
//
//   roofline [--read-mib 1024] [--cached-read-mib 64] [--read-passes 5] [--fc-iterations 50]
//            [--fc-batch 32] [--fc-in 1024] [--fc-out 2048]
//
// 1. Single-core read bandwidth: sums a buffer of --read-mib MiB (much larger than the last-level
//    cache by default) --read-passes times, one thread, and reports the best pass in GB/s (10^9
//    B/s). A T=1 forward pass reads every weight once, so weight bytes / this bandwidth bounds its
//    latency. The same over --cached-read-mib MiB: passes after the first find the buffer in the
//    LLC when it fits, as a model's weights do when it runs again and again (bench/lora passes the
//    model's size).
// 2. In-cache fully-connected throughput of this XNNPACK (Debian's): an f32 fully connected op,
//    --fc-in x --fc-out (8 MiB of weights by default: past L2, inside L3), at batch --fc-batch, run
//    --fc-iterations times back to back so its weights stay cached, with 1 and 2 threads
//    (pthreadpool). FLOPs / this throughput bounds a T=32 forward pass's latency.
//
// It prints ONE JSON line on stdout:
//   {"read_gbps": ..., "read_mib": ..., "cached_read_gbps": ..., "cached_read_mib": ...,
//    "llc_mib": ..., "fc_gflops_1thread": ...,
//    "fc_gflops_2threads": ..., "fc_batch": 32, "fc_in": 1024, "fc_out": 2048}
// An error is one line on stderr and exit status 1.

#include <pthreadpool.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xnnpack.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace edgeshare {
namespace bench {
namespace {

struct Options {
  long read_mib = 1024;
  long cached_read_mib = 64;
  int read_passes = 5;
  int fc_iterations = 50;
  size_t fc_batch = 32;
  size_t fc_in = 1024;
  size_t fc_out = 2048;
};

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 32-byte lanes (GCC/Clang vector extension) so the loop is bound by memory, not by load
// instructions; four streams far apart, each asked into L2 2 KiB ahead, so that one core keeps as
// many lines in flight as the delegate's kernels do. Measured here (best of 7 passes, one core):
// from the LLC (82 MiB) with AVX2 loads, 4 streams at 2 KiB 27.8 GB/s vs 8 streams into L1 at 1 KiB
// 25.4 and no prefetch 20.7; with plain x86-64's SSE2 (each lane two loads) the same loops reached
// only 16-23 GB/s, short of what the kernels read, so the AVX2 build runs where the CPU has it.
// Past the LLC (1 GiB) every variant read 12-15 GB/s.
typedef uint64_t Lanes __attribute__((vector_size(32)));
constexpr size_t kStreams = 4;
constexpr size_t kPrefetchAhead = 64;  // Lanes: 2 KiB.

__attribute__((always_inline)) inline uint64_t SumWordsLoop(const Lanes* lanes, size_t count) {
  const size_t per_stream = count / kStreams;
  Lanes sums[kStreams] = {};
  for (size_t i = 0; i < per_stream; ++i) {
    // Unrolled so that the sums stay in registers (GCC keeps the loop, and the sums in memory,
    // otherwise: a store and a reload per lane).
#pragma GCC unroll 4
    for (size_t k = 0; k < kStreams; ++k) {
      const Lanes* at = lanes + k * per_stream + i;
      // An integer address: it may lie past the buffer, which a prefetch may name.
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(at) +
                                                       kPrefetchAhead * sizeof(Lanes)),
                         0, 2);
      sums[k] += *at;
    }
  }
  for (size_t i = kStreams * per_stream; i < count; ++i) sums[0] += lanes[i];
  uint64_t total = 0;
  for (size_t k = 0; k < kStreams; ++k) total += sums[k][0] + sums[k][1] + sums[k][2] + sums[k][3];
  return total;
}

uint64_t SumWordsBaseline(const Lanes* lanes, size_t count) { return SumWordsLoop(lanes, count); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) uint64_t SumWordsAvx2(const Lanes* lanes, size_t count) {
  return SumWordsLoop(lanes, count);
}
#endif

uint64_t SumWords(const Lanes* lanes, size_t count) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2")) return SumWordsAvx2(lanes, count);
#endif
  return SumWordsBaseline(lanes, count);
}

// An anonymous mapping advised for transparent huge pages, as the delegate keeps packed weights
// (packed_memory.h): with 4 KiB pages the LLC read measured 21-23 GB/s here, TLB misses included.
class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    madvise(p, bytes, MADV_HUGEPAGE);  // Advice only: without huge pages the read is still right.
    data_ = static_cast<Lanes*>(p);
  }
  ~HugePageBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  Lanes* data() const { return data_; }

 private:
  size_t bytes_;
  Lanes* data_ = nullptr;
};

// Best single-thread pass over a buffer touched first (so no page fault is timed), in GB/s.
bool MeasureReadGbps(const Options& options, long mib, double* gbps) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  const size_t count = bytes / sizeof(Lanes);
  HugePageBuffer buffer(bytes);
  if (buffer.data() == nullptr) {
    std::fprintf(stderr, "roofline: error: cannot map %ld MiB to read\n", mib);
    return false;
  }
  const Lanes ones = {1, 1, 1, 1};
  std::fill(buffer.data(), buffer.data() + count, ones);  // Writes every page.
  volatile uint64_t sink = 0;
  double best = 0.0;
  for (int pass = 0; pass < options.read_passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    sink = sink + SumWords(buffer.data(), count);
    best = std::max(best, static_cast<double>(bytes) / Seconds(start) / 1e9);
  }
  const uint64_t expected = static_cast<uint64_t>(options.read_passes) * count * 4;
  if (sink != expected) {
    std::fprintf(stderr, "roofline: error: read pass summed %llu, expected %llu\n",
                 static_cast<unsigned long long>(sink), static_cast<unsigned long long>(expected));
    return false;
  }
  *gbps = best;
  return true;
}

struct OperatorDeleter {
  void operator()(xnn_operator_t op) const { xnn_delete_operator(op); }
};
using Operator = std::unique_ptr<xnn_operator, OperatorDeleter>;

struct PoolDeleter {
  void operator()(pthreadpool_t pool) const { pthreadpool_destroy(pool); }
};
using Pool = std::unique_ptr<pthreadpool, PoolDeleter>;

// GFLOP/s of one f32 fully connected op over weights that stay cached, with `threads` threads.
bool MeasureFcGflops(const Options& options, size_t threads, double* gflops) {
  std::vector<float> weights(options.fc_in * options.fc_out, 0.01f);
  std::vector<float> bias(options.fc_out, 0.0f);
  std::vector<float> input(options.fc_batch * options.fc_in, 1.0f);
  std::vector<float> output(options.fc_batch * options.fc_out);
  xnn_operator_t raw = nullptr;
  if (xnn_create_fully_connected_nc_f32(options.fc_in, options.fc_out, options.fc_in,
                                        options.fc_out, weights.data(), bias.data(), -INFINITY,
                                        INFINITY, 0, &raw) != xnn_status_success) {
    std::fprintf(stderr, "roofline: error: xnn_create_fully_connected_nc_f32 failed\n");
    return false;
  }
  Operator op(raw);
  Pool pool(threads > 1 ? pthreadpool_create(threads) : nullptr);
  if (xnn_setup_fully_connected_nc_f32(op.get(), options.fc_batch, input.data(), output.data(),
                                       pool.get()) != xnn_status_success) {
    std::fprintf(stderr, "roofline: error: xnn_setup_fully_connected_nc_f32 failed\n");
    return false;
  }
  for (int i = 0; i < 3; ++i) xnn_run_operator(op.get(), pool.get());  // Brings the weights in.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.fc_iterations; ++i) {
    if (xnn_run_operator(op.get(), pool.get()) != xnn_status_success) {
      std::fprintf(stderr, "roofline: error: xnn_run_operator failed\n");
      return false;
    }
  }
  const double flops =
      2.0 * options.fc_batch * options.fc_in * options.fc_out * options.fc_iterations;
  *gflops = flops / Seconds(start) / 1e9;
  return true;
}

bool ParseFlags(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "roofline: error: flag %s needs a value\n", flag.c_str());
      return false;
    }
    const long value = std::strtol(argv[++i], nullptr, 10);
    if (value < 1) {
      std::fprintf(stderr, "roofline: error: %s must be a positive integer, got '%s'\n",
                   flag.c_str(), argv[i]);
      return false;
    }
    if (flag == "--read-mib")
      options->read_mib = value;
    else if (flag == "--cached-read-mib")
      options->cached_read_mib = value;
    else if (flag == "--read-passes")
      options->read_passes = static_cast<int>(value);
    else if (flag == "--fc-iterations")
      options->fc_iterations = static_cast<int>(value);
    else if (flag == "--fc-batch")
      options->fc_batch = static_cast<size_t>(value);
    else if (flag == "--fc-in")
      options->fc_in = static_cast<size_t>(value);
    else if (flag == "--fc-out")
      options->fc_out = static_cast<size_t>(value);
    else {
      std::fprintf(stderr, "roofline: error: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  return true;
}

int Run(const Options& options) {
  if (xnn_initialize(nullptr) != xnn_status_success) {
    std::fprintf(stderr, "roofline: error: xnn_initialize failed\n");
    return 1;
  }
  double read_gbps = 0.0, cached_read_gbps = 0.0, fc1 = 0.0, fc2 = 0.0;
  if (!MeasureReadGbps(options, options.read_mib, &read_gbps) ||
      !MeasureReadGbps(options, options.cached_read_mib, &cached_read_gbps) ||
      !MeasureFcGflops(options, 1, &fc1) || !MeasureFcGflops(options, 2, &fc2)) {
    return 1;
  }
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  std::printf(
      "{\"read_gbps\": %.4f, \"read_mib\": %ld, \"cached_read_gbps\": %.4f, \"cached_read_mib\": "
      "%ld, "
      "\"llc_mib\": %.1f, \"fc_gflops_1thread\": %.4f, \"fc_gflops_2threads\": %.4f, "
      "\"fc_batch\": %zu, \"fc_in\": %zu, \"fc_out\": %zu}\n",
      read_gbps, options.read_mib, cached_read_gbps, options.cached_read_mib,
      llc > 0 ? llc / 1048576.0 : -1.0, fc1, fc2, options.fc_batch, options.fc_in, options.fc_out);
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace edgeshare

int main(int argc, char** argv) {
  edgeshare::bench::Options options;
  if (!edgeshare::bench::ParseFlags(argc, argv, &options)) return 1;
  return edgeshare::bench::Run(options);
}
