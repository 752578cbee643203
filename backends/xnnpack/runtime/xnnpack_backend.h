// The XNNPACK backend: the BackendInterface the runtime finds under the id "XnnpackBackend".
//
// Linking //backends/xnnpack:xnnpack_backend registers it from a static initializer, so an embedder
// needs no call at all; this header is for code that wants the instance or the id directly (tests,
// tools). Each init() compiles one lowered partition into an XnnExecutor (xnn_executor.h) whose
// fully connected weights come from the process-wide weights cache (weight_sharing.h).
//
//   const runtime::BackendInterface* xnn = runtime::get_backend(edgeshare::xnnpack::kBackendId);
//   runtime::BackendInitContext context(&named_data, "forward");
//   ES_ASSIGN_OR_RETURN(runtime::DelegateHandle* handle, xnn->init(context, &blob, {}));
//   ES_RETURN_IF_ERROR(xnn->execute(handle, args));   // args: inputs then outputs
//   xnn->destroy(handle);
//
// Errors: init() returns the executor's errors prefixed with the method name; execute() returns
// InvalidArgument for bad args and DelegateExecutionFailed. destroy() cannot fail.
// Thread-safety: init/destroy from any thread; execute() concurrently for different handles.
// Ownership: a handle owns its executor until destroy(); the processed blob is freed after init.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNNPACK_BACKEND_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNNPACK_BACKEND_H_

#include "edgeshare/runtime/backend/backend.h"

namespace edgeshare {
namespace xnnpack {

// The id programs name this backend by.
inline constexpr char kBackendId[] = "XnnpackBackend";

// The process's XNNPACK backend instance (the one registered under kBackendId).
const runtime::BackendInterface& xnnpack_backend();

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_XNNPACK_BACKEND_H_
