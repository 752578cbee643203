#include "edgeshare/backends/xnnpack/runtime/xnnpack_backend.h"

#include <xnnpack.h>

#include <memory>

#include "edgeshare/backends/xnnpack/runtime/packed_memory.h"
#include "edgeshare/backends/xnnpack/runtime/weight_sharing.h"
#include "edgeshare/backends/xnnpack/runtime/xnn_executor.h"
#include "edgeshare/runtime/core/log.h"

namespace edgeshare {
namespace xnnpack {
namespace {

using runtime::BackendInitContext;
using runtime::CompileSpec;
using runtime::DelegateHandle;
using runtime::EValue;
using runtime::FreeableBuffer;
using runtime::Result;
using runtime::Span;
using runtime::Status;

class XnnpackBackend final : public runtime::BackendInterface {
 public:
  bool is_available() const override {
    return initialize_xnnpack() == xnn_status_success;
  }

  Result<DelegateHandle*> init(const BackendInitContext& context, FreeableBuffer* processed,
                               Span<const CompileSpec> compile_specs) const override {
    const char* method = context.method_name() != nullptr ? context.method_name() : "?";
    if (processed == nullptr) {
      return Status::Format(runtime::Error::InvalidArgument,
                            "XNNPACK delegate for method '%s' got no processed blob", method);
    }
    Result<std::unique_ptr<XnnExecutor>> executor = XnnExecutor::create(
        processed->data(), processed->size(), context.named_data_map(), weight_sharing_enabled());
    if (!executor.ok()) {
      return executor.status().WithContext("XNNPACK delegate for method '%s'", method);
    }
    // Nothing points into the blob any more.
    processed->free();
    return static_cast<DelegateHandle*>(executor->release());
  }

  // The graph's external inputs come first in a call, then its outputs (as execute() binds them).
  Result<size_t> num_inputs(DelegateHandle* handle) const override {
    if (handle == nullptr) {
      return Status::Format(runtime::Error::InvalidArgument, "XNNPACK delegate: null handle");
    }
    return static_cast<XnnExecutor*>(handle)->num_inputs();
  }

  Status execute(DelegateHandle* handle, Span<EValue* const> args) const override {
    if (handle == nullptr) {
      return Status::Format(runtime::Error::InvalidArgument, "XNNPACK delegate: null handle");
    }
    return static_cast<XnnExecutor*>(handle)->execute(args);
  }

  void destroy(DelegateHandle* handle) const override {
    // Releases this handle's references on shared packed weights; the last user frees them.
    delete static_cast<XnnExecutor*>(handle);
  }
};

XnnpackBackend& instance() {
  static XnnpackBackend* backend = new XnnpackBackend();
  return *backend;
}

// Registration at load time (the target is alwayslink, so this survives static linking).
[[maybe_unused]] const bool registered = [] {
  Status status = runtime::register_backend(kBackendId, &instance());
  if (!status.ok()) ES_LOG(Error, "%s", status.message());
  return status.ok();
}();

}  // namespace

const runtime::BackendInterface& xnnpack_backend() { return instance(); }

}  // namespace xnnpack
}  // namespace edgeshare
