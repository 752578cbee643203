// What column slabs do to the shared fully connected entries, measured (printed, never asserted):
// the twelve fully connected weights of the reference model (models/reference.py: 4 blocks of
// o_proj 1024x1024, up 2048x1024, down 1024x2048, each with a bias; 80 MiB of f32), packed
// through WeightsCache instances that differ only in their slab settings.
//   1. a "forward" (every weight once, in model order) at T=1 and T=32 with 1 and 2 delegate
//      threads, for one operator per weight vs several slab sizes and both 2-thread schedules,
//      INTERLEAVED round by round so that other jobs on the shared machine slow all alike; the
//      figures per configuration are the median and the best over rounds, and their ratios to one
//      operator per weight;
//   2. a first load (fetch + SHA-256 + pack of all twelve through a fresh cache) at 1 and 2
//      threads, one operator per weight vs the default slabs, also interleaved, plus the same
//      twelve loaded by two threads at once (six each).
//
//   ./bazelw run -c opt //backends/xnnpack/runtime:slabs_bench

#include <unistd.h>
#include <xnnpack.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/in_memory_data_map.h"
#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/backends/xnnpack/runtime/weights_cache.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/core/sha256.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::Digest;
using runtime::Error;
using runtime::Result;
using runtime::Status;

constexpr size_t kBlocks = 4, kModel = 1024, kHidden = 2048;
constexpr size_t kRounds = 40, kLoadRounds = 9;

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(const Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s\n", status.message());
  std::abort();
}

runtime::Threads make_threads(size_t count) {
  runtime::Result<runtime::Threads> threads = runtime::Threads::create(count);
  check(threads.status());
  return std::move(*threads);
}

// One weight of the model: [out, in] and its bias [out], as named constants.
struct Layer {
  size_t in = 0, out = 0;
  ConstantRef weight, bias;
};

ConstantRef named(const std::string& key, const Digest& digest, std::vector<uint32_t> dims) {
  ConstantRef ref;
  ref.key = key;
  ref.identity.digest = digest;
  ref.identity.dims = std::move(dims);
  return ref;
}

std::vector<Layer> make_model(InMemoryDataMap* map) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  const size_t shapes[3][2] = {{kModel, kModel}, {kHidden, kModel}, {kModel, kHidden}};
  const char* names[3] = {"o_proj", "up", "down"};
  std::vector<Layer> layers;
  for (size_t b = 0; b < kBlocks; ++b) {
    for (size_t s = 0; s < 3; ++s) {
      Layer layer;
      layer.out = shapes[s][0];
      layer.in = shapes[s][1];
      const std::string key = "blocks." + std::to_string(b) + "." + names[s];
      std::vector<float> w(layer.out * layer.in), bias(layer.out);
      for (float& f : w) f = dist(rng);
      for (float& f : bias) f = dist(rng);
      const Digest weight_digest = map->add(key + ".weight", w);
      const Digest bias_digest = map->add(key + ".bias", bias);
      const uint32_t out = static_cast<uint32_t>(layer.out), in = static_cast<uint32_t>(layer.in);
      layer.weight = named(key + ".weight", weight_digest, {out, in});
      layer.bias = named(key + ".bias", bias_digest, {out});
      layers.push_back(std::move(layer));
    }
  }
  return layers;
}

// A cache with one slab setting and the model's entries packed in it.
struct Config {
  std::string name;
  std::unique_ptr<WeightsCache> cache;
  std::vector<PackedOperator*> ops;
  std::vector<double> ms[2][2];  // [T=1, T=32][1, 2 threads]
};

void pack_all(WeightsCache* cache, const InMemoryDataMap& map, const std::vector<Layer>& layers,
              size_t first, size_t step, std::vector<PackedOperator*>* ops) {
  for (size_t i = first; i < layers.size(); i += step) {
    const Layer& l = layers[i];
    auto op = cache->get_or_pack_fully_connected(&map, l.weight, &l.bias, l.in, l.out);
    check(op.status());
    ops->push_back(*op);
  }
}

// Every weight once, in model order, over fixed [T, 2048] input and output buffers.
double forward(const Config& config, size_t batch, const std::vector<float>& x,
               std::vector<float>* y) {
  const double t0 = now_ms();
  for (PackedOperator* op : config.ops) {
    check(op->run_fully_connected(batch, x.data(), y->data(), threadpool()));
  }
  return now_ms() - t0;
}

