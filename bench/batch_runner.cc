// batch_runner: one batch measurement in a fresh process. It loads a batch export's forward_batch
// (DIR/batch.pte over DIR/foundation.ptd and the adapter tables, the tables in memory the engine
// owns) on --threads threads, submits --sequences requests at once (each on its own adapter slot,
// or all on none with --no-adapters) with seeded prompts of --prompt-len tokens, and runs the
// BatchEngine until every request has --new-tokens tokens. A first round of 2 tokens each is
// untimed. It prints ONE JSON line on stdout:
//
//   {"sequences": 8, "adapters": true, "threads": 2, "decode_tokens_per_s": ..., "ttft_ms": ...,
//    "step_ms": ..., "rss_kib": ..., "hwm_kib": ...}
//
// decode_tokens_per_s counts every token after each request's first, over the time from the last
// first token to the last token (all requests decode together then); ttft_ms is the median time
// from the submit to a request's first token; step_ms the median decode step; rss_kib VmRSS after
// the last token, everything still loaded (foundation, tables, the slots' cache, planned memory),
// and hwm_kib the peak.
// With --single PTE it instead generates --new-tokens greedily with PTE's forward_cached over
// DIR/foundation.ptd alone (one sequence: the one-at-a-time figure) and prints the same fields.
// An error is one line on stderr and exit status 1.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "edgeshare/generation/adapter_tables.h"
#include "edgeshare/generation/batch_engine.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace bench {
namespace {

using generation::AdapterTables;
using generation::BatchEngine;
using generation::BatchLimits;
using generation::BatchRequest;
using runtime::DataFile;
using runtime::Error;
using runtime::Result;
using runtime::Status;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string dir;
  std::string single;
  int sequences = 1;
  bool no_adapters = false;
  int prompt_len = 64;
  int new_tokens = 64;
  int threads = 1;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

long StatusKib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long value = -1;
  const std::string prefix = std::string(field) + ":";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::string(line).rfind(prefix, 0) == 0) std::sscanf(line + prefix.size(), "%ld", &value);
  }
  std::fclose(f);
  return value;
}

std::vector<int64_t> Prompt(size_t length, size_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(length);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % vocab);
  return ids;
}

struct Loaded {
  std::optional<runtime::MmapDataLoader> loader;
  std::optional<runtime::Program> program;
  std::optional<runtime::Method> method;
};

Result<std::unique_ptr<Loaded>> Load(const std::string& path, const runtime::NamedDataMap& data,
                                     const char* name, const runtime::Threads* threads) {
  auto loaded = std::make_unique<Loaded>();
  ES_ASSIGN_OR_RETURN(runtime::MmapDataLoader loader, runtime::MmapDataLoader::from(path.c_str()));
  loaded->loader.emplace(std::move(loader));
  ES_ASSIGN_OR_RETURN(runtime::Program program, runtime::Program::load(&*loaded->loader));
  loaded->program.emplace(std::move(program));
  ES_ASSIGN_OR_RETURN(runtime::Method method, loaded->program->load_method(name, &data, threads));
  loaded->method.emplace(std::move(method));
  return loaded;
}

Status Single(const Options& o, const runtime::Threads* threads, nlohmann::json* out) {
  ES_ASSIGN_OR_RETURN(auto foundation, DataFile::open((o.dir + "/foundation.ptd").c_str()));
  ES_ASSIGN_OR_RETURN(auto loaded, Load(o.single, foundation->map(), "forward_cached", threads));
  ES_ASSIGN_OR_RETURN(generation::Generator generator,
                      generation::Generator::create(&*loaded->method));
  const std::vector<int64_t> prompt = Prompt(o.prompt_len, generator.vocab_size(), 1);
  const runtime::Span<const int64_t> ids(prompt.data(), prompt.size());
  ES_RETURN_IF_ERROR(generator.generate(ids, 2).status());
  ES_ASSIGN_OR_RETURN(generation::Generation g, generator.generate(ids, o.new_tokens));
  (*out)["decode_tokens_per_s"] = g.decode_tokens_per_s;
  (*out)["ttft_ms"] = g.prefill_ms;
  (*out)["step_ms"] = g.decode_tokens_per_s > 0 ? 1000.0 / g.decode_tokens_per_s : 0.0;
  (*out)["rss_kib"] = StatusKib("VmRSS");
  return Status();
}

