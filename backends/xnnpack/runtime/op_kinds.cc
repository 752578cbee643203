// Prints the names of the op kinds the C++ rows (op_rows.inc) implement, one per line, for checks
// against the Python side's rows.

#include <cstdio>

#include "edgeshare/backends/xnnpack/runtime/op_rows.h"

int main() {
  for (const edgeshare::xnnpack::OpRow& row : edgeshare::xnnpack::op_rows()) {
    std::printf("%s\n", row.name);
  }
  return 0;
}
