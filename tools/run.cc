// run: loads every given program in one process over the given data files, runs each method once,
// and reports outputs, latency and what the XNNPACK weights cache fetched and packed.
//
//   bazel run //tools:run -- --program lora_a.pte --program lora_b.pte --data foundation.ptd
//       [--inputs x.npy[,y.npy]] [--outputs DIR] [--stats-json FILE] [--no-share] [--iterations N]
//       [--threads N]
//
// Without --inputs every input is filled with seeded values in [-1, 1). --outputs writes
// DIR/<program>.<method>.output<i>.npy. A malformed file gives a one-line error and exit status 1.

#include <sys/stat.h>

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
#include "edgeshare/tools/npy.h"

namespace edgeshare {
namespace tools {
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

struct Options {
  std::vector<std::string> programs;
  std::vector<std::string> data_files;
  std::vector<std::string> inputs;
  std::string outputs_dir;
  std::string stats_json;
  bool share = true;
  int iterations = 1;
  int threads = 1;
};

const char kUsage[] =
    "usage: run --program A.pte [--program B.pte ...] [--data F.ptd ...] [--inputs X.npy[,Y.npy]]\n"
    "           [--outputs DIR] [--stats-json FILE] [--no-share] [--iterations N] [--threads N]\n";

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find(',', start);
    const std::string part = text.substr(start, end == std::string::npos ? end : end - start);
    if (!part.empty()) parts.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

// Under `bazel run` the tool starts in its runfiles; relative paths mean the user's directory.
std::string UserPath(const std::string& path) {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || dir == nullptr) return path;
  return std::string(dir) + "/" + path;
}

Result<Options> ParseArgs(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> Result<std::string> {
      ES_CHECK_OR_RETURN_ERROR(i + 1 < argc, Error::InvalidArgument, "%s needs a value", flag);
      return std::string(argv[++i]);
    };
    if (arg == "--program") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--program"));
      options.programs.push_back(UserPath(v));
    } else if (arg == "--data") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--data"));
      options.data_files.push_back(UserPath(v));
    } else if (arg == "--inputs") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--inputs"));
      for (const std::string& input : SplitCommas(v)) options.inputs.push_back(UserPath(input));
    } else if (arg == "--outputs") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--outputs"));
      options.outputs_dir = UserPath(v);
    } else if (arg == "--stats-json") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--stats-json"));
      options.stats_json = UserPath(v);
    } else if (arg == "--no-share") {
      options.share = false;
    } else if (arg == "--threads") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--threads"));
      options.threads = std::atoi(v.c_str());
      ES_CHECK_OR_RETURN_ERROR(options.threads >= 1, Error::InvalidArgument,
                               "--threads must be at least 1");
    } else if (arg == "--iterations") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--iterations"));
      options.iterations = std::atoi(v.c_str());
      ES_CHECK_OR_RETURN_ERROR(options.iterations >= 1, Error::InvalidArgument,
                               "--iterations must be at least 1");
    } else {
      return Status::Format(Error::InvalidArgument, "unknown argument '%s'\n%s", arg.c_str(),
                            kUsage);
    }
  }
  ES_CHECK_OR_RETURN_ERROR(!options.programs.empty(), Error::InvalidArgument,
                           "at least one --program is needed\n%s", kUsage);
  return options;
}

std::string Basename(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(0, dot);
}

