// lora_runner: one measurement of the LoRA benchmark, in a fresh process. bench/lora.py runs it
// once per configuration so that RSS, load times and the weights cache start from nothing.
//
//   lora_runner --data foundation.ptd --program a.pte [--program b.pte ...] [--no-share]
//               [--warmup W] [--iterations K] [--threads N]
//
// It reads VmRSS before opening anything, opens the data files (DataFile::open), loads every
// program (MmapDataLoader + Program::load + load_method of each method) one after another, and
// reads VmRSS after each, then again after malloc_trim(0) (what the programs hold, without the
// allocator's free pages). With --iterations K > 0 it then runs the first program's first method
// W times untimed and K times timed (seeded inputs) and reads VmRSS again. Last, it destroys
// everything and reads VmRSS once more. It prints ONE JSON line on stdout:
//
//   {"sharing": true, "programs": 2, "rss_before_kib": ..., "data_open_ms": ...,
//    "load_ms": [..per program..], "rss_after_kib": [..per program..], "rss_loaded_kib": ...,
//    "rss_anon_before_kib": ..., "rss_file_before_kib": ..., "rss_anon_loaded_kib": ...,
//    "rss_file_loaded_kib": ..., "hwm_loaded_kib": ..., "rss_trimmed_kib": ..., "rss_ran_kib": ...,
//    "rss_released_kib": ..., "latency_ms": [..K samples..], "packs": ..., "cache_hits": ...,
//    "bytes_fetched": ..., "packed_entries": ..., "packed_entries_released": ...,
//    "data_files_open": ...}
//
// Memory figures are KiB as /proc/self/status gives them. hwm_loaded_kib is VmHWM after loading:
// the kernel folds the current RSS into it when it is read or memory is unmapped, so a peak given
// back in other ways (brk shrink, madvise) may be missed: it is a lower bound of the peak.
// An error is one line on stderr and exit status 1.

#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/log.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace bench {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::MmapDataLoader;
using runtime::MergedDataMap;
using runtime::Method;
using runtime::Program;
using runtime::Result;
using runtime::Status;
using runtime::Tensor;

const char kUsage[] =
    "usage: lora_runner --program A.pte [--program B.pte ...] [--data F.ptd ...] [--no-share]\n"
    "                   [--warmup W] [--iterations K] [--threads N]\n";

struct Options {
  std::vector<std::string> programs;
  std::vector<std::string> data_files;
  bool share = true;
  size_t threads = 1;
  int warmup = 2;
  int iterations = 0;
};

Result<int> ParseCount(const char* flag, const char* text, int minimum) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  ES_CHECK_OR_RETURN_ERROR(end != text && *end == '\0' && value >= minimum && value <= 1000000,
                           Error::InvalidArgument, "%s must be an integer >= %d, got '%s'", flag,
                           minimum, text);
  return static_cast<int>(value);
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> Result<const char*> {
      ES_CHECK_OR_RETURN_ERROR(i + 1 < argc, Error::InvalidArgument, "%s needs a value", flag);
      return static_cast<const char*>(argv[++i]);
    };
    if (arg == "--program") {
      ES_ASSIGN_OR_RETURN(const char* v, value("--program"));
      options.programs.push_back(v);
    } else if (arg == "--data") {
      ES_ASSIGN_OR_RETURN(const char* v, value("--data"));
      options.data_files.push_back(v);
    } else if (arg == "--no-share") {
      options.share = false;
    } else if (arg == "--threads") {
      ES_ASSIGN_OR_RETURN(const char* v, value("--threads"));
      ES_ASSIGN_OR_RETURN(options.threads, ParseCount("--threads", v, 1));
    } else if (arg == "--warmup") {
      ES_ASSIGN_OR_RETURN(const char* v, value("--warmup"));
      ES_ASSIGN_OR_RETURN(options.warmup, ParseCount("--warmup", v, 0));
    } else if (arg == "--iterations") {
      ES_ASSIGN_OR_RETURN(const char* v, value("--iterations"));
      ES_ASSIGN_OR_RETURN(options.iterations, ParseCount("--iterations", v, 0));
    } else {
      return Status::Format(Error::InvalidArgument, "unknown argument '%s'", arg.c_str());
    }
  }
  ES_CHECK_OR_RETURN_ERROR(!options.programs.empty(), Error::InvalidArgument,
                           "at least one --program is needed");
  return options;
}

