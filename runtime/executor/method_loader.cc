// Method::load: builds a Method from one ExecutionPlan of a verified program, one step per part of
// the plan. The flatbuffer verifier has checked offsets and types; every index and size the plan
// holds is checked here before it is used.

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "edgeshare/runtime/executor/external_constants.h"
#include "edgeshare/runtime/executor/key_recording_data_map.h"
#include "edgeshare/runtime/executor/method.h"
#include "edgeshare/runtime/executor/program_image.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"
#include "edgeshare/schema/program_generated.h"

namespace edgeshare {
namespace runtime {
namespace {

// A hostile file must not make us reserve absurd memory: one planned buffer is at most 8 GiB.
constexpr uint64_t kMaxPlannedBuffer = uint64_t{8} << 30;
constexpr size_t kMaxOperatorName = 96;

template <typename T>
size_t length(const flatbuffers::Vector<T>* vector) {
  return vector == nullptr ? 0 : vector->size();
}

template <typename T>
auto at(const flatbuffers::Vector<T>& vector, size_t index) {
  return vector.Get(static_cast<flatbuffers::uoffset_t>(index));
}

const flatbuffers::Vector<uint32_t>* arguments_of(const schema::Instruction& instruction) {
  if (const auto* call = instruction.instr_args_as_KernelCall()) return call->args();
  if (const auto* call = instruction.instr_args_as_DelegateCall()) return call->args();
  return nullptr;
}

}  // namespace

// Fills one Method from one plan. A failed step returns at once and leaves the Method half built;
// its destructor releases what was made (the delegates initialised so far included).
class Method::Loader {
 public:
  Loader(const ProgramImage& program, const schema::ExecutionPlan& plan,
         const NamedDataMap* external, Method* method)
      : program_(program), plan_(plan), external_(external), method_(*method) {}

  Status run() {
    ES_RETURN_IF_ERROR(build_data_map());
    ES_RETURN_IF_ERROR(plan_memory());
    ES_RETURN_IF_ERROR(parse_values());
    ES_RETURN_IF_ERROR(read_value_indices(plan_.inputs(), "input", &method_.inputs_));
    ES_RETURN_IF_ERROR(record_input_shapes());
    ES_RETURN_IF_ERROR(read_value_indices(plan_.outputs(), "output", &method_.outputs_));
    ES_RETURN_IF_ERROR(init_state());
    ES_RETURN_IF_ERROR(reserve_arguments());
    ES_RETURN_IF_ERROR(init_delegates());
    return resolve_instructions();
  }

 private:
  Status build_data_map();
  Status plan_memory();
  Status parse_values();
  Status reserve_lists();
  Result<EValue> parse_value(size_t index, const schema::EValue& value);
  Result<EValue> parse_list(size_t index, const schema::EValue& value);
  Result<uint8_t> dynamic_mask(const char* what, const schema::Tensor& tensor) const;
  Status record_input_shapes();
  Status init_state();
  Result<EValue> parse_tensor(const char* what, const schema::Tensor& tensor);
  Result<void*> inline_constant(const char* what, const schema::Tensor& tensor, size_t nbytes);
  Result<void*> external_constant(const char* what, const schema::Tensor& tensor, ScalarType type,
                                  size_t nbytes);
  Result<void*> planned_data(const char* what, const schema::Tensor& tensor, ScalarType type,
                             size_t nbytes);
  Status read_value_indices(const flatbuffers::Vector<uint32_t>* indices, const char* what,
                            std::vector<size_t>* out);
  Status reserve_arguments();
  Status init_delegates();
  Status init_delegate(size_t index, const schema::BackendDelegate& delegate);
  Status resolve_instructions();
  Status resolve_kernel_call(size_t index, const schema::KernelCall& call, Instruction* out);
  Status resolve_delegate_call(size_t index, const schema::DelegateCall& call, Instruction* out);
  Status bind_arguments(size_t index, const flatbuffers::Vector<uint32_t>* args, Instruction* out);
  Status check_writable(size_t index, size_t arg, uint32_t value, const Instruction& out);
  Status check_writable_int(size_t index, size_t arg, uint32_t value, const Instruction& out);
  void add_refreshes(uint32_t value);

