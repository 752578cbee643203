// What content verification costs on a first load, measured (printed, never asserted):
//   1. SHA-256 throughput of //runtime/core:sha256 (OpenSSL) on this machine;
//   2. creating (packing) one 2048x1024 f32 fully connected operator, and hashing its 8 MiB;
//   3. a first load of 10 such weights (80 MiB, like the reference model) through a fresh
//      WeightsCache from a freshly mmapped file (page faults included), verification off and on,
//      with 1 and 2 delegate threads, asked weight by weight (one get_or_pack per weight, as
//      graphs did before) and as one batch (as GraphCompiler asks now), interleaved.
//
// Wall time is what a user waits; CPU time (this process, all threads) is what the work costs and
// stays meaningful when the 2 cores are shared with other jobs (then wall >> CPU, see `uptime`).
//
//   ./bazelw run -c opt //backends/xnnpack/runtime:weights_cache_bench

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xnnpack.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/sha256.h"
#include "edgeshare/runtime/core/threads.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::Digest;
using runtime::Error;
using runtime::FreeableBuffer;
using runtime::Result;
using runtime::Status;
using runtime::Threads;
using runtime::ThreadsScope;

constexpr size_t kOut = 2048, kIn = 1024, kWeights = 10, kReps = 7;
// Single operations are short: more samples give a best time closer to an undisturbed one.
constexpr size_t kOpReps = 25;
constexpr size_t kWeightBytes = kOut * kIn * sizeof(float);

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double cpu_ms(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Wall and CPU milliseconds of one measured section.
struct Timer {
  clockid_t clock;
  double wall0 = now_ms(), cpu0 = cpu_ms(clock);
  explicit Timer(clockid_t c) : clock(c), cpu0(cpu_ms(c)) {}
  double wall() const { return now_ms() - wall0; }
  double cpu() const { return cpu_ms(clock) - cpu0; }
};

// The best of several runs: on a shared machine the fastest run is the one least disturbed.
double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Weights laid out back to back in one mapping (as a .ptd's segments are), handed out zero-copy.
class MappedMap final : public runtime::NamedDataMap {
 public:
  MappedMap(const uint8_t* base, const std::vector<std::string>* keys,
            const std::vector<Digest>* digests)
      : base_(base), keys_(keys), digests_(digests) {}
  Result<runtime::TensorLayout> get_tensor_layout(const char*) const override {
    return Status(Error::NotSupported);
  }
  Result<FreeableBuffer> get_data(const char* key) const override {
    const size_t i = index(key);
    if (i == keys_->size()) return Status(Error::NotFound);
    return FreeableBuffer(base_ + i * kWeightBytes, kWeightBytes, /*free_fn=*/nullptr);
  }
  Status load_data_into(const char*, void*, size_t) const override {
    return Status(Error::NotSupported);
  }
  size_t get_num_keys() const override { return keys_->size(); }
  Result<const char*> get_key(size_t i) const override { return (*keys_)[i].c_str(); }
  Result<Digest> get_digest(const char* key) const override {
    const size_t i = index(key);
    if (i == keys_->size()) return Status(Error::NotFound);
    return (*digests_)[i];
  }
  const char* name() const override { return "bench.ptd"; }

 private:
  size_t index(const char* key) const {
    size_t i = 0;
    while (i < keys_->size() && (*keys_)[i] != key) ++i;
    return i;
  }
  const uint8_t* base_;
  const std::vector<std::string>* keys_;
  const std::vector<Digest>* digests_;
};

void bench_sha256(const std::vector<float>& data) {
  const size_t bytes = data.size() * sizeof(float);
  std::vector<double> wall, cpu;
  for (size_t r = 0; r < kOpReps; ++r) {
    Timer t(CLOCK_THREAD_CPUTIME_ID);
    if (!runtime::sha256(data.data(), bytes).ok()) std::abort();
    wall.push_back(t.wall());
    cpu.push_back(t.cpu());
  }
  const double c = best(cpu);
  std::printf("sha256 of %zu MiB: %.1f ms CPU (%.2f GB/s per core), %.1f ms wall (best of 25)\n",
              bytes >> 20, c, bytes / c / 1e6, best(wall));
}

void bench_pack_one(const std::vector<float>& w) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<double> pack_wall, pack_cpu, hash_wall, hash_cpu;
  for (size_t r = 0; r < kOpReps; ++r) {
    xnn_operator_t op = nullptr;
    Timer p(CLOCK_THREAD_CPUTIME_ID);
    if (xnn_create_fully_connected_nc_f32(kIn, kOut, kIn, kOut, w.data(), nullptr, -inf, inf, 0,
                                          &op) != xnn_status_success) {
      std::abort();
    }
    pack_wall.push_back(p.wall());
    pack_cpu.push_back(p.cpu());
    xnn_delete_operator(op);
    Timer h(CLOCK_THREAD_CPUTIME_ID);
    if (!runtime::sha256(w.data(), kWeightBytes).ok()) std::abort();
    hash_wall.push_back(h.wall());
    hash_cpu.push_back(h.cpu());
  }
  std::printf(
      "pack 2048x1024 f32 fully connected (8 MiB): %.1f ms CPU, %.1f ms wall; sha256 of "
      "the same 8 MiB: %.1f ms CPU, %.1f ms wall (best of 25)\n",
      best(pack_cpu), best(pack_wall), best(hash_cpu), best(hash_wall));
}

// One first load: map the file, get_or_pack every weight through a fresh cache (one call per
// weight, or one batch), unmap. Returns {wall, CPU of the whole process} in ms.
std::pair<double, double> first_load(int fd, size_t file_bytes,
                                     const std::vector<FullyConnectedRequest>& requests,
                                     const std::vector<std::string>& keys,
                                     const std::vector<Digest>& digests, bool batch) {
  Timer t(CLOCK_PROCESS_CPUTIME_ID);
  void* base = mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) std::abort();
  MappedMap map(static_cast<const uint8_t*>(base), &keys, &digests);
  {
    WeightsCache cache;
    std::vector<PackedOperator*> ops;
    Status status;
    if (batch) {
      size_t failed = 0;
      status = cache.get_or_pack_fully_connected(&map, requests, &ops, &failed);
    }
    for (size_t i = 0; !batch && i < requests.size() && status.ok(); ++i) {
      auto op = cache.get_or_pack_fully_connected(&map, requests[i].weight, nullptr, kIn, kOut);
      status = op.status();
      if (op.ok()) ops.push_back(*op);
    }
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message());
      std::abort();
    }
    for (PackedOperator* op : ops) cache.release(op);
  }
  munmap(base, file_bytes);
  return {t.wall(), t.cpu()};
}

void bench_first_load(const std::vector<float>& seed_weights) {
  // kWeights distinct weights (distinct digests, so ten packs), written to a temporary file.
  char path[] = "/tmp/weights_cache_bench_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) std::abort();
  unlink(path);
  std::vector<std::string> keys;
  std::vector<Digest> digests;
  std::vector<FullyConnectedRequest> requests;
  std::vector<float> w = seed_weights;
  for (size_t i = 0; i < kWeights; ++i) {
    w[0] = static_cast<float>(i);
    if (write(fd, w.data(), kWeightBytes) != static_cast<ssize_t>(kWeightBytes)) std::abort();
    keys.push_back("layers." + std::to_string(i) + ".weight");
    digests.push_back(*runtime::sha256(w.data(), kWeightBytes));
    FullyConnectedRequest request;
    request.weight.key = keys.back();
    request.weight.identity.digest = digests.back();
    request.weight.identity.dims = {static_cast<uint32_t>(kOut), static_cast<uint32_t>(kIn)};
    request.input_channels = kIn;
    request.output_channels = kOut;
    requests.push_back(request);
  }
  const size_t file_bytes = kWeights * kWeightBytes;
  first_load(fd, file_bytes, requests, keys, digests, true);  // Warm-up (page cache, XNNPACK).
  std::printf(
      "first load of %zu x 2048x1024 f32 (%zu MiB) from a fresh mmap, best of %zu (the two ways "
      "interleaved; ratios against weight by weight at 1 thread, verification as in the row):\n",
      kWeights, file_bytes >> 20, kReps);
  double base_wall[2] = {0, 0}, base_cpu[2] = {0, 0};  // Per verify: weight by weight, 1 thread.
  for (size_t threads : {1u, 2u}) {
    Result<Threads> made = Threads::create(threads);
    if (!made.ok()) std::abort();
    const ThreadsScope scope(&*made);
    for (bool verify : {false, true}) {
      set_verify_content(verify);
      std::vector<double> wall[2], cpu[2];  // [batch]
      for (size_t r = 0; r < kReps; ++r) {
        for (bool batch : {false, true}) {
          const std::pair<double, double> ms =
              first_load(fd, file_bytes, requests, keys, digests, batch);
          wall[batch].push_back(ms.first);
          cpu[batch].push_back(ms.second);
        }
      }
      for (bool batch : {false, true}) {
        const double bw = best(wall[batch]), bc = best(cpu[batch]);
        if (threads == 1 && !batch) base_wall[verify] = bw, base_cpu[verify] = bc;
        std::printf("  threads=%zu verify=%-3s %-16s wall %7.1f ms (%.2fx)  CPU %7.1f ms (%.2fx)\n",
                    threads, verify ? "on" : "off", batch ? "one batch" : "weight by weight", bw,
                    bw / base_wall[verify], bc, bc / base_cpu[verify]);
      }
    }
  }
  set_verify_content(true);
  close(fd);
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare

int main() {
  using namespace edgeshare::xnnpack;
  if (xnn_initialize(nullptr) != xnn_status_success) return 1;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w(kOut * kIn);
  for (float& f : w) f = dist(rng);
  std::vector<float> big(8 * w.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = w[i % w.size()] + static_cast<float>(i);
  bench_sha256(big);
  bench_pack_one(w);
  bench_first_load(w);
  return 0;
}
