// ProgramSet: programs loaded side by side in one process over shared data files, as the tools
// (//tools:run, //bench:lora_runner) load them; plus seeded inputs, timing and the weights cache's
// counters as JSON. Every method is loaded against a CountingDataMap over the data files, so
// data_map_fetches() counts each key's fetches where the bytes leave the files. Tool code, not
// runtime: it allocates freely and links nlohmann/json.
//
//   ES_ASSIGN_OR_RETURN(ProgramSet set, ProgramSet::open({"foundation.ptd"}, /*threads=*/2));
//   ES_RETURN_IF_ERROR(set.add("lora_a.pte"));            // Program::load + every load_method
//   Method& forward = set.programs().front().methods.front();
//   ES_RETURN_IF_ERROR(seed_inputs(forward, {}, "lora_a"));
//   ES_ASSIGN_OR_RETURN(std::vector<double> ms, time_method(forward, /*warmup=*/2,
//   /*iterations=*/10)); nlohmann::json stats =
//   weights_cache_json(xnnpack::process_weights_cache_stats());
//
// Ownership: the set owns its data files, their merged map, its Threads and every program; methods
// borrow the program, its loader, the merged map and the Threads, and the set destroys them first.
// Moving the set keeps every borrowed pointer valid. Thread-safety: none; one thread uses a set.
// Errors: InvalidArgument / MemoryAllocationFailed from Threads::create; whatever DataFile::open,
// MergedDataMap::create, MmapDataLoader::from, Program::load and load_method return, each naming
// the file; NotSupported for an input that cannot be seeded.

#ifndef EDGESHARE_TOOLS_PROGRAM_SET_H_
#define EDGESHARE_TOOLS_PROGRAM_SET_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"
#include "edgeshare/tools/counting_data_map.h"
#include "edgeshare/tools/npy.h"

namespace edgeshare {
namespace tools {

// One loaded program. Members are destroyed bottom-up: the methods before what they borrow.
struct LoadedProgram {
  std::string path;
  std::string name;    // The file name without its extension ("lora_a" for dir/lora_a.pte).
  double load_ms = 0;  // MmapDataLoader::from + Program::load + every load_method.
  std::unique_ptr<runtime::MmapDataLoader> loader;
  std::unique_ptr<runtime::Program> program;
  std::vector<runtime::Method> methods;              // In the program's order.
  const runtime::DataFile* bound_adapter = nullptr;  // The adapter bound last by bind_adapter.
};

class ProgramSet {
 public:
  // Opens every data file (DataFile::open) and merges them into the map programs load against;
  // makes the Threads (runtime/core/threads.h) of `threads` threads that every method of the set
  // is loaded and executed with.
  static runtime::Result<ProgramSet> open(const std::vector<std::string>& data_files,
                                          size_t threads = 1);

  // Loads the program at path and every method of it, after the programs already loaded; with
  // `only_method`, that method alone (a tool that runs one method keeps the others' operators,
  // packed weights and arenas out of memory). InvalidArgument (check_foundation) when it, or an
  // adapter file of the set, was exported for another foundation than the set's data files hold;
  // InvalidArgument naming the program's methods when it has no `only_method`.
  runtime::Status add(const std::string& path, const std::string& only_method = "");

  std::vector<LoadedProgram>& programs() { return programs_; }

  // An adapter swap (a .ptd of an `export_lora --swappable` program): binds `adapter` to every
  // method of programs()[index] that reads swappable weights (Method::rebind_data), in place of the
  // adapter it reads now (the one bound last, else the data file it was loaded over that holds the
  // adapter's keys), which must hold the same keys (tools/adapter_swap.h). The methods read `map`
  // (adapter.map() or a wrapper of it): both must outlive them. Returns false when no method of the
  // program reads swappable weights. Errors: InvalidArgument naming the file (another structure,
  // a foundation's file, an adapter exported for another foundation: check_adapter_foundation) and
  // rebind_data's errors; on error the methods keep their adapter.
  runtime::Result<bool> bind_adapter(size_t index, const runtime::DataFile& adapter,
                                     const runtime::NamedDataMap& map);
  // Key -> how many times its bytes were fetched from the data files (get_data or load_data_into,
  // by delegates and by the executor alike), over every program loaded so far.
  std::map<std::string, size_t> data_map_fetches() const;
  // How long open() took (opening and merging the data files).
  double data_open_ms() const { return data_open_ms_; }
  // Destroys every program, then the merged map and the data files.
  void clear();

 private:
  ProgramSet() = default;

  // Destroyed bottom-up: the programs before the map, the files and the Threads they borrow.
  std::unique_ptr<runtime::Threads> threads_;
  std::vector<std::shared_ptr<const runtime::DataFile>> data_files_;
  std::unique_ptr<runtime::MergedDataMap> external_;  // Null without data files.
  std::unique_ptr<CountingDataMap> counted_;          // Wraps external_: what load_method is given.
  std::vector<LoadedProgram> programs_;
  double data_open_ms_ = 0;
};

double milliseconds_since(std::chrono::steady_clock::time_point start);

// Fills a float tensor with values in [-1, 1) from a fixed LCG: every tool sees the same numbers.
void fill_seeded(runtime::Tensor& t, uint32_t seed);

// Sets input i of method to given[i] where given has one, else fills its slot with
// fill_seeded(slot, i). NotSupported names program_name.method when such a slot is not float.
runtime::Status seed_inputs(runtime::Method& method, std::vector<NpyArray>& given,
                            const std::string& program_name);

// Runs method `warmup` times untimed, then `iterations` times; returns each timed run's ms.
runtime::Result<std::vector<double>> time_method(runtime::Method& method, int warmup,
                                                 int iterations);

// {"packs", "cache_hits", "bytes_fetched", "packed_entries"} of the process-wide weights cache.
nlohmann::json weights_cache_json(const xnnpack::WeightsCacheStats& stats);

// {"fetches", "shared_hits", "verifications", "bytes_verified", "verification_failures",
// "verifications_remembered", "live_entries"} of the executor's external constants (constants
// outside any delegate).
nlohmann::json external_constants_json(const runtime::ExternalConstantStats& stats);

// The name a program is reported by: its file name without the extension ("lora_a" for
// dir/lora_a.pte).
std::string program_name(const std::string& path);

// InvalidArgument when two of `paths` have one program_name(): what `flag` writes is keyed by that
// name, and one program's entry would overwrite the other's.
runtime::Status check_unique_program_names(const std::vector<std::string>& paths,
                                           const char* flag);

// Under `bazel run` a tool starts in its runfiles; a relative path means the user's directory.
std::string user_path(const std::string& path);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_PROGRAM_SET_H_
