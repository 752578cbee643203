// Backend: the interface a delegate (e.g. XNNPACK) implements, and the process-wide registry that
// Program consults when a method names a backend by id.
//
// Lifecycle per lowered partition: init() once when a method loads (the processed blob, compile
// specs and a NamedDataMap to fetch constants from), num_inputs() once per call while the method
// loads, execute() any number of times, destroy() when the method goes. A backend registers
// itself once, usually from a static initializer:
//
//   static MyBackend backend;
//   static const bool registered = register_backend("MyBackend", &backend).ok();
//
// Thread-safety: register/get may race with each other. A backend's execute() may be called
// concurrently for DIFFERENT handles (two methods on two threads), never for the same handle.
// Ownership: the registry borrows backends, which must outlive every method that uses them.

#ifndef EDGESHARE_RUNTIME_BACKEND_BACKEND_H_
#define EDGESHARE_RUNTIME_BACKEND_BACKEND_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/freeable_buffer.h"
#include "edgeshare/runtime/core/named_data_map.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {

// A key/value option the exporter attached to a lowered partition.
struct CompileSpec {
  const char* key = nullptr;
  Span<const uint8_t> value;
};

// What a backend may use while it initialises one partition.
class BackendInitContext {
 public:
  BackendInitContext(const NamedDataMap* named_data_map, const char* method_name)
      : named_data_map_(named_data_map), method_name_(method_name) {}
  // The program's own named data merged with the data files the method was loaded with; may be
  // null when there is neither. Valid during init() and for as long as the method lives.
  const NamedDataMap* named_data_map() const { return named_data_map_; }
  const char* method_name() const { return method_name_; }

 private:
  const NamedDataMap* named_data_map_;
  const char* method_name_;
};

// A backend's per-partition state; opaque to the runtime.
using DelegateHandle = void;

class BackendInterface {
 public:
  virtual ~BackendInterface() = default;

  // False when the backend cannot run here (e.g. an unsupported CPU).
  virtual bool is_available() const = 0;

  // Prepares one partition. `processed` is the exporter's blob; the backend may free() it early.
  virtual Result<DelegateHandle*> init(const BackendInitContext& context, FreeableBuffer* processed,
                                       Span<const CompileSpec> compile_specs) const = 0;

  // How many leading args of a call to `handle` are the partition's inputs; the backend writes
  // every later one. Answered from what init() built, never from the program, which a hostile file
  // could get wrong: Method::load asks once per call and refuses a call whose outputs are constants
  // or method inputs. Errors: InvalidArgument for a null handle. Called on the loading thread.
  virtual Result<size_t> num_inputs(DelegateHandle* handle) const = 0;

  // Runs the partition: args are its inputs then its outputs, as the exporter numbered them.
  // Must not allocate.
  virtual Status execute(DelegateHandle* handle, Span<EValue* const> args) const = 0;

  // Releases everything init() made for `handle`.
  virtual void destroy(DelegateHandle* handle) const = 0;
};

// Registers `backend` under `name` (copied). Errors: AlreadyExists, InvalidArgument, and
// MemoryAllocationFailed past 16 backends.
Status register_backend(const char* name, const BackendInterface* backend);

// The backend registered under `name`, or null.
const BackendInterface* get_backend(const char* name);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_BACKEND_BACKEND_H_