  const ProgramImage& program_;
  const schema::ExecutionPlan& plan_;
  const NamedDataMap* external_;
  Method& method_;
  std::vector<uint64_t> buffer_sizes_;  // the planned buffers' sizes, for bounds checks
  std::vector<size_t> sym_list_begin_;  // per SymIntList value: its first item in sym_int_items_
  std::vector<bool> int_written_;       // per value: an Int a size kernel already writes
  bool writes_ints_ = false;            // the call being bound is a size kernel's
  size_t parsing_value_ = 0;            // the value parse_tensor is parsing
};

bool is_list_kind(schema::KernelTypes kind) {
  return kind == schema::KernelTypes_ValueList || kind == schema::KernelTypes_SymIntList;
}

Result<Method> Method::load(std::shared_ptr<const ProgramImage> program,
                            const schema::ExecutionPlan& plan, const NamedDataMap* external_data,
                            const Threads* threads) {
  ES_CHECK_OR_RETURN_ERROR(program != nullptr, Error::InvalidArgument,
                           "Method::load: null program");
  // Delegates prepare their weights at init (packing) on these threads too.
  const ThreadsScope scope(threads != nullptr ? threads : current_threads());
  Method method;
  method.threads_ = threads;
  method.program_ = std::move(program);
  method.name_ = plan.name()->c_str();
  Status status = Loader(*method.program_, plan, external_data, &method).run();
  if (!status.ok()) {
    return status.WithContext("failed to load method '%s' from %s", method.name(),
                              method.program_->name());
  }
  return method;
}

// The map delegates see: the program's own named data plus the external files. It lives in the
// Method (delegates may keep it) and stays put when the Method moves.
Status Method::Loader::build_data_map() {
  if (program_.named_data() == nullptr && external_ == nullptr) return Status();
  ES_ASSIGN_OR_RETURN(MergedDataMap merged,
                      MergedDataMap::create({program_.named_data(), external_}));
  method_.data_map_ = std::make_unique<MergedDataMap>(std::move(merged));
  method_.delegate_map_ = std::make_unique<KeyRecordingDataMap>(method_.data_map_.get());
  return Status();
}

Status Method::Loader::plan_memory() {
  const auto* sizes = plan_.non_const_buffer_sizes();
  const size_t num_buffers = length(sizes);
  buffer_sizes_.assign(num_buffers, 0);
  for (size_t i = 0; i < num_buffers; ++i) {
    const uint64_t size = at(*sizes, i);
    ES_CHECK_OR_RETURN_ERROR(size <= kMaxPlannedBuffer, Error::InvalidProgram,
                             "planned buffer %zu of %llu bytes is larger than %llu", i,
                             static_cast<unsigned long long>(size),
                             static_cast<unsigned long long>(kMaxPlannedBuffer));
    buffer_sizes_[i] = size;
    // Zeroed so that nothing uninitialised is ever read; planned for the token bound, so only the
    // pages a run writes may cost memory.
    Result<ZeroedMemory> memory = ZeroedMemory::allocate(static_cast<size_t>(size));
    ES_CHECK_OR_RETURN_ERROR(memory.ok(), Error::MemoryAllocationFailed,
                             "cannot allocate planned buffer %zu of %llu bytes", i,
                             static_cast<unsigned long long>(size));
    method_.buffers_.push_back(std::move(*memory));
  }
  return Status();
}

// Lists point at other values, so they are parsed after every other value has its place.
Status Method::Loader::parse_values() {
  const auto* values = plan_.values();
  const size_t n = length(values);
  method_.values_.resize(n);
  method_.dynamic_masks_.assign(n, 0);
  int_written_.assign(n, false);
  ES_RETURN_IF_ERROR(reserve_lists());
  for (size_t v = 0; v < n; ++v) {
    if (is_list_kind(at(*values, v)->val_type())) continue;
    ES_ASSIGN_OR_RETURN(method_.values_[v], parse_value(v, *at(*values, v)));
  }
  for (size_t v = 0; v < n; ++v) {
    if (!is_list_kind(at(*values, v)->val_type())) continue;
    ES_ASSIGN_OR_RETURN(method_.values_[v], parse_list(v, *at(*values, v)));
  }
  return Status();
}

// Both item arrays are reserved in full before any list points into them, so they never move.
Status Method::Loader::reserve_lists() {
  const auto* values = plan_.values();
  size_t list_items = 0;
  size_t sym_items = 0;
  for (size_t v = 0; v < length(values); ++v) {
    const schema::EValue& value = *at(*values, v);
    if (const auto* list = value.val_as_ValueList()) list_items += length(list->items());
    if (const auto* list = value.val_as_SymIntList()) sym_items += length(list->items());
  }
  method_.list_items_.reserve(list_items);
  method_.sym_int_items_.reserve(sym_items);
  sym_list_begin_.assign(length(values), 0);
  return Status();
}

// A ValueList holds tensors or Nones (a Tensor[] or Tensor?[]); a SymIntList holds Ints, whose
// values are copied into the list before every call that reads it (add_refreshes).
Result<EValue> Method::Loader::parse_list(size_t index, const schema::EValue& value) {
  const auto* values = plan_.values();
  const size_t num_values = length(values);
  const bool sym = value.val_type() == schema::KernelTypes_SymIntList;
  ES_CHECK_OR_RETURN_ERROR(value.val() != nullptr, Error::InvalidProgram,
                           "value %zu is a %s without its table", index,
                           schema::EnumNameKernelTypes(value.val_type()));
  const auto* items = sym ? value.val_as_SymIntList()->items() : value.val_as_ValueList()->items();
  const size_t begin = sym ? method_.sym_int_items_.size() : method_.list_items_.size();
  for (size_t i = 0; i < length(items); ++i) {
    const uint32_t item = at(*items, i);
    ES_CHECK_OR_RETURN_ERROR(item < num_values, Error::InvalidProgram,
                             "list value %zu item %zu names value %u of %zu", index, i, item,
                             num_values);
    const schema::KernelTypes kind = at(*values, item)->val_type();
    if (sym) {
      ES_CHECK_OR_RETURN_ERROR(kind == schema::KernelTypes_Int, Error::InvalidProgram,
                               "int list value %zu item %zu (value %u) is not an Int", index, i,
                               item);
      method_.sym_int_items_.push_back(method_.values_[item].to_int());
    } else {
      ES_CHECK_OR_RETURN_ERROR(
          kind == schema::KernelTypes_Tensor || kind == schema::KernelTypes_Null,
          Error::InvalidProgram, "list value %zu item %zu (value %u) is neither a tensor nor None",
          index, i, item);
      method_.list_items_.push_back(&method_.values_[item]);
    }
  }
  if (sym) {
    sym_list_begin_[index] = begin;
    return EValue(Span<const int64_t>(method_.sym_int_items_.data() + begin, length(items)));
  }
  return EValue(Span<EValue* const>(method_.list_items_.data() + begin, length(items)));
}

// Scalars, lists and strings point into the flatbuffer; tensors are parsed by parse_tensor.
Result<EValue> Method::Loader::parse_value(size_t index, const schema::EValue& value) {
  // The verifier accepts a union type whose table is absent; every kind past Null needs it.
  const schema::KernelTypes kind = value.val_type();
  ES_CHECK_OR_RETURN_ERROR(
      kind <= schema::KernelTypes_Null || kind > schema::KernelTypes_MAX || value.val() != nullptr,
      Error::InvalidProgram, "value %zu is a %s without its table", index,
      schema::EnumNameKernelTypes(kind));
  switch (kind) {
    case schema::KernelTypes_NONE:
    case schema::KernelTypes_Null:
      return EValue();
    case schema::KernelTypes_Int:
      return EValue(static_cast<int64_t>(value.val_as_Int()->int_val()));
    case schema::KernelTypes_Double:
      return EValue(value.val_as_Double()->double_val());
    case schema::KernelTypes_Bool:
      return EValue(value.val_as_Bool()->bool_val());
    case schema::KernelTypes_IntList: {
      const auto* items = value.val_as_IntList()->items();
      return EValue(items == nullptr ? Span<const int64_t>()
                                     : Span<const int64_t>(items->data(), items->size()));
    }
    case schema::KernelTypes_String: {
      const auto* text = value.val_as_String()->string_val();
      return EValue(text == nullptr ? "" : text->c_str());
    }
    case schema::KernelTypes_Tensor: {
      char what[64];
      std::snprintf(what, sizeof(what), "value %zu", index);
      ES_ASSIGN_OR_RETURN(method_.dynamic_masks_[index],
                          dynamic_mask(what, *value.val_as_Tensor()));
      parsing_value_ = index;
      return parse_tensor(what, *value.val_as_Tensor());
    }
    default:
      return Status::Format(Error::InvalidProgram, "value %zu has unknown kind %d", index,
                            static_cast<int>(value.val_type()));
  }
}

// Checks dtype and shape, then finds the bytes: an inline constant segment, an external constant,
// or the tensor's place in planned memory.
Result<EValue> Method::Loader::parse_tensor(const char* what, const schema::Tensor& tensor) {
  const auto type = static_cast<ScalarType>(tensor.scalar_type());
  ES_CHECK_OR_RETURN_ERROR(is_known(type), Error::InvalidProgram, "%s has unknown scalar type %d",
                           what, static_cast<int>(tensor.scalar_type()));
  const auto* sizes = tensor.sizes();
  const size_t rank = length(sizes);
  ES_CHECK_OR_RETURN_ERROR(rank <= Tensor::kMaxDims, Error::InvalidProgram,
                           "%s has %zu dims (at most %zu)", what, rank, Tensor::kMaxDims);
  size_t nbytes = element_size(type);
  for (size_t d = 0; d < rank; ++d) {
    const int32_t s = at(*sizes, d);
    ES_CHECK_OR_RETURN_ERROR(s >= 0 && (s == 0 || nbytes <= SIZE_MAX / s), Error::InvalidProgram,
                             "%s has a bad size %d", what, s);
    nbytes *= static_cast<size_t>(s);
  }
  const bool external = tensor.external_key() != nullptr;
  const bool inline_segment = tensor.constant_segment() >= 0;
  ES_CHECK_OR_RETURN_ERROR(!(external && inline_segment), Error::InvalidProgram,
                           "%s is both an external and an inline constant", what);
  void* data = nullptr;
  if (inline_segment) {
    ES_ASSIGN_OR_RETURN(data, inline_constant(what, tensor, nbytes));
  } else if (external) {
    ES_ASSIGN_OR_RETURN(data, external_constant(what, tensor, type, nbytes));
  } else {
    ES_ASSIGN_OR_RETURN(data, planned_data(what, tensor, type, nbytes));
  }
  Span<const int32_t> span_sizes(sizes == nullptr ? nullptr : sizes->data(), rank);
  return EValue(Tensor(type, span_sizes, data));
}

// Which dims vary per execute: only planned tensors may, each dim named once and in range.
Result<uint8_t> Method::Loader::dynamic_mask(const char* what, const schema::Tensor& tensor) const {
  const auto* dims = tensor.dynamic_dims();
  if (length(dims) == 0) return uint8_t{0};
  ES_CHECK_OR_RETURN_ERROR(tensor.constant_segment() < 0 && tensor.external_key() == nullptr,
                           Error::InvalidProgram, "%s is a constant with dynamic dims", what);
  uint8_t mask = 0;
  const size_t rank = length(tensor.sizes());
  for (size_t i = 0; i < length(dims); ++i) {
    const uint8_t d = at(*dims, i);
    ES_CHECK_OR_RETURN_ERROR(d < rank && d < Tensor::kMaxDims && !(mask & (1u << d)),
                             Error::InvalidProgram, "%s names dynamic dim %u of %zu (or twice)",
                             what, static_cast<unsigned>(d), rank);
    mask = static_cast<uint8_t>(mask | (1u << d));
  }
  return mask;
}

// set_input's contract: the planned sizes are the bounds of the dynamic dims, exact otherwise.
Status Method::Loader::record_input_shapes() {
  for (size_t input : method_.inputs_) {
    InputShape shape;
    const EValue& value = method_.values_[input];
    if (value.is_tensor()) {
      const Tensor& t = value.to_tensor();
      for (size_t d = 0; d < t.dim(); ++d) shape.bound[d] = t.size(d);
      shape.dynamic_mask = method_.dynamic_masks_[input];
    }
    method_.input_shapes_.push_back(shape);
  }
  return Status();
}

// State tensors live in planned memory; their initial bytes (if not zeros) stay in the program's
// segment, a view the Method keeps for reset_state().
Status Method::Loader::init_state() {
  const auto* state = plan_.state();
  for (size_t i = 0; i < length(state); ++i) {
    const schema::StateBuffer& entry = *at(*state, i);
    const uint32_t value = entry.value();
    ES_CHECK_OR_RETURN_ERROR(value < method_.values_.size(), Error::InvalidProgram,
                             "state %zu names value %u of %zu", i, value, method_.values_.size());
    const schema::Tensor* tensor = at(*plan_.values(), value)->val_as_Tensor();
    ES_CHECK_OR_RETURN_ERROR(
        tensor != nullptr && tensor->allocation() != nullptr && length(tensor->dynamic_dims()) == 0,
        Error::InvalidProgram, "state %zu (value %u) is not a planned tensor of fixed shape", i,
        value);
    for (size_t input : method_.inputs_) {
      ES_CHECK_OR_RETURN_ERROR(input != value, Error::InvalidProgram,
                               "state %zu (value %u) is an input of the method", i, value);
    }
    const Tensor& t = method_.values_[value].to_tensor();
    State out;
    out.data = t.mutable_data();
    out.nbytes = t.nbytes();
    if (entry.initial_segment() >= 0) {
      const auto index = static_cast<size_t>(entry.initial_segment());
      ES_CHECK_OR_RETURN_ERROR(index < program_.num_segments(), Error::InvalidProgram,
                               "state %zu names segment %zu of %zu", i, index,
                               program_.num_segments());
      const schema::DataSegment& segment = program_.segment(index);
      ES_CHECK_OR_RETURN_ERROR(segment.size() == out.nbytes, Error::InvalidProgram,
                               "state %zu needs %zu initial bytes but its segment holds %llu", i,
                               out.nbytes, static_cast<unsigned long long>(segment.size()));
      ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, program_.load_segment(segment, out.nbytes));
      out.initial = bytes.data();
      method_.constants_.push_back(std::move(bytes));
    }
    method_.state_.push_back(out);
  }
  method_.reset_state();
  return Status();
}

// A constant stored in the .pte: a view of (or a copy from) its segment, held by the Method.
Result<void*> Method::Loader::inline_constant(const char* what, const schema::Tensor& tensor,
                                              size_t nbytes) {
  const auto index = static_cast<size_t>(tensor.constant_segment());
  const size_t num_segments = program_.num_segments();
  ES_CHECK_OR_RETURN_ERROR(index < num_segments, Error::InvalidProgram,
                           "%s names segment %zu of %zu", what, index, num_segments);
  const schema::DataSegment& segment = program_.segment(index);
  ES_CHECK_OR_RETURN_ERROR(segment.size() == nbytes, Error::InvalidProgram,
                           "%s needs %zu bytes but its segment holds %llu", what, nbytes,
                           static_cast<unsigned long long>(segment.size()));
  ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, program_.load_segment(segment, nbytes));
  void* data = const_cast<void*>(bytes.data());
  method_.constants_.push_back(std::move(bytes));
  return data;
}

