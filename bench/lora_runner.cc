// lora_runner: one measurement of the LoRA benchmark, in a fresh process. bench/lora.py runs it
// once per configuration so that RSS, load times and the weights cache start from nothing.
//
//   lora_runner --data foundation.ptd --program a.pte [--program b.pte ...] [--no-share]
//               [--no-verify] [--warmup W] [--iterations K] [--threads N] [--method NAME]
//               [--input X.npy ...] [--swap-data A.ptd --swap-data B.ptd ... --swap-rounds R]
//
// It reads VmRSS before opening anything, opens the data files (DataFile::open), loads every
// program (MmapDataLoader + Program::load + load_method of each method) one after another, and
// reads VmRSS after each, then again after malloc_trim(0) (what the programs hold, without the
// allocator's free pages). With --iterations K > 0 it then runs the first program's first method
// (--method: that one) W times untimed and K times timed and reads VmRSS again; its inputs are the
// --input .npy files in order (e.g. int64 input_ids [1, T] of an HF program: T picks the length of
// a dynamic program), seeded floats for the rest. With --swap-data it opens those adapter data
// files and times Method::rebind_data of that method onto each in turn, R rounds (an adapter swap
// on a loaded method: "swap_ms", "swap_open_ms"). Last, it destroys everything and reads VmRSS once
// more. It prints ONE JSON line on stdout:
//
//   {"sharing": true, "verify": true, "programs": 2, "rss_before_kib": ..., "data_open_ms": ...,
//    "load_ms": [..per program..], "rss_after_kib": [..per program..], "rss_anon_after_kib": [..],
//    "rss_file_after_kib": [..], "heap_before_kib": ..., "heap_after_kib": [..per program..],
//    "rss_loaded_kib": ...,
//    "rss_anon_before_kib": ..., "rss_file_before_kib": ..., "rss_anon_loaded_kib": ...,
//    "rss_file_loaded_kib": ..., "hwm_loaded_kib": ..., "rss_trimmed_kib": ..., "rss_ran_kib": ...,
//    "rss_released_kib": ..., "latency_ms": [..K samples..], "cpu_ms_per_run": ...,
//    "packs": ..., "cache_hits": ...,
//    "bytes_fetched": ..., "packed_entries": ..., "packed_entries_released": ...,
//    "data_files_open": ..., "methods": [..the first program's method names..],
//    "swap_ms": [..one per rebind..], "swap_open_ms": ..., "rss_swapped_kib": ...}
//
// Memory figures are KiB as /proc/self/status gives them; heap_* is malloc's bytes in use
// (mallinfo2), allocated whether touched or not (a calloc'd plan untouched is not in VmRSS).
// hwm_loaded_kib is VmHWM after loading: the kernel folds the current RSS into it when it is read
// or memory is unmapped, so a peak given back in other ways (brk shrink, madvise) may be missed: it
// is a lower bound of the peak. An error is one line on stderr and exit status 1.

#include <malloc.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/npy.h"
#include "edgeshare/tools/program_set.h"
#include "edgeshare/tools/program_set_flags.h"

namespace edgeshare {
namespace bench {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::Method;
using runtime::Result;
using runtime::Status;
using tools::ProgramSet;

struct Options {
  tools::ProgramSetFlags set;  // --program, --data, --no-share, --threads.
  int warmup = 2;
  int iterations = 0;
  std::string method;               // empty: the first program's first method
  std::vector<std::string> inputs;  // .npy files, the method's first inputs in order
  std::vector<std::string> swap_data;
  int swap_rounds = 10;
};

void DeclareFlags(CLI::App& app, Options& options) {
  tools::add_program_set_flags(app, options.set);
  app.add_option("--warmup", options.warmup, "untimed runs before the timed ones")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--iterations", options.iterations, "timed runs of the first method (0: none)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--method", options.method, "the method to time (default: the first)");
  app.add_option("--input", options.inputs, "an input .npy of that method, in order; repeat");
  app.add_option("--swap-data", options.swap_data,
                 "an adapter .ptd to rebind the method to (Method::rebind_data); repeat");
  app.add_option("--swap-rounds", options.swap_rounds, "rounds over every --swap-data")
      ->check(CLI::Range(1, 1000000));
}

// The process's memory counters from /proc/self/status, in KiB.
struct MemoryKib {
  long rss = 0;
  long anon = 0;
  long file = 0;
  long hwm = 0;
  long heap = 0;  // malloc's bytes in use (mallinfo2: small chunks + mmapped ones), in KiB
};

Result<MemoryKib> ReadMemory() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  ES_CHECK_OR_RETURN_ERROR(f != nullptr, Error::AccessFailed, "cannot read /proc/self/status");
  MemoryKib memory;
  bool found_rss = false;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long value = 0;
    if (std::sscanf(line, "VmRSS: %ld kB", &value) == 1) {
      memory.rss = value;
      found_rss = true;
    } else if (std::sscanf(line, "RssAnon: %ld kB", &value) == 1) {
      memory.anon = value;
    } else if (std::sscanf(line, "RssFile: %ld kB", &value) == 1) {
      memory.file = value;
    } else if (std::sscanf(line, "VmHWM: %ld kB", &value) == 1) {
      memory.hwm = value;
    }
  }
  std::fclose(f);
  const struct mallinfo2 info = ::mallinfo2();
  memory.heap = static_cast<long>((info.uordblks + info.hblkhd) / 1024);
  ES_CHECK_OR_RETURN_ERROR(found_rss, Error::InvalidData, "no VmRSS in /proc/self/status");
  return memory;
}

