// ScalarType: tensor element types, numbered as in torch and in schema/scalar_type.fbs.
//
//   size_t bytes = element_size(ScalarType::Float) * numel;   // 0 for a type the runtime lacks
//   if (!is_known(type)) return Error::NotSupported;

#ifndef EDGESHARE_RUNTIME_CORE_SCALAR_TYPE_H_
#define EDGESHARE_RUNTIME_CORE_SCALAR_TYPE_H_

#include <cstddef>
#include <cstdint>

namespace edgeshare {
namespace runtime {

enum class ScalarType : int8_t {
  Byte = 0,
  Char = 1,
  Short = 2,
  Int = 3,
  Long = 4,
  Half = 5,
  Float = 6,
  Double = 7,
  Bool = 11,
  BFloat16 = 15,
};

// Bytes per element, or 0 for a value that is not a known ScalarType (e.g. from a hostile file).
constexpr size_t element_size(ScalarType type) {
  switch (type) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Bool:
      return 1;
    case ScalarType::Short:
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return 2;
    case ScalarType::Int:
    case ScalarType::Float:
      return 4;
    case ScalarType::Long:
    case ScalarType::Double:
      return 8;
  }
  return 0;
}

constexpr bool is_known(ScalarType type) { return element_size(type) != 0; }

// The type's torch-style name, e.g. "Float"; "Unknown" for anything else.
const char* to_string(ScalarType type);

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_SCALAR_TYPE_H_