// A constant from a data file (e.g. a foundation weight in a .ptd): its layout must match what
// the program expects and, when the program recorded one (external_digest), so must its identity:
// the data file's digest for the key, so a file of the right shapes but other bytes is refused.
// The bytes come through the process's external constant table (external_constants.h): a view
// shared with other Methods and checked against that digest before any of them uses it.
Result<void*> Method::Loader::external_constant(const char* what, const schema::Tensor& tensor,
                                                ScalarType type, size_t nbytes) {
  const char* key = tensor.external_key()->c_str();
  ES_CHECK_OR_RETURN_ERROR(external_ != nullptr, Error::NotFound,
                           "constant '%s' lives in a data file, but none was given", key);
  const auto* sizes = tensor.sizes();
  ES_RETURN_IF_ERROR(check_external_layout(
      *external_, key, type,
      Span<const int32_t>(sizes == nullptr ? nullptr : sizes->data(), length(sizes)),
      program_.name()));
  Result<Digest> recorded = external_->get_digest(key);
  ES_CHECK_OR_RETURN_ERROR(recorded.ok(), recorded.error(), "constant '%s': %s", key,
                           recorded.status().message());
  if (const auto* expected = tensor.external_digest()) {
    Digest want;
    ES_CHECK_OR_RETURN_ERROR(expected->size() == want.bytes.size(), Error::InvalidProgram,
                             "%s has a %u-byte external digest (SHA-256 is %zu)", what,
                             expected->size(), want.bytes.size());
    for (size_t i = 0; i < want.bytes.size(); ++i) want.bytes[i] = at(*expected, i);
    ES_CHECK_OR_RETURN_ERROR(*recorded == want, Error::InvalidData,
                             "constant '%s' in %s is not the one %s was exported with (another "
                             "SHA-256: a different data file with the same shapes?)",
                             key, external_->name(), program_.name());
  }
  ES_ASSIGN_OR_RETURN(ExternalConstant bytes,
                      ExternalConstant::acquire(*external_, key, *recorded, nbytes));
  void* data = const_cast<void*>(bytes.data());
  // Constants the program pins by digest (the foundation) are never rebound; the others (a
  // swappable adapter's) may be, by Method::rebind_data.
  method_.external_slots_.push_back({parsing_value_, key, method_.external_constants_.size(),
                                     tensor.external_digest() != nullptr});
  method_.external_constants_.push_back(std::move(bytes));
  return data;
}

