#include "edgeshare/runtime/executor/method.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "edgeshare/runtime/executor/program_image.h"

namespace edgeshare {
namespace runtime {

void Method::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

Method::~Method() {
  for (const Delegate& delegate : delegates_) delegate.backend->destroy(delegate.handle);
}

Result<Tensor> Method::input(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < inputs_.size(), Error::OutOfRange,
                           "method '%s' has %zu inputs; there is no input %zu", name(),
                           inputs_.size(), index);
  const EValue& value = values_[inputs_[index]];
  ES_CHECK_OR_RETURN_ERROR(value.is_tensor(), Error::InvalidArgument,
                           "input %zu of method '%s' is not a tensor", index, name());
  return value.to_tensor();
}

Status Method::set_input(size_t index, const Tensor& value) {
  ES_ASSIGN_OR_RETURN(Tensor slot, input(index));
  ES_CHECK_OR_RETURN_ERROR(value.scalar_type() == slot.scalar_type(), Error::InvalidArgument,
                           "input %zu of method '%s' must be %s, not %s", index, name(),
                           to_string(slot.scalar_type()), to_string(value.scalar_type()));
  bool same = value.dim() == slot.dim();
  for (size_t d = 0; same && d < slot.dim(); ++d) same = value.size(d) == slot.size(d);
  if (!same) {
    char expected[96] = "";
    char got[96] = "";
    size_t n = 0;
    for (size_t d = 0; d < slot.dim() && n < sizeof(expected); ++d) {
      n += std::snprintf(expected + n, sizeof(expected) - n, d ? ", %d" : "%d", slot.size(d));
    }
    n = 0;
    for (size_t d = 0; d < value.dim() && n < sizeof(got); ++d) {
      n += std::snprintf(got + n, sizeof(got) - n, d ? ", %d" : "%d", value.size(d));
    }
    return Status::Format(Error::InvalidArgument,
                          "input %zu of method '%s' must have shape [%s], not [%s]", index, name(),
                          expected, got);
  }
  if (slot.nbytes() > 0 && slot.mutable_data() != value.const_data()) {
    ES_CHECK_OR_RETURN_ERROR(value.const_data() != nullptr, Error::InvalidArgument,
                             "input %zu of method '%s' has no data", index, name());
    std::memcpy(slot.mutable_data(), value.const_data(), slot.nbytes());
  }
  return Status();
}

Result<Tensor> Method::output(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < outputs_.size(), Error::OutOfRange,
                           "method '%s' has %zu outputs; there is no output %zu", name(),
                           outputs_.size(), index);
  const EValue& value = values_[outputs_[index]];
  ES_CHECK_OR_RETURN_ERROR(value.is_tensor(), Error::InvalidArgument,
                           "output %zu of method '%s' is not a tensor", index, name());
  return value.to_tensor();
}

Status Method::execute() {
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const Instruction& instruction = instructions_[i];
    Span<EValue* const> args(args_.data() + instruction.args_begin, instruction.args_count);
    Status status = instruction.kernel != nullptr
                        ? instruction.kernel(args)
                        : delegates_[instruction.delegate].backend->execute(
                              delegates_[instruction.delegate].handle, args);
    if (!status.ok()) {
      return status.WithContext("method '%s' of %s, instruction %zu (%s)", name(), program_->name(),
                                i, instruction.what);
    }
  }
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare
