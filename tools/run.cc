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

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgeshare/backends/xnnpack/runtime/threadpool.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/log.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/npy.h"
#include "edgeshare/tools/program_set.h"

namespace edgeshare {
namespace tools {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::Method;
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
      options.programs.push_back(user_path(v));
    } else if (arg == "--data") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--data"));
      options.data_files.push_back(user_path(v));
    } else if (arg == "--inputs") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--inputs"));
      for (const std::string& input : SplitCommas(v)) options.inputs.push_back(user_path(input));
    } else if (arg == "--outputs") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--outputs"));
      options.outputs_dir = user_path(v);
    } else if (arg == "--stats-json") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--stats-json"));
      options.stats_json = user_path(v);
    } else if (arg == "--no-share") {
      options.share = false;
    } else if (arg == "--threads") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--threads"));
      ES_ASSIGN_OR_RETURN(options.threads, parse_count("--threads", v, 1));
    } else if (arg == "--iterations") {
      ES_ASSIGN_OR_RETURN(std::string v, value("--iterations"));
      ES_ASSIGN_OR_RETURN(options.iterations, parse_count("--iterations", v, 1));
    } else {
      return Status::Format(Error::InvalidArgument, "unknown argument '%s'\n%s", arg.c_str(),
                            kUsage);
    }
  }
  ES_CHECK_OR_RETURN_ERROR(!options.programs.empty(), Error::InvalidArgument,
                           "at least one --program is needed\n%s", kUsage);
  return options;
}

Status WriteStats(const std::string& path) {
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  nlohmann::json json = weights_cache_json(stats);
  json["named_data_fetches"] = stats.named_data_fetches;
  json["sharing"] = xnnpack::weight_sharing_enabled();
  json["data_files_open"] = DataFile::open_count();
  const std::string text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  ES_CHECK_OR_RETURN_ERROR(f != nullptr, Error::AccessFailed, "cannot write %s", path.c_str());
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  ES_CHECK_OR_RETURN_ERROR(written && closed, Error::AccessFailed, "cannot write %s", path.c_str());
  return Status();
}

std::string ShapeText(const Tensor& t) {
  std::string shape;
  for (size_t d = 0; d < t.dim(); ++d) shape += (d ? "x" : "") + std::to_string(t.size(d));
  return shape;
}

// Prints each output's dtype, shape and sum; with --outputs writes it as a .npy file too.
Status ReportOutputs(const Options& options, const LoadedProgram& entry, Method& method) {
  for (size_t o = 0; o < method.num_outputs(); ++o) {
    ES_ASSIGN_OR_RETURN(Tensor out, method.output(o));
    double sum = 0;
    if (out.scalar_type() == runtime::ScalarType::Float) {
      for (size_t k = 0; k < out.numel(); ++k) sum += out.data<float>()[k];
    }
    std::printf("  output %zu: %s [%s] sum=%.6g\n", o, runtime::to_string(out.scalar_type()),
                ShapeText(out).c_str(), sum);
    if (!options.outputs_dir.empty()) {
      ::mkdir(options.outputs_dir.c_str(), 0755);
      const std::string path = options.outputs_dir + "/" + entry.name + "." + method.name() +
                               ".output" + std::to_string(o) + ".npy";
      ES_RETURN_IF_ERROR(write_npy(path, out));
    }
  }
  return Status();
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.share);
  ES_RETURN_IF_ERROR(xnnpack::set_num_threads(static_cast<size_t>(options.threads)));
  ES_ASSIGN_OR_RETURN(ProgramSet set, ProgramSet::open(options.data_files));

  std::vector<NpyArray> inputs;
  for (const std::string& path : options.inputs) {
    ES_ASSIGN_OR_RETURN(NpyArray array, read_npy(path));
    inputs.push_back(std::move(array));
  }

  // Load everything first: sharing is about programs living side by side in one process.
  for (const std::string& path : options.programs) {
    ES_RETURN_IF_ERROR(set.add(path));
    const LoadedProgram& entry = set.programs().back();
    std::printf("loaded %s: %zu method(s) in %.2f ms\n", path.c_str(), entry.methods.size(),
                entry.load_ms);
  }

  for (LoadedProgram& entry : set.programs()) {
    for (Method& method : entry.methods) {
      ES_RETURN_IF_ERROR(seed_inputs(method, inputs, entry.name));
      ES_ASSIGN_OR_RETURN(std::vector<double> samples, time_method(method, 0, options.iterations));
      double best_ms = samples.front();
      for (double ms : samples) best_ms = ms < best_ms ? ms : best_ms;
      std::printf("%s.%s: %.3f ms\n", entry.name.c_str(), method.name(), best_ms);
      ES_RETURN_IF_ERROR(ReportOutputs(options, entry, method));
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
