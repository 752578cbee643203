#include "edgeshare/runtime/kernels/kernel_registry.h"

#include "edgeshare/runtime/registry/name_registry.h"

namespace edgeshare {
namespace runtime {
namespace {

using KernelRegistry = NameRegistry<KernelFn, 256, 96>;

KernelRegistry& registry() {
  static KernelRegistry* r = new KernelRegistry("kernel");  // Never destroyed.
  return *r;
}

}  // namespace

Status register_kernel(const char* name, KernelFn fn) { return registry().add(name, fn); }

KernelFn get_kernel(const char* name) { return registry().find(name); }

}  // namespace runtime
}  // namespace edgeshare