// A tensor in planned memory: it must lie inside its buffer, aligned to its element size. An empty
// tensor may have no plan (and no data).
Result<void*> Method::Loader::planned_data(const char* what, const schema::Tensor& tensor,
                                           ScalarType type, size_t nbytes) {
  const schema::AllocationInfo* allocation = tensor.allocation();
  ES_CHECK_OR_RETURN_ERROR(allocation != nullptr || nbytes == 0, Error::InvalidProgram,
                           "%s has no memory plan", what);
  if (allocation == nullptr) return static_cast<void*>(nullptr);
  const uint32_t id = allocation->memory_id();
  const uint64_t offset = allocation->offset();
  ES_CHECK_OR_RETURN_ERROR(id < buffer_sizes_.size() && offset <= buffer_sizes_[id] &&
                               nbytes <= buffer_sizes_[id] - offset,
                           Error::InvalidProgram,
                           "%s at buffer %u offset %llu (+%zu bytes) is outside the plan", what, id,
                           static_cast<unsigned long long>(offset), nbytes);
  ES_CHECK_OR_RETURN_ERROR(offset % element_size(type) == 0, Error::InvalidProgram,
                           "%s at offset %llu is misaligned", what,
                           static_cast<unsigned long long>(offset));
  return static_cast<void*>(static_cast<uint8_t*>(method_.buffers_[id].data()) + offset);
}

Status Method::Loader::read_value_indices(const flatbuffers::Vector<uint32_t>* indices,
                                          const char* what, std::vector<size_t>* out) {
  const size_t num_values = method_.values_.size();
  for (size_t i = 0; i < length(indices); ++i) {
    const uint32_t index = at(*indices, i);
    ES_CHECK_OR_RETURN_ERROR(index < num_values, Error::InvalidProgram,
                             "%s %zu names value %u of %zu", what, i, index, num_values);
    out->push_back(index);
  }
  return Status();
}

// args_ is reserved in full before any pointer into it is taken, so it never reallocates.
Status Method::Loader::reserve_arguments() {
  const auto* instructions = plan_.instructions();
  size_t total = 0;
  for (size_t i = 0; i < length(instructions); ++i) {
    const schema::Instruction& instruction = *at(*instructions, i);
    ES_CHECK_OR_RETURN_ERROR(instruction.instr_args_type() != schema::InstructionArguments_NONE,
                             Error::InvalidProgram, "instruction %zu is empty", i);
    // The verifier accepts an unknown union type, and a known one whose table is absent.
    ES_CHECK_OR_RETURN_ERROR(instruction.instr_args_as_KernelCall() != nullptr ||
                                 instruction.instr_args_as_DelegateCall() != nullptr,
                             Error::InvalidProgram, "instruction %zu of kind %d has no call", i,
                             static_cast<int>(instruction.instr_args_type()));
    total += length(arguments_of(instruction));
  }
  method_.args_.reserve(total);
  return Status();
}

