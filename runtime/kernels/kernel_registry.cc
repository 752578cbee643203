#include "edgeshare/runtime/kernels/kernel_registry.h"

#include "edgeshare/runtime/registry/name_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

using KernelRegistry = NameRegistry<Kernel, 256, 96>;

KernelRegistry& registry() {
  static KernelRegistry* r = new KernelRegistry("kernel");  // Never destroyed.
  return *r;
}

}  // namespace

Status register_kernel(const char* name, KernelFn fn, size_t num_inputs, KernelOutputs outputs) {
  Kernel kernel;
  kernel.fn = fn;
  kernel.num_inputs = num_inputs;
  kernel.outputs = outputs;
  return registry().add(name, kernel);
}

Kernel get_kernel(const char* name) { return registry().find(name); }

size_t num_kernels() { return registry().size(); }

const char* kernel_name(size_t index) { return registry().name_at(index); }

}  // namespace runtime
}  // namespace edgeshare
