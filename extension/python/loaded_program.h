// LoadedProgram: a .pte loaded over its data files with every method, as one shareable object for
// a language binding (the Python extension holds it by shared_ptr); LoadedMethod: one of its
// methods, run on caller tensors with the outputs copied out.
//
// This is the binding's runtime half, kept free of pybind11 so that it builds with the runtime's
// flags: it returns Result/Status, the pybind11 half only converts arrays and raises.
//
//   ES_ASSIGN_OR_RETURN(std::shared_ptr<const DataFile> foundation, DataFile::open("f.ptd"));
//   ES_ASSIGN_OR_RETURN(std::shared_ptr<LoadedProgram> program,
//                       LoadedProgram::load("lora_a.pte", {foundation}));
//   ES_ASSIGN_OR_RETURN(LoadedMethod * forward, program->method("forward"));
//   ES_ASSIGN_OR_RETURN(std::vector<OwnedTensor> outputs, forward->run({x}));
//   ES_ASSIGN_OR_RETURN(LoadedMethod * cached, program->method("forward_cached"));
//   ES_ASSIGN_OR_RETURN(generation::Generation out, cached->generate(prompt, 32));
//
// Adapter swap (a lora.pte exported with --swappable, loaded over foundation.ptd + one adapter's
// .ptd): bind_adapter(DataFile::open("code.ptd")) rebinds every method to that adapter's bytes
// (Method::rebind_data: nothing of the foundation is fetched or packed, the state is reset).
//
// Errors: load() passes on DataFile, MergedDataMap, MmapDataLoader, Program::load and load_method
// errors (each naming the file or method), and InvalidArgument when the program or an adapter file
// was exported for another foundation than the one given (tools::check_foundation); method() gives NotFound naming the program and listing
// its methods; run() gives InvalidArgument for a wrong input count (naming method and program) and
// passes on set_input's and execute's errors. bind_adapter() gives InvalidArgument when the file
// holds other keys than the adapter it replaces (another structure) or was exported for another
// foundation, and passes on rebind_data's
// errors (a foundation file: its keys are pinned; shapes that differ); on error every method keeps
// its previous adapter.
// passes on set_input's and execute's errors; generate() gives InvalidArgument for a method without
// the generation signature or state (naming it and the program) and passes on Generator's errors.
// Thread-safety: load() and the accessors may be called from any thread. run() may be called from
// several threads: calls on one method are serialised by its mutex (a runtime Method runs on one
// thread at a time), calls on different methods run in parallel. bind_adapter() calls are
// serialised; each method is rebound between two of its runs (a run on another method meanwhile
// may still see the previous adapter).
// Ownership: a LoadedProgram owns its data file references, their merged map, its loader, its
// Program and its methods, and destroys the methods first. A LoadedMethod lives as long as its
// LoadedProgram: holders keep the program's shared_ptr. run()'s outputs own their bytes.

#ifndef EDGESHARE_EXTENSION_PYTHON_LOADED_PROGRAM_H_
#define EDGESHARE_EXTENSION_PYTHON_LOADED_PROGRAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/core/scalar_type.h"
#include "edgeshare/runtime/core/span.h"
#include "edgeshare/runtime/core/tensor.h"
#include "edgeshare/runtime/data_loader/mmap_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace python {

// An input or output as the program planned it: its dtype and its sizes (for a dim exported
// dynamic, its upper bound). is_tensor is false for a non-tensor value (e.g. an int).
struct TensorSpec {
  bool is_tensor = false;
  runtime::ScalarType type = runtime::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<int64_t> dynamic_dims;  // dims exported dynamic: each takes 1..sizes[d]
};

// A tensor that owns its bytes: an output copied out of a method's planned memory, which the next
// run overwrites.
struct OwnedTensor {
  runtime::ScalarType type = runtime::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::unique_ptr<uint8_t[]> data;
  size_t nbytes = 0;
};

class LoadedMethod {
 public:
  explicit LoadedMethod(runtime::Method method, std::string program_name);