Status Batch(const Options& o, const runtime::Threads* threads, nlohmann::json* out) {
  std::ifstream file(o.dir + "/batch.json");
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed, "cannot open %s/batch.json",
                           o.dir.c_str());
  const nlohmann::json manifest = nlohmann::json::parse(file, nullptr, false);
  ES_CHECK_OR_RETURN_ERROR(manifest.is_object(), Error::InvalidData, "%s/batch.json is not JSON",
                           o.dir.c_str());
  BatchLimits limits;
  limits.slots = manifest.at("slots").get<size_t>();
  limits.max_seq_len = manifest.at("max_seq_len").get<size_t>();
  limits.adapter_slots = manifest.at("adapter_slots").get<size_t>();
  limits.loaded_adapters = manifest.at("adapters").size();
  ES_CHECK_OR_RETURN_ERROR(
      static_cast<size_t>(o.sequences) <= limits.slots &&
          (o.no_adapters || static_cast<size_t>(o.sequences) <= limits.loaded_adapters),
      Error::InvalidArgument, "--sequences %d: the export has %zu slots and %zu adapters",
      o.sequences, limits.slots, limits.loaded_adapters);
  ES_ASSIGN_OR_RETURN(auto foundation, DataFile::open((o.dir + "/foundation.ptd").c_str()));
  ES_ASSIGN_OR_RETURN(auto initial, DataFile::open((o.dir + "/batch_tables.ptd").c_str()));
  ES_ASSIGN_OR_RETURN(std::unique_ptr<AdapterTables> tables,
                      AdapterTables::create(initial->map(), &foundation->identity()));
  initial.reset();
  ES_ASSIGN_OR_RETURN(runtime::MergedDataMap data,
                      runtime::MergedDataMap::create({&foundation->map(), tables.get()}));
  ES_ASSIGN_OR_RETURN(auto loaded, Load(o.dir + "/batch.pte", data, "forward_batch", threads));
  ES_ASSIGN_OR_RETURN(
      std::unique_ptr<BatchEngine> engine,
      BatchEngine::create(&*loaded->method, limits, BatchEngine::Options(), tables.get()));

  auto round = [&](int new_tokens, std::vector<double>* ttft, Clock::time_point* decode_start,
                   std::vector<double>* steps) -> Status {
    std::vector<Clock::time_point> first(o.sequences);
    std::vector<int> counts(o.sequences, 0);
    const Clock::time_point submitted = Clock::now();
    for (int i = 0; i < o.sequences; ++i) {
      BatchRequest request;
      request.prompt = Prompt(o.prompt_len, engine->vocab_size(), 100 + i);
      request.adapter = o.no_adapters ? -1 : i;
      request.options.max_new_tokens = new_tokens;
      request.on_token = [&, i](int64_t) {
        if (counts[i]++ == 0) first[i] = Clock::now();
        return true;
      };
      ES_RETURN_IF_ERROR(engine->submit(std::move(request)).status());
    }
    while (engine->busy()) {
      const Clock::time_point t = Clock::now();
      ES_RETURN_IF_ERROR(engine->step().status());
      const bool all_started =
          std::all_of(counts.begin(), counts.end(), [](int c) { return c > 0; });
      if (all_started && steps != nullptr) steps->push_back(Ms(Clock::now() - t));
    }
    if (ttft != nullptr) {
      for (int i = 0; i < o.sequences; ++i) ttft->push_back(Ms(first[i] - submitted));
    }
    if (decode_start != nullptr) *decode_start = *std::max_element(first.begin(), first.end());
    return Status();
  };
  ES_RETURN_IF_ERROR(round(2, nullptr, nullptr, nullptr));
  std::vector<double> ttft, steps;
  Clock::time_point decode_start;
  ES_RETURN_IF_ERROR(round(o.new_tokens, &ttft, &decode_start, &steps));
  const double decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  // Tokens after the last request's first token: each request's (new_tokens - 1) minus what it
  // produced before that moment is approximated by the steps counted from then on.
  const double tokens = static_cast<double>(steps.size()) * o.sequences;
  (*out)["decode_tokens_per_s"] = decode_s > 0 ? tokens / decode_s : 0.0;
  (*out)["ttft_ms"] = Median(ttft);
  (*out)["step_ms"] = Median(steps);
  (*out)["rss_kib"] = StatusKib("VmRSS");
  return Status();
}

}  // namespace
}  // namespace bench
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  CLI::App app{"One batch-engine measurement (or one single-sequence one) in a fresh process."};
  bench::Options o;
  app.add_option("--dir", o.dir, "a batch export (batch.pte, batch.json, foundation.ptd, ...)")
      ->required();
  app.add_option("--single", o.single, "a program's forward_cached alone, over DIR/foundation.ptd");
  app.add_option("--sequences", o.sequences, "requests at once")->check(CLI::Range(1, 256));
  app.add_flag("--no-adapters", o.no_adapters, "every request on the bare foundation");
  app.add_option("--prompt-len", o.prompt_len, "prompt tokens")->check(CLI::Range(1, 100000));
  app.add_option("--new-tokens", o.new_tokens, "tokens per request")->check(CLI::Range(2, 100000));
  app.add_option("--threads", o.threads, "threads of the method")->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  auto threads = runtime::Threads::create(static_cast<size_t>(o.threads));
  if (!threads.ok()) {
    std::fprintf(stderr, "batch_runner: %s\n", threads.status().message());
    return 1;
  }
  nlohmann::json out;
  out["sequences"] = o.single.empty() ? o.sequences : 1;
  out["adapters"] = o.single.empty() ? !o.no_adapters : true;
  out["threads"] = o.threads;
  const runtime::Status status =
      o.single.empty() ? bench::Batch(o, &*threads, &out) : bench::Single(o, &*threads, &out);
  if (!status.ok()) {
    std::fprintf(stderr, "batch_runner: %s\n", status.message());
    return 1;
  }
  out["hwm_kib"] = bench::StatusKib("VmHWM");
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
