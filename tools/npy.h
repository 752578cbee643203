// Reading and writing .npy arrays (NumPy's format, version 1.0, C order) for tools and tests.
//
//   ES_ASSIGN_OR_RETURN(NpyArray input, read_npy("x.npy"));          // float32 or int64
//   ES_RETURN_IF_ERROR(write_npy("out.npy", tensor));
//
// Errors: AccessFailed (cannot open/write), InvalidData (not a .npy file, unsupported dtype,
// Fortran order, size that does not match the shape), each naming the file.

#ifndef EDGESHARE_TOOLS_NPY_H_
#define EDGESHARE_TOOLS_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/tensor.h"

namespace edgeshare {
namespace tools {

struct NpyArray {
  runtime::ScalarType dtype = runtime::ScalarType::Float;
  std::vector<int32_t> shape;
  std::vector<uint8_t> data;

  // A Tensor view of this array (valid while the array lives and is not resized).
  runtime::Tensor tensor() {
    return runtime::Tensor(dtype, runtime::Span<const int32_t>(shape.data(), shape.size()),
                           data.data());
  }
};

runtime::Result<NpyArray> read_npy(const std::string& path);
runtime::Status write_npy(const std::string& path, const runtime::Tensor& tensor);

}  // namespace tools
}  // namespace edgeshare

#endif  // EDGESHARE_TOOLS_NPY_H_
