// Prints the operator names the portable kernels register, one per line, sorted: the exporter
// checks every kernel call it emits against this list, so a model using an operator nothing here
// runs fails at export naming the node, not at load on the device.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "edgeshare/runtime/kernels/kernel_registry.h"

int main() {
  std::vector<std::string> names;
  for (size_t i = 0; i < edgeshare::runtime::num_kernels(); ++i) {
    names.emplace_back(edgeshare::runtime::kernel_name(i));
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) std::printf("%s\n", name.c_str());
  return 0;
}