// Seeded inputs: a fixed LCG, so two runs (and two tools) see the same numbers.
void FillSeeded(Tensor& t, uint32_t seed) {
  uint64_t state = 0x9E3779B97F4A7C15ull ^ seed;
  float* data = t.data<float>();
  for (size_t i = 0; i < t.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<float>((state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
  }
}

struct Loaded {
  std::string name;
  std::unique_ptr<MmapDataLoader> loader;
  std::unique_ptr<Program> program;
  std::vector<Method> methods;
};

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

Status WriteStats(const std::string& path) {
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  std::FILE* f = std::fopen(path.c_str(), "w");
  ES_CHECK_OR_RETURN_ERROR(f != nullptr, Error::AccessFailed, "cannot write %s", path.c_str());
  std::fprintf(f, "{\n  \"named_data_fetches\": {");
  bool first = true;
  for (const auto& entry : stats.named_data_fetches) {
    std::fprintf(f, "%s\n    \"%s\": %zu", first ? "" : ",", JsonEscape(entry.first).c_str(),
                 entry.second);
    first = false;
  }
  std::fprintf(f, "%s},\n", first ? "" : "\n  ");
  std::fprintf(f, "  \"bytes_fetched\": %llu,\n", static_cast<unsigned long long>(stats.bytes_fetched));
  std::fprintf(f, "  \"packs\": %llu,\n", static_cast<unsigned long long>(stats.packs));
  std::fprintf(f, "  \"cache_hits\": %llu,\n", static_cast<unsigned long long>(stats.cache_hits));
  std::fprintf(f, "  \"packed_entries\": %zu,\n", stats.num_packed_entries);
  std::fprintf(f, "  \"sharing\": %s,\n", xnnpack::weight_sharing_enabled() ? "true" : "false");
  std::fprintf(f, "  \"data_files_open\": %zu\n}\n", DataFile::open_count());
  const bool ok = std::fclose(f) == 0;
  ES_CHECK_OR_RETURN_ERROR(ok, Error::AccessFailed, "cannot write %s", path.c_str());
  return Status();
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.share);
  ES_RETURN_IF_ERROR(xnnpack::set_num_threads(static_cast<size_t>(options.threads)));

  std::vector<std::shared_ptr<const DataFile>> data_files;
  std::vector<const runtime::NamedDataMap*> maps;
  for (const std::string& path : options.data_files) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    maps.push_back(&file->map());
    data_files.push_back(std::move(file));
  }
  std::unique_ptr<MergedDataMap> external;
  if (!maps.empty()) {
    ES_ASSIGN_OR_RETURN(MergedDataMap merged, MergedDataMap::create(maps));
    external = std::make_unique<MergedDataMap>(std::move(merged));
  }

  std::vector<NpyArray> inputs;
  for (const std::string& path : options.inputs) {
    ES_ASSIGN_OR_RETURN(NpyArray array, read_npy(path));
    inputs.push_back(std::move(array));
  }

  // Load everything first: sharing is about programs living side by side in one process.
  std::vector<Loaded> loaded;
  for (const std::string& path : options.programs) {
    Loaded entry;
    entry.name = Basename(path);
    const auto start = std::chrono::steady_clock::now();
    ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from(path.c_str()));
    entry.loader = std::make_unique<MmapDataLoader>(std::move(loader));
    ES_ASSIGN_OR_RETURN(Program program, Program::load(entry.loader.get()));
    entry.program = std::make_unique<Program>(std::move(program));
    for (size_t m = 0; m < entry.program->num_methods(); ++m) {
      ES_ASSIGN_OR_RETURN(const char* method_name, entry.program->get_method_name(m));
      ES_ASSIGN_OR_RETURN(Method method, entry.program->load_method(method_name, external.get()));
      entry.methods.push_back(std::move(method));
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("loaded %s: %zu method(s) in %.2f ms\n", path.c_str(), entry.methods.size(), ms);
    loaded.push_back(std::move(entry));
  }

  for (Loaded& entry : loaded) {
    for (Method& method : entry.methods) {
      for (size_t i = 0; i < method.num_inputs(); ++i) {
        ES_ASSIGN_OR_RETURN(Tensor slot, method.input(i));
        if (i < inputs.size()) {
          ES_RETURN_IF_ERROR(method.set_input(i, inputs[i].tensor()));
        } else {
          ES_CHECK_OR_RETURN_ERROR(slot.scalar_type() == runtime::ScalarType::Float,
                                   Error::NotSupported,
                                   "input %zu of %s.%s is not float; give it with --inputs", i,
                                   entry.name.c_str(), method.name());
          FillSeeded(slot, static_cast<uint32_t>(i));
        }
      }
      double best_ms = 0;
      for (int it = 0; it < options.iterations; ++it) {
        const auto start = std::chrono::steady_clock::now();
        ES_RETURN_IF_ERROR(method.execute());
        const double ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - start)
                              .count();
        if (it == 0 || ms < best_ms) best_ms = ms;
      }
      std::printf("%s.%s: %.3f ms\n", entry.name.c_str(), method.name(), best_ms);
      for (size_t o = 0; o < method.num_outputs(); ++o) {
        ES_ASSIGN_OR_RETURN(Tensor out, method.output(o));
        std::string shape;
        for (size_t d = 0; d < out.dim(); ++d) {
          shape += (d ? "x" : "") + std::to_string(out.size(d));
        }
        double sum = 0;
        if (out.scalar_type() == runtime::ScalarType::Float) {
          for (size_t k = 0; k < out.numel(); ++k) sum += out.data<float>()[k];
        }
        std::printf("  output %zu: %s [%s] sum=%.6g\n", o, runtime::to_string(out.scalar_type()),
                    shape.c_str(), sum);
        if (!options.outputs_dir.empty()) {
          ::mkdir(options.outputs_dir.c_str(), 0755);
          const std::string path = options.outputs_dir + "/" + entry.name + "." + method.name() +
                                   ".output" + std::to_string(o) + ".npy";
          ES_RETURN_IF_ERROR(write_npy(path, out));
        }
      }
    }
  }

  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  std::printf("weights cache: %zu packed entries, %llu packs, %llu hits, %llu bytes fetched\n",
              stats.num_packed_entries, static_cast<unsigned long long>(stats.packs),
              static_cast<unsigned long long>(stats.cache_hits),
              static_cast<unsigned long long>(stats.bytes_fetched));
  if (!options.stats_json.empty()) ES_RETURN_IF_ERROR(WriteStats(options.stats_json));
  return Status();
}

void LogToStderr(runtime::LogLevel level, const char* message) {
  if (level >= runtime::LogLevel::Warning) std::fprintf(stderr, "%s\n", message);
}

}  // namespace
}  // namespace tools
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  runtime::set_log_sink(tools::LogToStderr);
  runtime::Result<tools::Options> options = tools::ParseArgs(argc, argv);
  runtime::Status status = options.ok() ? tools::Run(*options) : options.status();
  if (!status.ok()) {
    // One line: the message, with newlines (usage text) kept only for argument errors.
    std::fprintf(stderr, "run: error: %s\n", status.message());
    return 1;
  }
  return 0;
}
