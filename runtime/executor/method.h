// Method: one loaded method of a Program, ready to run: memory-planned values, constants, kernel
// calls and delegate calls.
//
// Everything is allocated, resolved and initialised at load (Program::load_method, which calls
// Method::load); execute() only runs the instructions (kernels and delegates must not allocate
// either). The load and every execute run under the Threads given to load_method (null: the
// caller's current one, runtime/core/threads.h). Inputs live in the method's planned memory: copy
// into them with set_input(), or write in place through input(i).
//
//   ES_ASSIGN_OR_RETURN(Method method, program.load_method("forward", &foundation->map()));
//   ES_RETURN_IF_ERROR(method.set_input(0, Tensor(ScalarType::Float, {4, 256}, data)));
//   ES_RETURN_IF_ERROR(method.execute());
//   ES_ASSIGN_OR_RETURN(Tensor out, method.output(0));   // valid until the next execute()
//
// Errors: load as listed at Method::load; set_input gives InvalidArgument for a wrong dtype or
// shape; execute passes on a kernel's or delegate's error with the instruction named.
// Thread-safety: one thread at a time per Method; two Methods (of one Program or two) may run on
// two threads at once. Move-only; destroying it releases its delegates and memory.
// Ownership: owns its planned memory, constants (views or copies; views of external constants are
// held in the process's external constant table, shared with other Methods) and delegates; shares
// its Program's verified flatbuffer and own named data (names, int lists and strings point into
// them), so it may outlive the Program; borrows the Program's loader and the external NamedDataMap
// it was loaded with, which must outlive it.

#ifndef EDGESHARE_RUNTIME_EXECUTOR_METHOD_H_
#define EDGESHARE_RUNTIME_EXECUTOR_METHOD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeshare/runtime/backend/backend.h"
#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/core/zeroed_memory.h"
#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/executor/key_recording_data_map.h"
#include "edgeshare/runtime/kernels/kernel_registry.h"

namespace edgeshare {
namespace schema {
struct ExecutionPlan;
}  // namespace schema

namespace runtime {

class ProgramImage;

class Method {
 public:
  // Loads `plan`, one method of `program`, in steps: the merged NamedDataMap, planned memory,
  // values (with their constants: inline segments, or zero-copy views of `external_data`),
  // delegates and instructions. Program::load_method is the entry point for embedders (it finds
  // the plan); ProgramImage is internal to the executor. Keeps `program` alive; borrows its
  // loader and `external_data` as Program::load_method documents.
  // Errors: InvalidArgument for a null program. Otherwise, each with a message that starts
  // "failed to load method '<name>' from <file>": InvalidProgram naming the value, segment,
  // buffer or instruction (among them a call that writes a constant, a method input or a
  // non-tensor: which args a call writes comes from the kernel registry or the initialised
  // backend, never from the file); NotFound for an external constant missing from
  // `external_data` or a backend not linked in; NotSupported for an operator without a kernel
  // or an unavailable backend; InvalidData when an external constant's dtype, shape or size
  // differs, when its digest in `external_data` is not the one the program recorded (another
  // data file of the same shapes), or when its bytes do not hash to that digest (content policy,
  // external_constants.h, naming the key and the data file); Internal if hashing fails;
  // AlreadyExists for a key in both the program's named data and `external_data`;
  // MemoryAllocationFailed; loader and backend errors.
  // `threads` (may be null) is what the load and every execute split their work across, as
  // Program::load_method documents.
  static Result<Method> load(std::shared_ptr<const ProgramImage> program,
                             const schema::ExecutionPlan& plan, const NamedDataMap* external_data,
                             const Threads* threads = nullptr);

  Method(Method&&) noexcept = default;
  Method& operator=(Method&&) = delete;
  Method(const Method&) = delete;
  ~Method();

  const char* name() const { return name_.c_str(); }
  // The Threads its executes run on (null: the caller's current Threads at each execute).
  const Threads* threads() const { return threads_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }

  // A view of input i's planned memory, to fill in place. Errors: OutOfRange, InvalidArgument for
  // a non-tensor input.
  Result<Tensor> input(size_t index) const;
  // Copies `value` into input i and gives the input its sizes. A dim the program was exported
  // dynamic (e.g. the token count) takes any size from 1 to its bound; every other dim must match.
  // Errors: OutOfRange; InvalidArgument for another dtype or rank, a static dim that differs, or
  // a dynamic one outside [1, bound] (the message names the dim and the bound).
  Status set_input(size_t index, const Tensor& value);
  // Output i after execute(). Errors: OutOfRange, InvalidArgument for a non-tensor output.
  Result<Tensor> output(size_t index) const;
  // Which dims of input / output i the program exported dynamic: bit d set means dim d takes any
  // size from 1 to its planned size (0 for a non-tensor). Errors: OutOfRange.
  Result<uint8_t> input_dynamic_dims(size_t index) const;
  Result<uint8_t> output_dynamic_dims(size_t index) const;

  Status execute();

  // Sets every state tensor (a KV cache the method keeps across executes) back to its initial
  // bytes, as at load. A method without state has nothing to reset.
  void reset_state();

