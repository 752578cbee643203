// Kernel registry: operator name -> the function that runs it outside any delegate.
//
// A kernel gets its arguments as EValues, in the operator's schema order followed by its outputs,
// exactly as the exporter listed them in a KernelCall. It must not allocate.
//
//   Status add(Span<EValue* const> args) { ... }
//   static const bool registered = register_kernel("aten::add.Tensor", add).ok();
//   KernelFn fn = get_kernel("aten::add.Tensor");   // null when there is none
//
// Names are "namespace::op" or "namespace::op.overload". Thread-safe; kernels must be reentrant.

#ifndef EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_
#define EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_

#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {

using KernelFn = Status (*)(Span<EValue* const> args);

// Errors: AlreadyExists, InvalidArgument, MemoryAllocationFailed past 256 kernels.
Status register_kernel(const char* name, KernelFn fn);

// The kernel registered under `name`, or null.
KernelFn get_kernel(const char* name);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_