// Loads every program after the data files, reading VmRSS after each.
Status LoadAll(const Options& options, ProgramSet& set, std::vector<MemoryKib>& after) {
  for (const std::string& path : options.set.programs) {
    ES_RETURN_IF_ERROR(set.add(path));
    ES_CHECK_OR_RETURN_ERROR(!set.programs().back().methods.empty(), Error::InvalidProgram,
                             "%s has no method", path.c_str());
    ES_ASSIGN_OR_RETURN(const MemoryKib now, ReadMemory());
    after.push_back(now);
  }
  return Status();
}

Result<Method*> FindMethod(tools::LoadedProgram& entry, const std::string& name) {
  if (name.empty()) return &entry.methods.front();
  for (Method& method : entry.methods) {
    if (name == method.name()) return &method;
  }
  return Status::Format(Error::InvalidArgument, "%s has no method '%s'", entry.path.c_str(),
                        name.c_str());
}

double ProcessCpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Wall-clock samples, and the process's CPU time per timed run in *cpu_ms (every thread's: with a
// pool of 2+ threads it counts their spinning too). On a shared machine the CPU time of a 1-thread
// run is what it cost, however long other processes held the core.
Result<std::vector<double>> MeasureLatency(Method& method, const std::vector<std::string>& inputs,
                                           int warmup, int iterations, double* cpu_ms) {
  std::vector<tools::NpyArray> given;
  for (const std::string& path : inputs) {
    ES_ASSIGN_OR_RETURN(tools::NpyArray array, tools::read_npy(path));
    given.push_back(std::move(array));
  }
  ES_RETURN_IF_ERROR(tools::seed_inputs(method, given, "the first program"));
  ES_RETURN_IF_ERROR(tools::time_method(method, warmup, 0).status());
  const double cpu_start = ProcessCpuMs();
  ES_ASSIGN_OR_RETURN(std::vector<double> samples, tools::time_method(method, 0, iterations));
  *cpu_ms = (ProcessCpuMs() - cpu_start) / iterations;
  return samples;
}