  // Swaps the adapter: re-points every external constant the program left open (recorded without
  // a digest: a swappable adapter export) at data's bytes (`data` holds all of them), after the
  // checks of load (dtype, shape, dim order; bytes verified per the content policy), then resets
  // the state (the KV cache belongs to the old adapter). Foundation constants (pinned by digest)
  // and what delegates packed at load are untouched: nothing is fetched or packed but the new
  // bytes. All or nothing: on error the Method is as before. `data` must outlive the Method or its
  // next rebind_data. Errors: NotFound when `data` holds none of the open constants;
  // InvalidArgument when it lacks some of them (half an adapter), or holds a pinned constant's key
  // or one a delegate read at load; InvalidData (layout, bytes) and the map's errors otherwise,
  // naming key and file.
  Status rebind_data(const NamedDataMap& data);
  // rebind_data that remembers the binding, for adapters swapped back and forth: the Method holds
  // `data` (e.g. a DataFile's map aliased to the file, std::shared_ptr<const NamedDataMap>(file,
  // &file->map())) and its bytes until the Method is destroyed, in one table per map made at the
  // map's first bind (all of rebind_data's checks and content verification happen there). Binding
  // it again switches the open constants' pointers to that table: no lookup, fetch, check or hash;
  // then the state is reset. A table made while content verification was off is made again, checked,
  // when it is on. Errors: InvalidArgument for a null map; rebind_data's, at a map's first bind.
  Status rebind_data(std::shared_ptr<const NamedDataMap> data);
  size_t num_state() const { return state_.size(); }

 private:
  // The load steps (method_loader.cc); a nested class, so it may fill in the fields below.
  class Loader;
  struct Instruction {
    KernelFn kernel = nullptr;  // null for a delegate call
    size_t delegate = 0;
    size_t args_begin = 0;
    size_t args_count = 0;
    size_t num_inputs = 0;  // args from this one on are outputs, checked writable at load
    const char* what = "";  // the operator or backend name, for messages
    // refreshes_[refresh_begin, +refresh_count): the SymIntList items this call reads.
    size_t refresh_begin = 0;
    size_t refresh_count = 0;
  };
  // One item of a SymIntList: copied from its Int value before a call that reads the list, so
  // kernels see a plain int list with the sizes of this execute.
  struct SymIntRefresh {
    int64_t* item = nullptr;
    const EValue* source = nullptr;
  };
  // An input's sizes as planned (for dynamic dims: the bound) and which dims are dynamic.
  struct InputShape {
    int32_t bound[Tensor::kMaxDims] = {};
    uint8_t dynamic_mask = 0;
  };
  struct Delegate {
    const BackendInterface* backend = nullptr;
    DelegateHandle* handle = nullptr;
  };
  // An external constant: its value, key (in the program's flatbuffer), its holder in
  // external_constants_, and whether the program pinned it by digest.
  struct ExternalSlot {
    size_t value = 0;
    const char* key = "";
    size_t holder = 0;
    bool pinned = false;
  };
  // A state tensor: planned bytes that persist across executes, and what they start as.
  struct State {
    void* data = nullptr;
    size_t nbytes = 0;
    const void* initial = nullptr;  // null: zeros
  };
  // A map bound with rebind_data(shared_ptr): the holds on its open constants' bytes and their
  // addresses, in the order of the open slots in external_slots_.
  struct AdapterTable {
    std::shared_ptr<const NamedDataMap> map;
    std::vector<ExternalConstant> holds;
    std::vector<const void*> pointers;
    bool verified = false;  // made with content verification on
  };
  Method() = default;
  // The bytes of every open constant in `data`, after rebind_data's checks (in open-slot order).
  Result<std::vector<ExternalConstant>> acquire_open_constants(const NamedDataMap& data);
  void point_open_constants(const std::vector<const void*>& data);
  const NamedDataMap* delegate_data_map() const { return delegate_map_.get(); }

  // First, so it is released last: everything below may point into it.
  std::shared_ptr<const ProgramImage> program_;
  std::string name_;
  std::vector<ZeroedMemory> buffers_;
  std::vector<FreeableBuffer> constants_;
  std::vector<ExternalConstant> external_constants_;  // views of data-file bytes, maybe shared
  std::vector<ExternalSlot> external_slots_;
  std::vector<AdapterTable> adapter_tables_;  // maps bound with rebind_data(shared_ptr)
  std::unique_ptr<NamedDataMap> data_map_;
  std::unique_ptr<KeyRecordingDataMap> delegate_map_;  // data_map_ as delegates see it
  std::vector<EValue> values_;
  std::vector<EValue*> list_items_;     // ValueList items, reserved in full before use
  std::vector<int64_t> sym_int_items_;  // SymIntList items, reserved in full before use
  std::vector<SymIntRefresh> refreshes_;
  std::vector<uint8_t> dynamic_masks_;  // per value: its dynamic dims (bit d: dim d)
  std::vector<EValue*> args_;
  std::vector<Instruction> instructions_;
  std::vector<Delegate> delegates_;
  const Threads* threads_ = nullptr;  // null: the caller's current Threads
  std::vector<size_t> inputs_;
  std::vector<InputShape> input_shapes_;
  std::vector<size_t> outputs_;
  std::vector<State> state_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_EXECUTOR_METHOD_H_