// The process's memory counters from /proc/self/status, in KiB.
struct MemoryKib {
  long rss = 0;
  long anon = 0;
  long file = 0;
  long hwm = 0;
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
  ES_CHECK_OR_RETURN_ERROR(found_rss, Error::InvalidData, "no VmRSS in /proc/self/status");
  return memory;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::milli>(elapsed).count();
}

// Seeded inputs in [-1, 1): a fixed LCG, the same numbers as tools/run.
void FillSeeded(Tensor& t, uint32_t seed) {
  uint64_t state = 0x9E3779B97F4A7C15ull ^ seed;
  float* data = t.data<float>();
  for (size_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<float>((state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
  }
}

struct Loaded {
  std::unique_ptr<MmapDataLoader> loader;
  std::unique_ptr<Program> program;
  std::vector<Method> methods;  // Destroyed first: they borrow the program and the loader.
};

Result<Loaded> LoadProgram(const std::string& path, const runtime::NamedDataMap* external) {
  Loaded entry;
  ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from(path.c_str()));
  entry.loader = std::make_unique<MmapDataLoader>(std::move(loader));
  ES_ASSIGN_OR_RETURN(Program program, Program::load(entry.loader.get()));
  entry.program = std::make_unique<Program>(std::move(program));
  for (size_t m = 0; m < entry.program->num_methods(); ++m) {
    ES_ASSIGN_OR_RETURN(const char* method_name, entry.program->get_method_name(m));
    ES_ASSIGN_OR_RETURN(Method method, entry.program->load_method(method_name, external));
    entry.methods.push_back(std::move(method));
  }
  ES_CHECK_OR_RETURN_ERROR(!entry.methods.empty(), Error::InvalidProgram, "%s has no method",
                           path.c_str());
  return entry;
}

Result<std::vector<double>> MeasureLatency(Method& method, int warmup, int iterations) {
  for (size_t i = 0; i < method.num_inputs(); ++i) {
    ES_ASSIGN_OR_RETURN(Tensor slot, method.input(i));
    ES_CHECK_OR_RETURN_ERROR(slot.scalar_type() == runtime::ScalarType::Float, Error::NotSupported,
                             "input %zu of %s is not float", i, method.name());
    FillSeeded(slot, static_cast<uint32_t>(i));
  }
  for (int it = 0; it < warmup; ++it) ES_RETURN_IF_ERROR(method.execute());
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(iterations));
  for (int it = 0; it < iterations; ++it) {
    const auto start = std::chrono::steady_clock::now();
    ES_RETURN_IF_ERROR(method.execute());
    samples.push_back(MillisecondsSince(start));
  }
  return samples;
}