// An adapter swap: rebind_data onto each file in turn, `rounds` times; ms per rebind. The method
// remembers each file's binding (it holds the file), so only a file's first bind looks keys up.
Result<std::vector<double>> MeasureSwaps(Method& method,
                                         const std::vector<std::shared_ptr<const DataFile>>& files,
                                         int rounds) {
  std::vector<double> samples;
  for (int round = 0; round < rounds; ++round) {
    for (const std::shared_ptr<const DataFile>& file : files) {
      const auto start = std::chrono::steady_clock::now();
      ES_RETURN_IF_ERROR(
          method.rebind_data(std::shared_ptr<const runtime::NamedDataMap>(file, &file->map())));
      samples.push_back(tools::milliseconds_since(start));
    }
  }
  return samples;
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.set.share);
  xnnpack::set_verify_content(options.set.verify);
  ES_ASSIGN_OR_RETURN(const MemoryKib before, ReadMemory());

  ES_ASSIGN_OR_RETURN(ProgramSet set, ProgramSet::open(options.set.data_files,
                                                       static_cast<size_t>(options.set.threads)));
  std::vector<MemoryKib> after;
  ES_RETURN_IF_ERROR(LoadAll(options, set, after));
  std::vector<long> rss_after_kib, anon_after_kib, file_after_kib, heap_after_kib;
  for (const MemoryKib& step : after) {
    rss_after_kib.push_back(step.rss);
    anon_after_kib.push_back(step.anon);
    file_after_kib.push_back(step.file);
    heap_after_kib.push_back(step.heap);
  }
  ES_ASSIGN_OR_RETURN(const MemoryKib after_load, ReadMemory());
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  const size_t files_open = DataFile::open_count();

  // What the allocator keeps of freed memory (unpacked bytes fetched then released after packing)
  // counts in VmRSS; RSS after malloc_trim is the memory the loaded programs really hold
  // (read before running: execution touches planned memory for the first time).
  ::malloc_trim(0);
  ES_ASSIGN_OR_RETURN(const MemoryKib trimmed, ReadMemory());

  ES_ASSIGN_OR_RETURN(Method * timed, FindMethod(set.programs().front(), options.method));
  std::vector<double> latency_ms;
  double cpu_ms_per_run = 0.0;
  if (options.iterations > 0) {
    ES_ASSIGN_OR_RETURN(latency_ms, MeasureLatency(*timed, options.inputs, options.warmup,
                                                   options.iterations, &cpu_ms_per_run));
  }
  ES_ASSIGN_OR_RETURN(const MemoryKib ran, ReadMemory());
  nlohmann::json methods = nlohmann::json::array();
  for (const Method& method : set.programs().front().methods) methods.push_back(method.name());

  std::vector<std::shared_ptr<const DataFile>> swap_files;  // outlive the set (cleared below)
  const auto swap_open_start = std::chrono::steady_clock::now();
  for (const std::string& path : options.swap_data) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    swap_files.push_back(std::move(file));
  }
  const double swap_open_ms = tools::milliseconds_since(swap_open_start);
  std::vector<double> swap_ms;
  if (!swap_files.empty()) {
    ES_ASSIGN_OR_RETURN(swap_ms, MeasureSwaps(*timed, swap_files, options.swap_rounds));
  }
  ES_ASSIGN_OR_RETURN(const MemoryKib swapped, ReadMemory());

  std::vector<double> load_ms;
  for (const tools::LoadedProgram& entry : set.programs()) load_ms.push_back(entry.load_ms);
  const double data_open_ms = set.data_open_ms();
  set.clear();
  ES_ASSIGN_OR_RETURN(const MemoryKib released, ReadMemory());
  const xnnpack::WeightsCacheStats released_stats = xnnpack::process_weights_cache_stats();

  nlohmann::json report = tools::weights_cache_json(stats);
  report["sharing"] = options.set.share;
  report["verify"] = options.set.verify;
  report["programs"] = options.set.programs.size();
  report["rss_before_kib"] = before.rss;
  report["data_open_ms"] = data_open_ms;
  report["load_ms"] = load_ms;
  report["rss_after_kib"] = rss_after_kib;
  report["rss_anon_after_kib"] = anon_after_kib;
  report["rss_file_after_kib"] = file_after_kib;
  report["heap_after_kib"] = heap_after_kib;
  report["heap_before_kib"] = before.heap;
  report["rss_loaded_kib"] = after_load.rss;
  report["rss_anon_before_kib"] = before.anon;
  report["rss_file_before_kib"] = before.file;
  report["rss_anon_loaded_kib"] = after_load.anon;
  report["rss_file_loaded_kib"] = after_load.file;
  report["hwm_loaded_kib"] = after_load.hwm;
  report["rss_trimmed_kib"] = trimmed.rss;
  report["rss_ran_kib"] = ran.rss;
  report["rss_released_kib"] = released.rss;
  report["latency_ms"] = latency_ms;
  report["cpu_ms_per_run"] = cpu_ms_per_run;
  report["packed_entries_released"] = released_stats.num_packed_entries;
  report["data_files_open"] = files_open;
  report["methods"] = methods;
  report["swap_ms"] = swap_ms;
  report["swap_open_ms"] = swap_open_ms;
  report["rss_swapped_kib"] = swapped.rss;
  std::printf("%s\n", report.dump().c_str());
  return Status();
}

}  // namespace
}  // namespace bench
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  CLI::App app{"One measurement of the LoRA benchmark: RSS, load times, latency.", "lora_runner"};
  bench::Options options;
  bench::DeclareFlags(app, options);
  return tools::run_tool(app, argc, argv, [&] { return bench::Run(options); });
}