// Each delegate is initialised once, in order, with the merged data map.
Status Method::Loader::init_delegates() {
  const auto* delegates = plan_.delegates();
  for (size_t d = 0; d < length(delegates); ++d) {
    ES_RETURN_IF_ERROR(init_delegate(d, *at(*delegates, d)));
  }
  return Status();
}

Status Method::Loader::init_delegate(size_t index, const schema::BackendDelegate& delegate) {
  const char* id = delegate.id()->c_str();
  const BackendInterface* backend = get_backend(id);
  ES_CHECK_OR_RETURN_ERROR(backend != nullptr, Error::NotFound,
                           "backend '%s' is not linked into this binary", id);
  ES_CHECK_OR_RETURN_ERROR(backend->is_available(), Error::NotSupported,
                           "backend '%s' is not available on this machine", id);
  const uint32_t segment_index = delegate.segment_index();
  const size_t num_segments = program_.num_segments();
  ES_CHECK_OR_RETURN_ERROR(segment_index < num_segments, Error::InvalidProgram,
                           "delegate %zu names segment %u of %zu", index, segment_index,
                           num_segments);
  const schema::DataSegment& segment = program_.segment(segment_index);
  ES_ASSIGN_OR_RETURN(FreeableBuffer processed,
                      program_.load_segment(segment, static_cast<size_t>(segment.size())));
  std::vector<CompileSpec> specs;
  if (delegate.compile_specs() != nullptr) {
    for (const schema::CompileSpec* spec : *delegate.compile_specs()) {
      CompileSpec s;
      s.key = spec->key()->c_str();
      if (spec->value() != nullptr) {
        s.value = Span<const uint8_t>(spec->value()->data(), spec->value()->size());
      }
      specs.push_back(s);
    }
  }
  BackendInitContext context(method_.delegate_data_map(), method_.name());
  Result<DelegateHandle*> handle =
      backend->init(context, &processed, Span<const CompileSpec>(specs.data(), specs.size()));
  if (!handle.ok()) {
    return handle.status().WithContext("backend '%s' could not initialise delegate %zu", id, index);
  }
  Delegate entry;
  entry.backend = backend;
  entry.handle = *handle;
  method_.delegates_.push_back(entry);
  return Status();
}

