// EValue: one value of a method: a Tensor, an int, a double, a bool, an int list, a string (e.g.
// gelu's approximate="tanh"), a list of values (a Tensor[] such as cat's inputs, or a Tensor?[]
// such as index.Tensor's indices, whose entries may be none), or none.
//
// Kernels and delegates get their arguments as EValues. An EValue never owns memory (an int list
// points into the program's flatbuffer or, when some items are sizes computed at run time, into
// the Method's own array, refreshed before each call; a value list points at the Method's values),
// so it is trivially copyable and never allocates.
//
//   if (!arg.is_tensor()) return Error::InvalidArgument;
//   Tensor& t = arg.to_tensor();

#ifndef EDGESHARE_RUNTIME_CORE_EVALUE_H_
#define EDGESHARE_RUNTIME_CORE_EVALUE_H_

#include <cstdint>

#include "edgeshare/runtime/core/span.h"
#include "edgeshare/runtime/core/tensor.h"

namespace edgeshare {
namespace runtime {

class EValue {
 public:
  enum class Tag : uint8_t { None, Int, Double, Bool, IntList, Tensor, String, List };

  EValue() = default;
  explicit EValue(int64_t v) : tag_(Tag::Int) { payload_.i = v; }
  explicit EValue(double v) : tag_(Tag::Double) { payload_.d = v; }
  explicit EValue(bool v) : tag_(Tag::Bool) { payload_.b = v; }
  explicit EValue(Span<const int64_t> v) : tag_(Tag::IntList) { payload_.list = v; }
  explicit EValue(const Tensor& t) : tag_(Tag::Tensor) { payload_.tensor = t; }
  // The string must outlive the value (Method's strings point into the program's flatbuffer).
  explicit EValue(const char* s) : tag_(Tag::String) { payload_.str = s; }
  // The values must outlive this one (Method's lists point at its own values).
  explicit EValue(Span<EValue* const> items) : tag_(Tag::List) { payload_.items = items; }

  Tag tag() const { return tag_; }
  bool is_none() const { return tag_ == Tag::None; }
  bool is_int() const { return tag_ == Tag::Int; }
  bool is_double() const { return tag_ == Tag::Double; }
  bool is_bool() const { return tag_ == Tag::Bool; }
  bool is_int_list() const { return tag_ == Tag::IntList; }
  bool is_tensor() const { return tag_ == Tag::Tensor; }
  bool is_string() const { return tag_ == Tag::String; }
  bool is_list() const { return tag_ == Tag::List; }

  // Accessors require the matching tag; check it first.
  int64_t to_int() const { return payload_.i; }
  double to_double() const { return payload_.d; }
  bool to_bool() const { return payload_.b; }
  Span<const int64_t> to_int_list() const { return payload_.list; }
  const char* to_str() const { return payload_.str; }
  Span<EValue* const> to_list() const { return payload_.items; }
  // Assigns an int in place (sizes computed at run time, e.g. aten::sym_size); requires is_int().
  void set_int(int64_t v) { payload_.i = v; }
  Tensor& to_tensor() { return payload_.tensor; }
  const Tensor& to_tensor() const { return payload_.tensor; }

 private:
  Tag tag_ = Tag::None;
  union Payload {
    Payload() : i(0) {}
    int64_t i;
    double d;
    bool b;
    Span<const int64_t> list;
    const char* str;
    Span<EValue* const> items;
    Tensor tensor;
  } payload_;
};

}  // namespace runtime
}  // namespace edgeshare

#endif  // EDGESHARE_RUNTIME_CORE_EVALUE_H_