void bench_forward(const InMemoryDataMap& map, const std::vector<Layer>& layers) {
  std::vector<Config> configs;
  auto add = [&](const std::string& name, size_t slab_bytes) {
    Config c;
    c.name = name;
    c.cache.reset(new WeightsCache(slab_bytes));
    pack_all(c.cache.get(), map, layers, 0, 1, &c.ops);
    configs.push_back(std::move(c));
  };
  add("one operator per weight", 0);
  for (size_t kib : {256, 512, 1024, 2048}) {
    const bool is_default = (kib << 10) == default_slab_bytes();
    add("slabs of " + std::to_string(kib) + " KiB" + (is_default ? " (default)" : ""), kib << 10);
  }
  const size_t batches[2] = {1, 32};
  std::vector<float> x(32 * kHidden, 0.5f), y(32 * kHidden);
  // Each count's Threads lives through every round, as a program's does through its forwards.
  const runtime::Threads threads_of[2] = {make_threads(1), make_threads(2)};
  for (size_t round = 0; round < kRounds; ++round) {
    for (size_t threads = 1; threads <= 2; ++threads) {
      const runtime::ThreadsScope scope(&threads_of[threads - 1]);
      for (size_t b = 0; b < 2; ++b) {
        for (Config& c : configs) c.ms[b][threads - 1].push_back(forward(c, batches[b], x, &y));
      }
    }
  }
  std::printf(
      "forward over the 12 reference weights (80 MiB f32), %zu interleaved rounds, median "
      "and best ms (ratio to one operator per weight):\n",
      kRounds);
  for (size_t b = 0; b < 2; ++b) {
    for (size_t t = 0; t < 2; ++t) {
      std::printf(" T=%zu, %zu thread(s):\n", batches[b], t + 1);
      const double base = median(configs[0].ms[b][t]), base_best = best(configs[0].ms[b][t]);
      for (const Config& c : configs) {
        const double m = median(c.ms[b][t]), m_best = best(c.ms[b][t]);
        std::printf("   %-58s median %7.2f ms %.3fx  best %7.2f ms %.3fx (%.1f GFLOP/s)\n",
                    c.name.c_str(), m, m / base, m_best, m_best / base_best,
                    2.0 * batches[b] * 5.0 * 1024 * 1024 * kBlocks / m_best / 1e6);
      }
    }
  }
  for (Config& c : configs) {
    for (PackedOperator* op : c.ops) c.cache->release(op);
  }
}

// One first load through a fresh cache, by `loaders` threads splitting the weights. Returns ms.
double first_load(const InMemoryDataMap& map, const std::vector<Layer>& layers, size_t slab_bytes,
                  size_t loaders) {
  WeightsCache cache(slab_bytes);
  std::vector<std::vector<PackedOperator*>> ops(loaders);
  const double t0 = now_ms();
  std::vector<std::thread> threads;
  // Every loader packs on the caller's Threads, as loads sharing one program set's Threads do.
  const runtime::Threads* current = runtime::current_threads();
  for (size_t i = 1; i < loaders; ++i) {
    threads.emplace_back([&, i, current] {
      const runtime::ThreadsScope scope(current);
      pack_all(&cache, map, layers, i, loaders, &ops[i]);
    });
  }
  pack_all(&cache, map, layers, 0, loaders, &ops[0]);
  for (std::thread& t : threads) t.join();
  const double ms = now_ms() - t0;
  for (auto& list : ops) {
    for (PackedOperator* op : list) cache.release(op);
  }
  return ms;
}

void bench_first_load(const InMemoryDataMap& map, const std::vector<Layer>& layers) {
  set_verify_content(true);
  struct Load {
    const char* name;
    size_t threads, slab_bytes, loaders;
    std::vector<double> ms;
  };
  std::vector<Load> loads;
  for (size_t threads : {1, 2}) {
    loads.push_back({"one operator per weight, 1 loader", threads, 0, 1, {}});
    loads.push_back({"default slabs, 1 loader", threads, default_slab_bytes(), 1, {}});
    loads.push_back({"default slabs, 2 loader threads", threads, default_slab_bytes(), 2, {}});
  }
  first_load(map, layers, 0, 1);  // Warm-up: XNNPACK's first allocations, page faults.
  const runtime::Threads threads_of[2] = {make_threads(1), make_threads(2)};
  for (size_t round = 0; round < kLoadRounds; ++round) {
    for (Load& l : loads) {
      const runtime::ThreadsScope scope(&threads_of[l.threads - 1]);
      l.ms.push_back(first_load(map, layers, l.slab_bytes, l.loaders));
    }
  }
  std::printf(
      "first load (fetch + SHA-256 + pack) of the 12 weights and biases, %zu interleaved "
      "rounds, median and best:\n",
      kLoadRounds);
  for (size_t i = 0; i < loads.size(); ++i) {
    const Load& base = loads[i - i % 3];
    const double m = median(loads[i].ms), m_best = best(loads[i].ms);
    std::printf("  threads=%zu %-36s median %6.1f ms %.3fx  best %6.1f ms %.3fx\n",
                loads[i].threads, loads[i].name, m, m / median(base.ms), m_best,
                m_best / best(base.ms));
  }
}

}  // namespace
}  // namespace xnnpack
}  // namespace edgeshare

int main() {
  using namespace edgeshare::xnnpack;
  // The delegate's allocator, so slabs are packed into huge pages as at run time.
  if (initialize_xnnpack() != xnn_status_success) return 1;
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  std::printf("L2 per core (sysconf): %ld bytes; default slab: %zu bytes\n", l2,
              default_slab_bytes());
  // The model's constants handed out zero-copy, as an mmapped .ptd would be.
  InMemoryDataMap map("reference.ptd", InMemoryDataMap::Buffers::kViews);
  const std::vector<Layer> layers = make_model(&map);
  bench_forward(map, layers);
  bench_first_load(map, layers);
  return 0;
}