Status Method::Loader::resolve_instructions() {
  const auto* instructions = plan_.instructions();
  for (size_t i = 0; i < length(instructions); ++i) {
    const schema::Instruction& instruction = *at(*instructions, i);
    Instruction out;
    const flatbuffers::Vector<uint32_t>* args = nullptr;
    if (const auto* kernel_call = instruction.instr_args_as_KernelCall()) {
      ES_RETURN_IF_ERROR(resolve_kernel_call(i, *kernel_call, &out));
      args = kernel_call->args();
    } else {
      const auto* delegate_call = instruction.instr_args_as_DelegateCall();
      ES_RETURN_IF_ERROR(resolve_delegate_call(i, *delegate_call, &out));
      args = delegate_call->args();
    }
    ES_RETURN_IF_ERROR(bind_arguments(i, args, &out));
    method_.instructions_.push_back(out);
  }
  return Status();
}

// A kernel call: the operator's full name ("aten::add.Tensor") found in the kernel registry.
Status Method::Loader::resolve_kernel_call(size_t index, const schema::KernelCall& call,
                                           Instruction* out) {
  const size_t num_operators = length(plan_.operators());
  ES_CHECK_OR_RETURN_ERROR(call.op_index() < num_operators, Error::InvalidProgram,
                           "instruction %zu names operator %u of %zu", index, call.op_index(),
                           num_operators);
  const schema::Operator& op = *at(*plan_.operators(), call.op_index());
  char full_name[kMaxOperatorName];
  const char* overload = op.overload() == nullptr ? "" : op.overload()->c_str();
  std::snprintf(full_name, sizeof(full_name), "%s%s%s", op.name()->c_str(),
                overload[0] != '\0' ? "." : "", overload);
  const Kernel kernel = get_kernel(full_name);
  ES_CHECK_OR_RETURN_ERROR(kernel, Error::NotSupported,
                           "operator '%s' has no kernel in this runtime", full_name);
  out->kernel = kernel.fn;
  // From the registry, not the file: which args a kernel writes is the kernel's to say.
  out->num_inputs = kernel.num_inputs;
  writes_ints_ = kernel.outputs == KernelOutputs::kInts;
  out->what = op.name()->c_str();
  return Status();
}

Status Method::Loader::resolve_delegate_call(size_t index, const schema::DelegateCall& call,
                                             Instruction* out) {
  const size_t num_delegates = length(plan_.delegates());
  ES_CHECK_OR_RETURN_ERROR(call.delegate_index() < num_delegates, Error::InvalidProgram,
                           "instruction %zu names delegate %u of %zu", index, call.delegate_index(),
                           num_delegates);
  out->delegate = call.delegate_index();
  writes_ints_ = false;
  out->what = at(*plan_.delegates(), call.delegate_index())->id()->c_str();
  // init_delegates() ran first, so the backend can say from its own graph where outputs begin.
  const Delegate& delegate = method_.delegates_[out->delegate];
  Result<size_t> num_inputs = delegate.backend->num_inputs(delegate.handle);
  if (!num_inputs.ok()) {
    return num_inputs.status().WithContext("instruction %zu (delegate '%s')", index, out->what);
  }
  out->num_inputs = *num_inputs;
  return Status();
}