// Prints "key": [v0, v1, ...] with `digits` decimals.
void PrintList(const char* key, const std::vector<double>& values, int digits) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < values.size(); ++i) {
    std::printf("%s%.*f", i ? ", " : "", digits, values[i]);
  }
  std::printf("]");
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.share);
  ES_RETURN_IF_ERROR(xnnpack::set_num_threads(options.threads));
  ES_ASSIGN_OR_RETURN(const MemoryKib before, ReadMemory());

  // Declared before the programs: they borrow the data maps and must go first.
  std::vector<std::shared_ptr<const DataFile>> data_files;
  std::unique_ptr<MergedDataMap> external;
  std::vector<Loaded> loaded;

  const auto open_start = std::chrono::steady_clock::now();
  std::vector<const runtime::NamedDataMap*> maps;
  for (const std::string& path : options.data_files) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    maps.push_back(&file->map());
    data_files.push_back(std::move(file));
  }
  if (!maps.empty()) {
    ES_ASSIGN_OR_RETURN(MergedDataMap merged, MergedDataMap::create(maps));
    external = std::make_unique<MergedDataMap>(std::move(merged));
  }
  const double data_open_ms = MillisecondsSince(open_start);

  std::vector<double> load_ms;
  std::vector<double> rss_after_kib;
  for (const std::string& path : options.programs) {
    const auto start = std::chrono::steady_clock::now();
    ES_ASSIGN_OR_RETURN(Loaded entry, LoadProgram(path, external.get()));
    load_ms.push_back(MillisecondsSince(start));
    loaded.push_back(std::move(entry));
    ES_ASSIGN_OR_RETURN(const MemoryKib now, ReadMemory());
    rss_after_kib.push_back(static_cast<double>(now.rss));
  }
  ES_ASSIGN_OR_RETURN(const MemoryKib after_load, ReadMemory());
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  const size_t files_open = DataFile::open_count();

  // What the allocator keeps of freed memory (unpacked bytes fetched then released after packing)
  // counts in VmRSS; RSS after malloc_trim is the memory the loaded programs really hold
  // (read before running: execution touches planned memory for the first time).
  ::malloc_trim(0);
  ES_ASSIGN_OR_RETURN(const MemoryKib trimmed, ReadMemory());

  std::vector<double> latency_ms;
  if (options.iterations > 0) {
    ES_ASSIGN_OR_RETURN(latency_ms,
                        MeasureLatency(loaded.front().methods.front(), options.warmup,
                                       options.iterations));
  }
  ES_ASSIGN_OR_RETURN(const MemoryKib ran, ReadMemory());

  loaded.clear();
  external.reset();
  data_files.clear();
  ES_ASSIGN_OR_RETURN(const MemoryKib released, ReadMemory());
  const xnnpack::WeightsCacheStats released_stats = xnnpack::process_weights_cache_stats();

  std::printf("{\"sharing\": %s, \"programs\": %zu, \"rss_before_kib\": %ld, ",
              options.share ? "true" : "false", options.programs.size(), before.rss);
  std::printf("\"data_open_ms\": %.4f, ", data_open_ms);
  PrintList("load_ms", load_ms, 4);
  std::printf(", ");
  PrintList("rss_after_kib", rss_after_kib, 0);
  std::printf(", \"rss_loaded_kib\": %ld, \"rss_anon_before_kib\": %ld", after_load.rss,
              before.anon);
  std::printf(", \"rss_file_before_kib\": %ld", before.file);
  std::printf(", \"rss_anon_loaded_kib\": %ld, \"rss_file_loaded_kib\": %ld", after_load.anon,
              after_load.file);
  std::printf(", \"hwm_loaded_kib\": %ld, \"rss_trimmed_kib\": %ld, \"rss_ran_kib\": %ld",
              after_load.hwm, trimmed.rss, ran.rss);
  std::printf(", \"rss_released_kib\": %ld, ", released.rss);
  PrintList("latency_ms", latency_ms, 5);
  std::printf(", \"packs\": %llu, \"cache_hits\": %llu, \"bytes_fetched\": %llu",
              static_cast<unsigned long long>(stats.packs),
              static_cast<unsigned long long>(stats.cache_hits),
              static_cast<unsigned long long>(stats.bytes_fetched));
  std::printf(", \"packed_entries\": %zu, \"packed_entries_released\": %zu",
              stats.num_packed_entries, released_stats.num_packed_entries);
  std::printf(", \"data_files_open\": %zu}\n", files_open);
  return Status();
}

void LogToStderr(runtime::LogLevel level, const char* message) {
  if (level >= runtime::LogLevel::Warning) std::fprintf(stderr, "%s\n", message);
}

}  // namespace
}  // namespace bench
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  runtime::set_log_sink(bench::LogToStderr);
  runtime::Result<bench::Options> options = bench::ParseArgs(argc, argv);
  runtime::Status status = options.ok() ? bench::Run(*options) : options.status();
  if (!status.ok()) {
    std::fprintf(stderr, "lora_runner: error: %s\n%s", status.message(),
                 options.ok() ? "" : bench::kUsage);
    return 1;
  }
  return 0;
}
