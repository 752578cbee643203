// Kernel registry: operator name -> the function that runs it outside any delegate, and how many
// of its arguments are inputs.
//
// A kernel gets its arguments as EValues, in the operator's schema order followed by its outputs,
// exactly as the exporter listed them in a KernelCall. It must not allocate. A program does not
// say which arguments a kernel writes, and a hostile one must not be believed, so every kernel
// registers its input count: the operator's schema arguments, fixed per overload (an optional one
// is passed as None, never left out). Every later argument is an output, which Method::load
// requires to be a planned tensor: never a constant, never a method input. A size kernel
// (aten::sym_size.int, sym::mul, ...: the arithmetic of sizes known only at run time) registers
// KernelOutputs::kInts instead: its outputs are Int values, each written by that one call.
//
// Shapes: a kernel computes its outputs' sizes from its inputs and sets them with
// Tensor::resize (within the planned capacity), so one program serves every length up to the
// bound it was exported for; resize's error is the kernel's.
//
//   Status add(Span<EValue* const> args) { ... }   // (self, other, alpha, out)
//   static const bool registered = register_kernel("aten::add.Tensor", add, 3).ok();
//   Kernel k = get_kernel("aten::add.Tensor");      // k.fn is null when there is none
//
// Names are "namespace::op" or "namespace::op.overload". Thread-safe; kernels must be reentrant.

#ifndef EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_
#define EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_

#include <cstddef>
#include <cstdint>

#include "edgeshare/runtime/core/evalue.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace runtime {

using KernelFn = Status (*)(Span<EValue* const> args);

// What a kernel's outputs are.
enum class KernelOutputs : uint8_t { kTensors, kInts };

struct Kernel {
  KernelFn fn = nullptr;
  // The leading args that are inputs; args from this index on are outputs.
  size_t num_inputs = 0;
  KernelOutputs outputs = KernelOutputs::kTensors;

  explicit operator bool() const { return fn != nullptr; }
};

// Errors: AlreadyExists, InvalidArgument (null name or fn), MemoryAllocationFailed past 256
// kernels.
Status register_kernel(const char* name, KernelFn fn, size_t num_inputs,
                       KernelOutputs outputs = KernelOutputs::kTensors);

// The kernel registered under `name`; its fn is null when there is none.
Kernel get_kernel(const char* name);

// One row of a kernel file's registration table.
struct KernelEntry {
  const char* name;
  KernelFn fn;
  size_t num_inputs;
};

// Registers every row of `table` (with the given output kind); false if any row was refused.
template <size_t N>
bool register_kernels(const KernelEntry (&table)[N],
                      KernelOutputs outputs = KernelOutputs::kTensors) {
  bool ok = true;
  for (const KernelEntry& k : table)
    ok &= register_kernel(k.name, k.fn, k.num_inputs, outputs).ok();
  return ok;
}

// How many kernels are registered, and the name of the i-th ("" past the end).
size_t num_kernels();
const char* kernel_name(size_t index);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_KERNELS_KERNEL_REGISTRY_H_
