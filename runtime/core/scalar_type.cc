#include "edgeshare/runtime/core/scalar_type.h"

namespace edgeshare {
namespace runtime {

const char* to_string(ScalarType type) {
  switch (type) {
    case ScalarType::Byte:
      return "Byte";
    case ScalarType::Char:
      return "Char";
    case ScalarType::Short:
      return "Short";
    case ScalarType::Int:
      return "Int";
    case ScalarType::Long:
      return "Long";
    case ScalarType::Half:
      return "Half";
    case ScalarType::Float:
      return "Float";
    case ScalarType::Double:
      return "Double";
    case ScalarType::Bool:
      return "Bool";
    case ScalarType::BFloat16:
      return "BFloat16";
  }
  return "Unknown";
}

}  // namespace runtime
}  // namespace edgeshare