  const char* name() const { return method_.name(); }
  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }

  // Copies `inputs` into the method's inputs (set_input: a dynamic dim takes any size within its
  // bound), executes, and copies every output out at its real shape. A token method's ids must be
  // within its vocabulary and a start position within its KV cache
  // (generation::check_token_inputs).
  runtime::Result<std::vector<OwnedTensor>> run(const std::vector<runtime::Tensor>& inputs);

  // Method::rebind_data between two runs. `data` must outlive the method or its next rebind.
  runtime::Status rebind(const runtime::NamedDataMap& data);
  // The remembered Method::rebind_data: the method holds `data`; binding it again switches pointers.
  runtime::Status rebind(std::shared_ptr<const runtime::NamedDataMap> data);
  // Greedy generation with this stateful method (generation::Generator): resets its KV cache,
  // prefills `prompt`, returns up to max_new_tokens new tokens (stopping after eos if eos >= 0).
  runtime::Result<generation::Generation> generate(runtime::Span<const int64_t> prompt,
                                                   size_t max_new_tokens, int64_t eos = -1);
  // The same with sampling and stop ids (generation::GenerateOptions).
  runtime::Result<generation::Generation> generate(runtime::Span<const int64_t> prompt,
                                                   const generation::GenerateOptions& options);
  // Stepwise generation for a binding's iterator: start() prefills and returns a ticket; each
  // next(ticket) returns one new token, or -1 once done. Any other run, generate, start or rebind
  // of this method in between ends the stream: next() then gives InvalidState.
  runtime::Result<uint64_t> start(runtime::Span<const int64_t> prompt,
                                  const generation::GenerateOptions& options);
  runtime::Result<int64_t> next(uint64_t ticket);
  // The running stream's timings, finish reason and prefilled tokens (generation::Generator's).
  generation::Generation timings();
  // The leading tokens of the last generation's sequence the KV cache holds
  // (generation::Generator::cached_length; 0 after any other run or a rebind).
  size_t cached_length();

 private:
  std::mutex mutex_;  // One run at a time: the Method's planned memory is reused by each.
  uint64_t epoch_ = 0;  // Counts uses of the method's state (under mutex_): a stream's ticket.
  runtime::Method method_;
  std::string program_name_;
  // Made at construction, while the inputs still have their planned sizes (the bounds the
  // Generator reads); or why the method cannot generate.
  std::optional<generation::Generator> generator_;
  runtime::Status generator_error_;
  // A token method's vocabulary and KV cache length, which run() checks its inputs against.
  std::optional<generation::TokenBounds> token_bounds_;
  std::vector<TensorSpec> inputs_;   // As planned, read before any set_input resized them.
  std::vector<TensorSpec> outputs_;  // Likewise.
};

class LoadedProgram {
 public:
  // Maps the .pte at `path` and loads every method against the merged `data_files`; with
  // `only_methods`, those methods alone (InvalidArgument listing the program's methods for a name
  // it does not have), so that methods a caller never runs hold no memory. The program owns a
  // Threads of `threads` threads (runtime/core/threads.h) its methods load and run on; errors as
  // Threads::create for a bad count.
  static runtime::Result<std::shared_ptr<LoadedProgram>> load(
      const std::string& path, std::vector<std::shared_ptr<const runtime::DataFile>> data_files,
      const std::vector<std::string>& only_methods = {}, size_t threads = 1);

  const std::string& path() const { return path_; }
  const std::vector<std::shared_ptr<const runtime::DataFile>>& data_files() const {
    return data_files_;
  }
  size_t num_methods() const { return methods_.size(); }
  LoadedMethod& method(size_t index) { return *methods_[index]; }
  // Errors: NotFound naming the program and listing its methods.
  runtime::Result<LoadedMethod*> method(const std::string& name);

  // Binds another adapter .ptd of the same structure to every method that holds open (swappable)
  // constants; all methods or none. The program keeps `adapter` open while it is bound.
  runtime::Status bind_adapter(std::shared_ptr<const runtime::DataFile> adapter);
  // The adapter bound last by bind_adapter (null before the first).
  std::shared_ptr<const runtime::DataFile> adapter() const;

  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;

 private:
  LoadedProgram() = default;

  // Destroyed bottom-up: the methods before the program, loader, map, files and threads they
  // borrow.
  std::string path_;
  std::unique_ptr<runtime::Threads> threads_;
  std::vector<std::shared_ptr<const runtime::DataFile>> data_files_;
  mutable std::mutex adapter_mutex_;                  // Serialises bind_adapter.
  std::shared_ptr<const runtime::DataFile> adapter_;  // What the methods read, once swapped.
  std::unique_ptr<runtime::MergedDataMap> external_;  // Null without data files.
  std::unique_ptr<runtime::MmapDataLoader> loader_;
  std::unique_ptr<runtime::Program> program_;
  std::vector<std::unique_ptr<LoadedMethod>> methods_;  // In the program's order.
};

}  // namespace python
}  // namespace edgeshare

#endif  // EDGESHARE_EXTENSION_PYTHON_LOADED_PROGRAM_H_
