// TestDelegate: test-only RAII handle on the registered "XnnpackBackend": init from a blob and a
// NamedDataMap, run on host vectors, destroy on scope exit.
//
//   auto delegate = TestDelegate::init(blob, &map);
//   ASSERT_TRUE(delegate.ok()) << delegate.status().message();
//   HostTensor x{{5, 64}, input}, y{{5, 32}, std::vector<float>(160)};
//   ASSERT_TRUE(delegate->run({&x}, {&y}).ok());   // y.dims: the output's sizes after the run
//
// An output's data is its capacity: a dynamic graph's output may be given at its bound and comes
// back with dims resized to the real shape (data keeps its length).
//
// Errors: whatever the backend returns. Not thread-safe per object (one thread per TestDelegate).
// Ownership: owns its handle; the map must outlive it.

#ifndef EDGESHARE_BACKENDS_XNNPACK_RUNTIME_TEST_DELEGATE_H_
#define EDGESHARE_BACKENDS_XNNPACK_RUNTIME_TEST_DELEGATE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "edgeshare/backends/xnnpack/runtime/xnnpack_backend.h"
#include "edgeshare/runtime/backend/backend.h"

namespace edgeshare {
namespace xnnpack {

struct HostTensor {
  std::vector<int32_t> dims;
  std::vector<float> data;
};

class TestDelegate {
 public:
  static runtime::Result<TestDelegate> init(const std::vector<uint8_t>& blob,
                                            const runtime::NamedDataMap* map,
                                            const char* method = "forward") {
    const runtime::BackendInterface* backend = runtime::get_backend(kBackendId);
    if (backend == nullptr) {
      return runtime::Status::Format(runtime::Error::NotFound, "backend '%s' is not registered",
                                     kBackendId);
    }
    runtime::BackendInitContext context(map, method);
    // Borrowed: the backend may free() it, which does nothing for a borrowed buffer.
    runtime::FreeableBuffer processed(blob.data(), blob.size(), nullptr);
    runtime::Result<runtime::DelegateHandle*> handle =
        backend->init(context, &processed, runtime::Span<const runtime::CompileSpec>());
    if (!handle.ok()) return handle.status();
    return TestDelegate(backend, *handle);
  }

  TestDelegate(TestDelegate&& other) noexcept
      : backend_(other.backend_), handle_(std::exchange(other.handle_, nullptr)) {}
  TestDelegate& operator=(TestDelegate&& other) noexcept {
    std::swap(backend_, other.backend_);
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~TestDelegate() {
    if (handle_ != nullptr) backend_->destroy(handle_);
  }

  runtime::Status run(const std::vector<HostTensor*>& inputs,
                      const std::vector<HostTensor*>& outputs) {
    std::vector<runtime::EValue> values;
    for (HostTensor* t : inputs) values.emplace_back(as_tensor(t));
    for (HostTensor* t : outputs) values.emplace_back(as_tensor(t));
    std::vector<runtime::EValue*> args;
    for (runtime::EValue& v : values) args.push_back(&v);
    runtime::Status status =
        backend_->execute(handle_, runtime::Span<runtime::EValue* const>(args.data(), args.size()));
    // A dynamic graph resizes its outputs: the host tensors take the real shapes.
    for (size_t i = 0; i < outputs.size(); ++i) {
      runtime::Span<const int32_t> sizes = values[inputs.size() + i].to_tensor().sizes();
      outputs[i]->dims.assign(sizes.begin(), sizes.end());
    }
    return status;
  }
  // The raw execute, for tests that build their own args.
  runtime::Status execute(runtime::Span<runtime::EValue* const> args) {
    return backend_->execute(handle_, args);
  }

 private:
  TestDelegate(const runtime::BackendInterface* backend, runtime::DelegateHandle* handle)
      : backend_(backend), handle_(handle) {}
  static runtime::Tensor as_tensor(HostTensor* t) {
    return runtime::Tensor(runtime::ScalarType::Float,
                           runtime::Span<const int32_t>(t->dims.data(), t->dims.size()),
                           t->data.data());
  }

  const runtime::BackendInterface* backend_;
  runtime::DelegateHandle* handle_;
};

}  // namespace xnnpack
}  // namespace edgeshare

#endif  // EDGESHARE_BACKENDS_XNNPACK_RUNTIME_TEST_DELEGATE_H_
