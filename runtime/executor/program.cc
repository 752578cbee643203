#include "edgeshare/runtime/executor/program.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "edgeshare/runtime/executor/pte_data_map.h"
#include "edgeshare/runtime/format/file_header.h"
#include "edgeshare/runtime/format/segmented_data_map.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"
#include "edgeshare/schema/program_generated.h"

namespace edgeshare {
namespace runtime {
namespace {

// A hostile file must not make us reserve absurd memory: one planned buffer is at most 8 GiB.
constexpr uint64_t kMaxPlannedBuffer = uint64_t{8} << 30;
constexpr size_t kMaxOperatorName = 96;

bool SameSizes(Span<const int32_t> a, const flatbuffers::Vector<int32_t>* b) {
  const size_t b_size = b == nullptr ? 0 : b->size();
  if (a.size() != b_size) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b->Get(static_cast<flatbuffers::uoffset_t>(i))) return false;
  }
  return true;
}

}  // namespace

Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

Result<Program> Program::load(const DataLoader* loader) {
  ES_CHECK_OR_RETURN_ERROR(loader != nullptr, Error::InvalidArgument, "Program::load: null loader");
  const char* file = loader->name();
  ES_ASSIGN_OR_RETURN(const FileHeader header,
                      read_file_header(*loader, kProgramMagic, ".pte", Error::InvalidProgram));
  Program program;
  program.loader_ = loader;
  ES_ASSIGN_OR_RETURN(program.flatbuffer_,
                      loader->load(static_cast<size_t>(header.flatbuffer_offset),
                                   static_cast<size_t>(header.flatbuffer_size)));
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(program.flatbuffer_.data()),
                                 program.flatbuffer_.size());
  ES_CHECK_OR_RETURN_ERROR(schema::VerifyProgramBuffer(verifier), Error::InvalidProgram,
                           "%s: the Program flatbuffer is malformed", file);
  const schema::Program* root = schema::GetProgram(program.flatbuffer_.data());
  ES_CHECK_OR_RETURN_ERROR(root->version() == kFormatVersion, Error::InvalidProgram,
                           "%s: Program version %u is not supported", file, root->version());
  if (root->segments() != nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < root->segments()->size(); ++i) {
      ES_RETURN_IF_ERROR(check_segment(root->segments(), i, header.segment_data_size, file,
                                       "the program", Error::InvalidProgram));
    }
  }
  ES_RETURN_IF_ERROR(SegmentedDataMap::validate(root->named_data(), root->segments(),
                                                header.segment_data_size, file,
                                                Error::InvalidProgram));
  const auto* plans = root->execution_plans();
  if (plans != nullptr) {
    for (flatbuffers::uoffset_t i = 0; i < plans->size(); ++i) {
      for (flatbuffers::uoffset_t j = 0; j < i; ++j) {
        ES_CHECK_OR_RETURN_ERROR(plans->Get(i)->name()->str() != plans->Get(j)->name()->str(),
                                 Error::InvalidProgram, "%s: two methods are named '%s'", file,
                                 plans->Get(i)->name()->c_str());
      }
    }
  }
  program.root_ = root;
  program.segment_base_offset_ = header.segment_base_offset;
  program.segment_data_size_ = header.segment_data_size;
  if (root->named_data() != nullptr && root->named_data()->size() > 0) {
    program.named_data_ = std::make_unique<PteDataMap>(root->named_data(), root->segments(),
                                                       header.segment_base_offset, loader);
  }
  return program;
}

size_t Program::num_methods() const {
  return root_->execution_plans() == nullptr ? 0 : root_->execution_plans()->size();
}

Result<const char*> Program::get_method_name(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < num_methods(), Error::OutOfRange,
                           "%s has %zu methods; there is no method %zu", name(), num_methods(),
                           index);
  return root_->execution_plans()->Get(static_cast<flatbuffers::uoffset_t>(index))->name()->c_str();
}

