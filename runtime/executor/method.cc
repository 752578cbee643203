#include "edgeshare/runtime/executor/method.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "edgeshare/runtime/core/content_policy.h"
#include "edgeshare/runtime/executor/program_image.h"

namespace edgeshare {
namespace runtime {

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

Result<uint8_t> Method::input_dynamic_dims(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < inputs_.size(), Error::OutOfRange,
                           "method '%s' has %zu inputs; there is no input %zu", name(),
                           inputs_.size(), index);
  return dynamic_masks_[inputs_[index]];
}

Result<uint8_t> Method::output_dynamic_dims(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < outputs_.size(), Error::OutOfRange,
                           "method '%s' has %zu outputs; there is no output %zu", name(),
                           outputs_.size(), index);
  return dynamic_masks_[outputs_[index]];
}

namespace {

// "2, 128, 64" into buf, for messages.
void format_sizes(Span<const int32_t> sizes, char* buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (size_t d = 0; d < sizes.size() && n < size; ++d) {
    n += static_cast<size_t>(std::snprintf(buf + n, size - n, d ? ", %d" : "%d", sizes[d]));
  }
}

}  // namespace

Status Method::set_input(size_t index, const Tensor& value) {
  ES_ASSIGN_OR_RETURN(Tensor slot, input(index));
  ES_CHECK_OR_RETURN_ERROR(value.scalar_type() == slot.scalar_type(), Error::InvalidArgument,
                           "input %zu of method '%s' must be %s, not %s", index, name(),
                           to_string(slot.scalar_type()), to_string(value.scalar_type()));
  const InputShape& shape = input_shapes_[index];
  bool fits = value.dim() == slot.dim();
  for (size_t d = 0; fits && d < slot.dim(); ++d) {
    if (shape.dynamic_mask & (1u << d)) {
      if (value.size(d) < 1 || value.size(d) > shape.bound[d]) {
        return Status::Format(Error::InvalidArgument,
                              "input %zu of method '%s': dim %zu is %d, outside the 1..%d this "
                              "program was exported for",
                              index, name(), d, value.size(d), shape.bound[d]);
      }
    } else {
      fits = value.size(d) == shape.bound[d];
    }
  }
  if (!fits) {
    char expected[96];
    char got[96];
    format_sizes(Span<const int32_t>(shape.bound, slot.dim()), expected, sizeof(expected));
    format_sizes(value.sizes(), got, sizeof(got));
    return Status::Format(Error::InvalidArgument,
                          "input %zu of method '%s' must have shape [%s]%s, not [%s]", index,
                          name(), expected, shape.dynamic_mask ? " (dynamic dims up to)" : "", got);
  }
  Tensor& planned = values_[inputs_[index]].to_tensor();
  ES_RETURN_IF_ERROR(planned.resize(value.sizes()));
  if (planned.nbytes() > 0 && planned.mutable_data() != value.const_data()) {
    ES_CHECK_OR_RETURN_ERROR(value.const_data() != nullptr, Error::InvalidArgument,
                             "input %zu of method '%s' has no data", index, name());
    std::memcpy(planned.mutable_data(), value.const_data(), planned.nbytes());
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

void Method::reset_state() {
  for (const State& state : state_) {
    if (state.initial != nullptr) {
      std::memcpy(state.data, state.initial, state.nbytes);
    } else {
      std::memset(state.data, 0, state.nbytes);
    }
  }
}

Result<std::vector<ExternalConstant>> Method::acquire_open_constants(const NamedDataMap& data) {
  std::vector<ExternalConstant> holds;
  holds.reserve(external_slots_.size());
  const char* missing = nullptr;  // an open constant `data` lacks
  for (size_t i = 0; i < external_slots_.size(); ++i) {
    const ExternalSlot& slot = external_slots_[i];
    Result<Digest> digest = data.get_digest(slot.key);
    if (!digest.ok() && digest.error() == Error::NotFound) {
      if (!slot.pinned && missing == nullptr) missing = slot.key;
      continue;
    }
    ES_CHECK_OR_RETURN_ERROR(digest.ok(), digest.error(), "constant '%s': %s", slot.key,
                             digest.status().message());
    ES_CHECK_OR_RETURN_ERROR(!slot.pinned, Error::InvalidArgument,
                             "%s holds '%s', which method '%s' of %s pins by digest (a foundation "
                             "weight): only an adapter exported for swapping can be rebound",
                             data.name(), slot.key, name(), program_->name());
    ES_CHECK_OR_RETURN_ERROR(delegate_map_ == nullptr || !delegate_map_->was_read(slot.key),
                             Error::InvalidArgument,
                             "a delegate of method '%s' of %s read '%s' at load (its bytes are "
                             "packed): it cannot be rebound to %s",
                             name(), program_->name(), slot.key, data.name());
    const Tensor& t = values_[slot.value].to_tensor();
    ES_RETURN_IF_ERROR(
        check_external_layout(data, slot.key, t.scalar_type(), t.sizes(), program_->name()));
    ES_ASSIGN_OR_RETURN(ExternalConstant bytes,
                        ExternalConstant::acquire(data, slot.key, *digest, t.nbytes()));
    holds.push_back(std::move(bytes));
  }
  ES_CHECK_OR_RETURN_ERROR(!holds.empty(), Error::NotFound,
                           "%s holds none of the constants method '%s' of %s can rebind",
                           data.name(), name(), program_->name());
  // Half an adapter would run with the rest of the previous one: a file of another structure.
  ES_CHECK_OR_RETURN_ERROR(missing == nullptr, Error::InvalidArgument,
                           "%s lacks '%s', which method '%s' of %s rebinds with the rest of its "
                           "adapter (an adapter of another structure?)",
                           data.name(), missing, name(), program_->name());
  return holds;
}

// Every open slot's value points at data[k], k counting the open slots in order.
void Method::point_open_constants(const std::vector<const void*>& data) {
  size_t k = 0;
  for (const ExternalSlot& slot : external_slots_) {
    if (slot.pinned) continue;
    Tensor& t = values_[slot.value].to_tensor();
    t = Tensor(t.scalar_type(), t.sizes(), const_cast<void*>(data[k++]));
  }
}

Status Method::rebind_data(const NamedDataMap& data) {
  ES_ASSIGN_OR_RETURN(std::vector<ExternalConstant> holds, acquire_open_constants(data));
  std::vector<const void*> pointers;
  pointers.reserve(holds.size());
  for (const ExternalConstant& hold : holds) pointers.push_back(hold.data());
  point_open_constants(pointers);
  size_t k = 0;
  for (const ExternalSlot& slot : external_slots_) {
    if (!slot.pinned) external_constants_[slot.holder] = std::move(holds[k++]);
  }
  reset_state();
  return Status();
}

Status Method::rebind_data(std::shared_ptr<const NamedDataMap> data) {
  ES_CHECK_OR_RETURN_ERROR(data != nullptr, Error::InvalidArgument,
                           "no data file to rebind method '%s' of %s to", name(),
                           program_->name());
  const bool verify = verify_content_enabled();
  AdapterTable* table = nullptr;
  for (AdapterTable& t : adapter_tables_) {
    if (t.map == data) table = &t;
  }
  // Bytes taken while verification was off are never handed to a checked binding.
  if (table != nullptr && verify && !table->verified) {
    std::vector<ExternalConstant> holds;
    ES_ASSIGN_OR_RETURN(holds, acquire_open_constants(*data));
    table->holds = std::move(holds);
    table->pointers.clear();
    for (const ExternalConstant& hold : table->holds) table->pointers.push_back(hold.data());
    table->verified = true;
  }
  if (table == nullptr) {
    ES_ASSIGN_OR_RETURN(std::vector<ExternalConstant> holds, acquire_open_constants(*data));
    AdapterTable added;
    added.map = std::move(data);
    added.holds = std::move(holds);
    for (const ExternalConstant& hold : added.holds) added.pointers.push_back(hold.data());
    added.verified = verify;
    adapter_tables_.push_back(std::move(added));
    table = &adapter_tables_.back();
  }
  point_open_constants(table->pointers);
  // The table holds the bytes now: the Method's own holds of an earlier binding go.
  for (const ExternalSlot& slot : external_slots_) {
    if (!slot.pinned && !external_constants_[slot.holder].empty()) {
      external_constants_[slot.holder] = ExternalConstant();
    }
  }
  reset_state();
  return Status();
}

Status Method::execute() {
  const ThreadsScope scope(threads_ != nullptr ? threads_ : current_threads());
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const Instruction& instruction = instructions_[i];
    for (size_t r = 0; r < instruction.refresh_count; ++r) {
      const SymIntRefresh& refresh = refreshes_[instruction.refresh_begin + r];
      *refresh.item = refresh.source->to_int();
    }
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
