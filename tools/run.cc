// run: loads every given program in one process over the given data files, runs each method once,
// and reports outputs, latency and what the XNNPACK weights cache fetched and packed.
//
//   bazel run //tools:run -- --program lora_a.pte --program lora_b.pte --data foundation.ptd
//       [--inputs x.npy[,y.npy]] [--outputs DIR] [--stats-json FILE] [--no-share] [--iterations N]
//       [--threads N] [--no-verify] [--method NAME]... [--swap-adapter X.ptd]...
//
// Without --inputs every input is filled with seeded values in [-1, 1). --method (repeatable)
// runs only the methods of that name, in every program that has one; every method is still
// loaded, so sharing is measured as without it. --outputs writes
// DIR/<program>.<method>.output<i>.npy. --stats-json writes the weights cache's counters, the
// fetches of every data-file key counted at the data map ("data_map_fetches") and the executor's
// external constant counters. --no-verify trusts the data files (no hashing of fetched bytes).
// --swap-adapter (repeatable; programs exported with export_lora --swappable, loaded over
// foundation.ptd and one adapter's .ptd): after the first runs, each listed adapter is bound in
// turn to every loaded program that reads swappable weights (Method::rebind_data: no foundation
// weight is fetched or packed) and every selected method runs again; --outputs then also writes
// DIR/<program>@<adapter>.<method>.output<i>.npy. Adapter fetches are counted in
// "data_map_fetches" too.
// A malformed file gives a one-line error and exit status 1.

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/tools/counting_data_map.h"
#include "edgeshare/tools/npy.h"
#include "edgeshare/tools/program_set.h"
#include "edgeshare/tools/program_set_flags.h"

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
  ProgramSetFlags set;  // --program, --data, --no-share, --no-verify, --threads.
  std::vector<std::string> inputs;
  std::string outputs_dir;
  std::string stats_json;
  int iterations = 1;
  std::vector<std::string> methods;        // --method, repeated; empty runs every method.
  std::vector<std::string> swap_adapters;  // --swap-adapter, repeated, in order.
};

// The adapter files bound by --swap-adapter, each behind a counting map. Declared before the
// ProgramSet in Run, so that it outlives the methods that read it.
struct SwappedAdapters {
  std::vector<std::shared_ptr<const DataFile>> files;
  std::vector<std::unique_ptr<CountingDataMap>> counted;
};

void DeclareFlags(CLI::App& app, Options& options) {
  add_program_set_flags(app, options.set);
  app.add_option("--inputs", options.inputs, "X.npy[,Y.npy]: the inputs of every method")
      ->delimiter(',')
      ->allow_extra_args(false);
  app.add_option("--outputs", options.outputs_dir, "write DIR/<program>.<method>.output<i>.npy");
  app.add_option("--stats-json", options.stats_json, "write the weights cache's counters as JSON");
  app.add_option("--iterations", options.iterations, "runs of each method; the fastest is printed")
      ->check(integer_in(1, 1000000));
  app.add_option("--method", options.methods,
                 "run only this method of every program that has it (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--swap-adapter", options.swap_adapters,
                 "X.ptd: after the runs, bind this adapter and run again (repeatable)")
      ->allow_extra_args(false);
}

// Under `bazel run` the tool starts in its runfiles: every path given means the user's directory.
void ResolveUserPaths(Options& options) {
  for (std::vector<std::string>* paths :
       {&options.set.programs, &options.set.data_files, &options.inputs, &options.swap_adapters}) {
    for (std::string& path : *paths) path = user_path(path);
  }
  options.outputs_dir = user_path(options.outputs_dir);
  options.stats_json = user_path(options.stats_json);
}

Status WriteStats(const std::string& path, const ProgramSet& set, const SwappedAdapters& swapped) {
  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  nlohmann::json json = weights_cache_json(stats);
  json["named_data_fetches"] = stats.named_data_fetches;
  // Counted at the data map: every fetch of a data-file key, the executor's own included.
  std::map<std::string, size_t> fetches = set.data_map_fetches();
  for (const std::unique_ptr<CountingDataMap>& map : swapped.counted) {
    for (const auto& [key, count] : map->fetches()) fetches[key] += count;
  }
  json["data_map_fetches"] = fetches;
  json["external_constants"] = external_constants_json(runtime::external_constant_stats());
  json["verify"] = xnnpack::verify_content_enabled();
  json["sharing"] = xnnpack::weight_sharing_enabled();
  json["data_files_open"] = DataFile::open_count();
  const std::string text =
      json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
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
Status ReportOutputs(const Options& options, const std::string& label, Method& method) {
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
      const std::string path = options.outputs_dir + "/" + label + "." + method.name() + ".output" +
                               std::to_string(o) + ".npy";
      ES_RETURN_IF_ERROR(write_npy(path, out));
    }
  }
  return Status();
}

bool Selected(const Options& options, const Method& method) {
  if (options.methods.empty()) return true;
  for (const std::string& name : options.methods) {
    if (name == method.name()) return true;
  }
  return false;
}

// Every --method name must be a method of some program: a typo would otherwise run nothing.
Status CheckMethodsExist(const Options& options, ProgramSet& set) {
  for (const std::string& name : options.methods) {
    std::string available;
    bool found = false;
    for (LoadedProgram& entry : set.programs()) {
      for (const Method& method : entry.methods) {
        found = found || name == method.name();
        available += (available.empty() ? "" : ", ") + entry.name + "." + method.name();
      }
    }
    ES_CHECK_OR_RETURN_ERROR(found, Error::InvalidArgument,
                             "--method '%s': no program has a method of that name (methods: %s)",
                             name.c_str(), available.c_str());
  }
  return Status();
}

// Token ids and a start position given with --inputs, checked against a token method's
// vocabulary and KV cache (a clear message rather than a kernel's index error).
Status CheckTokenInputs(const Method& method, std::vector<NpyArray>& inputs,
                        const std::string& program_name) {
  const Result<generation::TokenBounds> bounds = generation::token_bounds(method);
  if (!bounds.ok() || inputs.empty()) return Status();
  std::vector<Tensor> tensors;
  for (NpyArray& array : inputs) tensors.push_back(array.tensor());
  const Status status = generation::check_token_inputs(
      *bounds, runtime::Span<const Tensor>(tensors.data(), tensors.size()), method.name());
  if (!status.ok()) return status.WithContext("%s", program_name.c_str());
  return Status();
}

Status RunMethods(const Options& options, ProgramSet& set, std::vector<NpyArray>& inputs,
                  const std::string& suffix) {
  for (LoadedProgram& entry : set.programs()) {
    for (Method& method : entry.methods) {
      if (!Selected(options, method)) continue;
      ES_RETURN_IF_ERROR(CheckTokenInputs(method, inputs, entry.name));
      ES_RETURN_IF_ERROR(seed_inputs(method, inputs, entry.name));
      ES_ASSIGN_OR_RETURN(std::vector<double> samples, time_method(method, 0, options.iterations));
      double best_ms = samples.front();
      for (double ms : samples) best_ms = ms < best_ms ? ms : best_ms;
      std::printf("%s%s.%s: %.3f ms\n", entry.name.c_str(), suffix.c_str(), method.name(), best_ms);
      ES_RETURN_IF_ERROR(ReportOutputs(options, entry.name + suffix, method));
    }
  }
  return Status();
}

// --swap-adapter: each adapter bound in turn to every program that takes it, then every method
// runs again.
Status SwapAndRun(const Options& options, ProgramSet& set, std::vector<NpyArray>& inputs,
                  SwappedAdapters& swapped) {
  for (const std::string& path : options.swap_adapters) {
    ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> file, DataFile::open(path.c_str()));
    swapped.files.push_back(file);
    swapped.counted.push_back(std::make_unique<CountingDataMap>(file->map()));
    bool any = false;
    for (size_t p = 0; p < set.programs().size(); ++p) {
      const auto start = std::chrono::steady_clock::now();
      ES_ASSIGN_OR_RETURN(bool taken, set.bind_adapter(p, *file, *swapped.counted.back()));
      if (taken) {
        std::printf("bound %s to %s in %.3f ms\n", path.c_str(), set.programs()[p].name.c_str(),
                    milliseconds_since(start));
      }
      any = any || taken;
    }
    ES_CHECK_OR_RETURN_ERROR(any, Error::InvalidArgument,
                             "--swap-adapter %s: no program loaded reads swappable weights "
                             "(export with export_lora --swappable)",
                             path.c_str());
    std::string stem = path.substr(path.find_last_of('/') + 1);
    stem = stem.substr(0, stem.find_last_of('.'));
    ES_RETURN_IF_ERROR(RunMethods(options, set, inputs, "@" + stem));
  }
  return Status();
}

Status Run(const Options& options) {
  xnnpack::set_weight_sharing(options.set.share);
  xnnpack::set_verify_content(options.set.verify);
  if (!options.outputs_dir.empty()) {
    ES_RETURN_IF_ERROR(check_unique_program_names(options.set.programs, "--outputs"));
  }
  SwappedAdapters swapped;  // Outlives `set`: its methods may read these files.
  ES_ASSIGN_OR_RETURN(ProgramSet set, ProgramSet::open(options.set.data_files,
                                                       static_cast<size_t>(options.set.threads)));

  std::vector<NpyArray> inputs;
  for (const std::string& path : options.inputs) {
    ES_ASSIGN_OR_RETURN(NpyArray array, read_npy(path));
    inputs.push_back(std::move(array));
  }

  // Load everything first: sharing is about programs living side by side in one process.
  for (const std::string& path : options.set.programs) {
    ES_RETURN_IF_ERROR(set.add(path));
    const LoadedProgram& entry = set.programs().back();
    std::printf("loaded %s: %zu method(s) in %.2f ms\n", path.c_str(), entry.methods.size(),
                entry.load_ms);
  }

  ES_RETURN_IF_ERROR(CheckMethodsExist(options, set));

  ES_RETURN_IF_ERROR(RunMethods(options, set, inputs, ""));
  ES_RETURN_IF_ERROR(SwapAndRun(options, set, inputs, swapped));

  const xnnpack::WeightsCacheStats stats = xnnpack::process_weights_cache_stats();
  std::printf("weights cache: %zu packed entries, %llu packs, %llu hits, %llu bytes fetched\n",
              stats.num_packed_entries, static_cast<unsigned long long>(stats.packs),
              static_cast<unsigned long long>(stats.cache_hits),
              static_cast<unsigned long long>(stats.bytes_fetched));
  if (!options.stats_json.empty()) ES_RETURN_IF_ERROR(WriteStats(options.stats_json, set, swapped));
  return Status();
}

}  // namespace
}  // namespace tools
}  // namespace edgeshare

int main(int argc, char** argv) {
  using namespace edgeshare;
  CLI::App app{"Loads every program over the data files, runs each method once, reports sharing.",
               "run"};
  tools::Options options;
  tools::DeclareFlags(app, options);
  return tools::run_tool(app, argc, argv, [&] {
    tools::ResolveUserPaths(options);
    return tools::Run(options);
  });
}