const NamedDataMap* Program::named_data() const { return named_data_.get(); }

Result<Method> Program::load_method(const char* method_name,
                                    const NamedDataMap* external_data) const {
  ES_CHECK_OR_RETURN_ERROR(method_name != nullptr, Error::InvalidArgument,
                           "load_method: null method name");
  const schema::ExecutionPlan* plan = nullptr;
  for (size_t i = 0; i < num_methods(); ++i) {
    const auto* candidate = root_->execution_plans()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (std::strcmp(candidate->name()->c_str(), method_name) == 0) plan = candidate;
  }
  ES_CHECK_OR_RETURN_ERROR(plan != nullptr, Error::NotFound, "%s has no method '%s'", name(),
                           method_name);
  Method method;
  method.name_ = method_name;
  Status status = build_method(plan, external_data, &method);
  if (!status.ok()) {
    return status.WithContext("failed to load method '%s' from %s", method_name, name());
  }
  return method;
}

Status Program::build_method(const schema::ExecutionPlan* plan, const NamedDataMap* external,
                             Method* method) const {
  const char* file = name();
  const auto* segments = root_->segments();
  const size_t num_segments = segments == nullptr ? 0 : segments->size();

  // The map delegates see: the program's own named data plus the external files.
  if (named_data_ != nullptr || external != nullptr) {
    ES_ASSIGN_OR_RETURN(MergedDataMap merged,
                        MergedDataMap::create({named_data_.get(), external}));
    method->data_map_ = std::make_unique<MergedDataMap>(std::move(merged));
  }

  // Planned memory.
  const auto* buffer_sizes = plan->non_const_buffer_sizes();
  const size_t num_buffers = buffer_sizes == nullptr ? 0 : buffer_sizes->size();
  std::vector<uint64_t> sizes(num_buffers, 0);
  for (size_t i = 0; i < num_buffers; ++i) {
    const uint64_t size = buffer_sizes->Get(static_cast<flatbuffers::uoffset_t>(i));
    ES_CHECK_OR_RETURN_ERROR(size <= kMaxPlannedBuffer, Error::InvalidProgram,
                             "planned buffer %zu of %llu bytes is larger than %llu", i,
                             static_cast<unsigned long long>(size),
                             static_cast<unsigned long long>(kMaxPlannedBuffer));
    sizes[i] = size;
    void* memory = nullptr;
    if (size > 0) {
      // Zeroed so that nothing uninitialised is ever read.
      memory = std::calloc(1, static_cast<size_t>(size));
      ES_CHECK_OR_RETURN_ERROR(memory != nullptr, Error::MemoryAllocationFailed,
                               "cannot allocate planned buffer %zu of %llu bytes", i,
                               static_cast<unsigned long long>(size));
    }
    method->buffers_.emplace_back(static_cast<uint8_t*>(memory));
  }

  // Values.
  const auto* values = plan->values();
  const size_t num_values = values == nullptr ? 0 : values->size();
  method->values_.resize(num_values);
  for (size_t v = 0; v < num_values; ++v) {
    const schema::EValue* value = values->Get(static_cast<flatbuffers::uoffset_t>(v));
    EValue& out = method->values_[v];
    switch (value->val_type()) {
      case schema::KernelTypes_NONE:
      case schema::KernelTypes_Null:
        out = EValue();
        break;
      case schema::KernelTypes_Int:
        out = EValue(static_cast<int64_t>(value->val_as_Int()->int_val()));
        break;
      case schema::KernelTypes_Double:
        out = EValue(value->val_as_Double()->double_val());
        break;
      case schema::KernelTypes_Bool:
        out = EValue(value->val_as_Bool()->bool_val());
        break;
      case schema::KernelTypes_IntList: {
        const auto* items = value->val_as_IntList()->items();
        out = EValue(items == nullptr ? Span<const int64_t>()
                                      : Span<const int64_t>(items->data(), items->size()));
        break;
      }
      case schema::KernelTypes_String: {
        const auto* text = value->val_as_String()->string_val();
        out = EValue(text == nullptr ? "" : text->c_str());
        break;
      }
      case schema::KernelTypes_Tensor: {
        const schema::Tensor* t = value->val_as_Tensor();
        char what[64];
        std::snprintf(what, sizeof(what), "value %zu", v);
        const auto type = static_cast<ScalarType>(t->scalar_type());
        ES_CHECK_OR_RETURN_ERROR(is_known(type), Error::InvalidProgram,
                                 "%s has unknown scalar type %d", what,
                                 static_cast<int>(t->scalar_type()));
        const auto* tsizes = t->sizes();
        const size_t rank = tsizes == nullptr ? 0 : tsizes->size();
        ES_CHECK_OR_RETURN_ERROR(rank <= Tensor::kMaxDims, Error::InvalidProgram,
                                 "%s has %zu dims (at most %zu)", what, rank, Tensor::kMaxDims);
        size_t nbytes = element_size(type);
        for (size_t d = 0; d < rank; ++d) {
          const int32_t s = tsizes->Get(static_cast<flatbuffers::uoffset_t>(d));
          ES_CHECK_OR_RETURN_ERROR(s >= 0 && (s == 0 || nbytes <= SIZE_MAX / s),
                                   Error::InvalidProgram, "%s has a bad size %d", what, s);
          nbytes *= static_cast<size_t>(s);
        }
        Span<const int32_t> span_sizes(tsizes == nullptr ? nullptr : tsizes->data(), rank);
        void* data = nullptr;
        const bool external_constant = t->external_key() != nullptr;
        const bool segment_constant = t->constant_segment() >= 0;
        ES_CHECK_OR_RETURN_ERROR(!(external_constant && segment_constant), Error::InvalidProgram,
                                 "%s is both an external and an inline constant", what);
        if (segment_constant) {
          const auto index = static_cast<size_t>(t->constant_segment());
          ES_CHECK_OR_RETURN_ERROR(index < num_segments, Error::InvalidProgram,
                                   "%s names segment %zu of %zu", what, index, num_segments);
          const schema::DataSegment* segment = segments->Get(static_cast<flatbuffers::uoffset_t>(index));
          ES_CHECK_OR_RETURN_ERROR(segment->size() == nbytes, Error::InvalidProgram,
                                   "%s needs %zu bytes but its segment holds %llu", what, nbytes,
                                   static_cast<unsigned long long>(segment->size()));
          ES_ASSIGN_OR_RETURN(FreeableBuffer bytes,
                              loader_->load(static_cast<size_t>(segment_base_offset_ + segment->offset()),
                                            nbytes));
          data = const_cast<void*>(bytes.data());
          method->constants_.push_back(std::move(bytes));
        } else if (external_constant) {
          const char* key = t->external_key()->c_str();
          ES_CHECK_OR_RETURN_ERROR(external != nullptr, Error::NotFound,
                                   "constant '%s' lives in a data file, but none was given", key);
          Result<TensorLayout> layout = external->get_tensor_layout(key);
          ES_CHECK_OR_RETURN_ERROR(layout.ok(), layout.error(), "constant '%s': %s", key,
                                   layout.status().message());
          ES_CHECK_OR_RETURN_ERROR(layout->scalar_type == type && SameSizes(layout->sizes, tsizes),
                                   Error::InvalidData,
                                   "constant '%s' in %s does not have the dtype and shape %s expects",
                                   key, external->name(), file);
          ES_ASSIGN_OR_RETURN(FreeableBuffer bytes, external->get_data(key));
          ES_CHECK_OR_RETURN_ERROR(bytes.size() == nbytes, Error::InvalidData,
                                   "constant '%s' in %s has %zu bytes, expected %zu", key,
                                   external->name(), bytes.size(), nbytes);
          data = const_cast<void*>(bytes.data());
          method->constants_.push_back(std::move(bytes));
        } else {
          const schema::AllocationInfo* allocation = t->allocation();
          ES_CHECK_OR_RETURN_ERROR(allocation != nullptr || nbytes == 0, Error::InvalidProgram,
                                   "%s has no memory plan", what);
          if (allocation != nullptr) {
            const uint32_t id = allocation->memory_id();
            const uint64_t offset = allocation->offset();
            ES_CHECK_OR_RETURN_ERROR(id < num_buffers && offset <= sizes[id] &&
                                         nbytes <= sizes[id] - offset,
                                     Error::InvalidProgram,
                                     "%s at buffer %u offset %llu (+%zu bytes) is outside the plan",
                                     what, id, static_cast<unsigned long long>(offset), nbytes);
            ES_CHECK_OR_RETURN_ERROR(offset % element_size(type) == 0, Error::InvalidProgram,
                                     "%s at offset %llu is misaligned", what,
                                     static_cast<unsigned long long>(offset));
            data = method->buffers_[id].get() + offset;
          }
        }
        out = EValue(Tensor(type, span_sizes, data));
        break;
      }
      default:
        return Status::Format(Error::InvalidProgram, "value %zu has unknown kind %d", v,
                              static_cast<int>(value->val_type()));
    }
  }

  // Inputs and outputs.
  auto read_indices = [&](const flatbuffers::Vector<uint32_t>* indices, const char* what,
                          std::vector<size_t>* out) -> Status {
    const size_t n = indices == nullptr ? 0 : indices->size();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t index = indices->Get(static_cast<flatbuffers::uoffset_t>(i));
      ES_CHECK_OR_RETURN_ERROR(index < num_values, Error::InvalidProgram,
                               "%s %zu names value %u of %zu", what, i, index, num_values);
      out->push_back(index);
    }
    return Status();
  };
  ES_RETURN_IF_ERROR(read_indices(plan->inputs(), "input", &method->inputs_));
  ES_RETURN_IF_ERROR(read_indices(plan->outputs(), "output", &method->outputs_));

  // Instructions: arguments first (so args_ never reallocates once pointers are taken).
  const auto* instructions = plan->instructions();
  const size_t num_instructions = instructions == nullptr ? 0 : instructions->size();
  const auto* operators = plan->operators();
  const size_t num_operators = operators == nullptr ? 0 : operators->size();
  const auto* delegates = plan->delegates();
  const size_t num_delegates = delegates == nullptr ? 0 : delegates->size();
  size_t total_args = 0;
  for (size_t i = 0; i < num_instructions; ++i) {
    const schema::Instruction* instruction = instructions->Get(static_cast<flatbuffers::uoffset_t>(i));
    const flatbuffers::Vector<uint32_t>* args = nullptr;
    if (const auto* call = instruction->instr_args_as_KernelCall()) args = call->args();
    if (const auto* call = instruction->instr_args_as_DelegateCall()) args = call->args();
    ES_CHECK_OR_RETURN_ERROR(instruction->instr_args_type() != schema::InstructionArguments_NONE,
                             Error::InvalidProgram, "instruction %zu is empty", i);
    total_args += args == nullptr ? 0 : args->size();
  }
  method->args_.reserve(total_args);

  // Delegates: initialised once each, in order.
  for (size_t d = 0; d < num_delegates; ++d) {
    const schema::BackendDelegate* delegate = delegates->Get(static_cast<flatbuffers::uoffset_t>(d));
    const char* id = delegate->id()->c_str();
    const BackendInterface* backend = get_backend(id);
    ES_CHECK_OR_RETURN_ERROR(backend != nullptr, Error::NotFound,
                             "backend '%s' is not linked into this binary", id);
    ES_CHECK_OR_RETURN_ERROR(backend->is_available(), Error::NotSupported,
                             "backend '%s' is not available on this machine", id);
    const uint32_t segment_index = delegate->segment_index();
    ES_CHECK_OR_RETURN_ERROR(segment_index < num_segments, Error::InvalidProgram,
                             "delegate %zu names segment %u of %zu", d, segment_index,
                             num_segments);
    const schema::DataSegment* segment = segments->Get(segment_index);
    ES_ASSIGN_OR_RETURN(FreeableBuffer processed,
                        loader_->load(static_cast<size_t>(segment_base_offset_ + segment->offset()),
                                      static_cast<size_t>(segment->size())));
    std::vector<CompileSpec> specs;
    if (delegate->compile_specs() != nullptr) {
      for (const schema::CompileSpec* spec : *delegate->compile_specs()) {
        CompileSpec s;
        s.key = spec->key()->c_str();
        if (spec->value() != nullptr) {
          s.value = Span<const uint8_t>(spec->value()->data(), spec->value()->size());
        }
        specs.push_back(s);
      }
    }
    BackendInitContext context(method->data_map_.get(), method->name());
    Result<DelegateHandle*> handle =
        backend->init(context, &processed, Span<const CompileSpec>(specs.data(), specs.size()));
    if (!handle.ok()) {
      return handle.status().WithContext("backend '%s' could not initialise delegate %zu", id, d);
    }
    Method::Delegate entry;
    entry.backend = backend;
    entry.handle = *handle;
    method->delegates_.push_back(entry);
  }

  for (size_t i = 0; i < num_instructions; ++i) {
    const schema::Instruction* instruction = instructions->Get(static_cast<flatbuffers::uoffset_t>(i));
    Method::Instruction out;
    const flatbuffers::Vector<uint32_t>* args = nullptr;
    if (const auto* call = instruction->instr_args_as_KernelCall()) {
      ES_CHECK_OR_RETURN_ERROR(call->op_index() < num_operators, Error::InvalidProgram,
                               "instruction %zu names operator %u of %zu", i, call->op_index(),
                               num_operators);
      const schema::Operator* op = operators->Get(call->op_index());
      char full_name[kMaxOperatorName];
      const char* overload = op->overload() == nullptr ? "" : op->overload()->c_str();
      std::snprintf(full_name, sizeof(full_name), "%s%s%s", op->name()->c_str(),
                    overload[0] != '\0' ? "." : "", overload);
      out.kernel = get_kernel(full_name);
      ES_CHECK_OR_RETURN_ERROR(out.kernel != nullptr, Error::NotSupported,
                               "operator '%s' has no kernel in this runtime", full_name);
      out.what = op->name()->c_str();
      args = call->args();
    } else {
      const auto* delegate_call = instruction->instr_args_as_DelegateCall();
      ES_CHECK_OR_RETURN_ERROR(delegate_call->delegate_index() < num_delegates, Error::InvalidProgram,
                               "instruction %zu names delegate %u of %zu", i,
                               delegate_call->delegate_index(), num_delegates);
      out.delegate = delegate_call->delegate_index();
      out.what = delegates->Get(delegate_call->delegate_index())->id()->c_str();
      args = delegate_call->args();
    }
    out.args_begin = method->args_.size();
    const size_t n = args == nullptr ? 0 : args->size();
    for (size_t a = 0; a < n; ++a) {
      const uint32_t index = args->Get(static_cast<flatbuffers::uoffset_t>(a));
      ES_CHECK_OR_RETURN_ERROR(index < num_values, Error::InvalidProgram,
                               "instruction %zu argument %zu names value %u of %zu", i, a, index,
                               num_values);
      if (out.kernel == nullptr) {
        ES_CHECK_OR_RETURN_ERROR(method->values_[index].is_tensor(), Error::InvalidProgram,
                                 "instruction %zu passes a non-tensor to delegate '%s'", i,
                                 out.what);
      }
      method->args_.push_back(&method->values_[index]);
    }
    out.args_count = n;
    method->instructions_.push_back(out);
  }
  return Status();
}

}  // namespace runtime
}  // namespace edgeshare