// The instruction's arguments as pointers into values_; a delegate takes tensors only, and every
// arg past the call's inputs must be memory the call may write.
Status Method::Loader::bind_arguments(size_t index, const flatbuffers::Vector<uint32_t>* args,
                                      Instruction* out) {
  const size_t num_values = method_.values_.size();
  out->args_begin = method_.args_.size();
  out->refresh_begin = method_.refreshes_.size();
  const size_t n = length(args);
  ES_CHECK_OR_RETURN_ERROR(n >= out->num_inputs, Error::InvalidProgram,
                           "instruction %zu (%s) has %zu arguments, fewer than its %zu inputs",
                           index, out->what, n, out->num_inputs);
  for (size_t a = 0; a < n; ++a) {
    const uint32_t value = at(*args, a);
    ES_CHECK_OR_RETURN_ERROR(value < num_values, Error::InvalidProgram,
                             "instruction %zu argument %zu names value %u of %zu", index, a, value,
                             num_values);
    if (out->kernel == nullptr) {
      ES_CHECK_OR_RETURN_ERROR(method_.values_[value].is_tensor(), Error::InvalidProgram,
                               "instruction %zu passes a non-tensor to delegate '%s'", index,
                               out->what);
    }
    if (a >= out->num_inputs) {
      ES_RETURN_IF_ERROR(writes_ints_ ? check_writable_int(index, a, value, *out)
                                      : check_writable(index, a, value, *out));
    }
    add_refreshes(value);
    method_.args_.push_back(&method_.values_[value]);
  }
  out->args_count = n;
  out->refresh_count = method_.refreshes_.size() - out->refresh_begin;
  return Status();
}

void Method::Loader::add_refreshes(uint32_t value) {
  const schema::SymIntList* list = at(*plan_.values(), value)->val_as_SymIntList();
  if (list == nullptr) return;
  int64_t* items = method_.sym_int_items_.data() + sym_list_begin_[value];
  for (size_t i = 0; i < length(list->items()); ++i) {
    method_.refreshes_.push_back({items + i, &method_.values_[at(*list->items(), i)]});
  }
}

// A size kernel's output is an Int of this plan that no other call writes and the caller never
// sees (not an input or output of the method); nothing else is ever written through it.
Status Method::Loader::check_writable_int(size_t index, size_t arg, uint32_t value,
                                          const Instruction& out) {
  ES_CHECK_OR_RETURN_ERROR(at(*plan_.values(), value)->val_type() == schema::KernelTypes_Int,
                           Error::InvalidProgram,
                           "instruction %zu (%s) writes argument %zu, value %u, which is not an "
                           "Int",
                           index, out.what, arg, value);
  ES_CHECK_OR_RETURN_ERROR(!int_written_[value], Error::InvalidProgram,
                           "instruction %zu (%s) writes value %u, which another call writes", index,
                           out.what, value);
  for (size_t input : method_.inputs_) {
    ES_CHECK_OR_RETURN_ERROR(input != value, Error::InvalidProgram,
                             "instruction %zu (%s) writes value %u, an input of the method", index,
                             out.what, value);
  }
  int_written_[value] = true;
  return Status();
}

// An output arg is written in place: it must be a tensor in planned memory. A constant may be
// mapped read-only (a crash) or shared with other methods and programs (silent corruption); the
// exporter never writes a method's inputs, which a caller may fill once and execute many times.
Status Method::Loader::check_writable(size_t index, size_t arg, uint32_t value,
                                      const Instruction& out) {
  const schema::Tensor* tensor = at(*plan_.values(), value)->val_as_Tensor();
  ES_CHECK_OR_RETURN_ERROR(tensor != nullptr, Error::InvalidProgram,
                           "instruction %zu (%s) writes argument %zu, value %u, which is not a "
                           "tensor",
                           index, out.what, arg, value);
  ES_CHECK_OR_RETURN_ERROR(tensor->constant_segment() < 0 && tensor->external_key() == nullptr,
                           Error::InvalidProgram,
                           "instruction %zu (%s) writes argument %zu, value %u, which is a "
                           "constant",
                           index, out.what, arg, value);
  for (size_t input : method_.inputs_) {
    ES_CHECK_OR_RETURN_ERROR(input != value, Error::InvalidProgram,
                             "instruction %zu (%s) writes argument %zu, value %u, which is an "
                             "input of the method",
                             index, out.what, arg, value);
  }
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare
