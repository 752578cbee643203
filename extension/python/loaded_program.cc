#include "edgeshare/extension/python/loaded_program.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "edgeshare/tools/adapter_swap.h"

namespace edgeshare {
namespace python {

using runtime::DataFile;
using runtime::Error;
using runtime::MergedDataMap;
using runtime::Method;
using runtime::MmapDataLoader;
using runtime::NamedDataMap;
using runtime::Program;
using runtime::Result;
using runtime::Status;
using runtime::Tensor;

namespace {

TensorSpec SpecOf(const Result<Tensor>& tensor, const Result<uint8_t>& dynamic) {
  TensorSpec spec;
  if (!tensor.ok()) return spec;  // Not a tensor: nothing more to say about it.
  spec.is_tensor = true;
  spec.type = tensor->scalar_type();
  for (int32_t size : tensor->sizes()) spec.sizes.push_back(size);
  for (size_t d = 0; d < spec.sizes.size() && dynamic.ok(); ++d) {
    if ((*dynamic >> d) & 1) spec.dynamic_dims.push_back(static_cast<int64_t>(d));
  }
  return spec;
}

OwnedTensor CopyOut(const Tensor& tensor) {
  OwnedTensor out;
  out.type = tensor.scalar_type();
  for (int32_t size : tensor.sizes()) out.sizes.push_back(size);
  out.nbytes = tensor.nbytes();
  // At least one byte, so that an empty output still has a buffer to hand over.
  out.data = std::make_unique<uint8_t[]>(out.nbytes > 0 ? out.nbytes : 1);
  if (out.nbytes > 0) std::memcpy(out.data.get(), tensor.const_data(), out.nbytes);
  return out;
}

}  // namespace

LoadedMethod::LoadedMethod(Method method, std::string program_name)
    : method_(std::move(method)), program_name_(std::move(program_name)) {
  for (size_t i = 0; i < method_.num_inputs(); ++i) {
    inputs_.push_back(SpecOf(method_.input(i), method_.input_dynamic_dims(i)));
  }
  for (size_t i = 0; i < method_.num_outputs(); ++i) {
    outputs_.push_back(SpecOf(method_.output(i), method_.output_dynamic_dims(i)));
  }
  Result<generation::TokenBounds> bounds = generation::token_bounds(method_);
  if (bounds.ok()) token_bounds_ = *bounds;
  Result<generation::Generator> generator = generation::Generator::create(&method_);
  if (generator.ok()) {
    generator_.emplace(std::move(generator).get());
  } else {
    generator_error_ = generator.status();
  }
}

Result<generation::Generation> LoadedMethod::generate(runtime::Span<const int64_t> prompt,
                                                      size_t max_new_tokens, int64_t eos) {
  generation::GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  if (eos != -1) options.stop_ids.push_back(eos);
  return generate(prompt, options);
}

Result<generation::Generation> LoadedMethod::generate(runtime::Span<const int64_t> prompt,
                                                      const generation::GenerateOptions& options) {
  if (!generator_.has_value()) return generator_error_.WithContext("%s", program_name_.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  ++epoch_;
  Result<generation::Generation> out = generator_->generate(prompt, options);
  if (!out.ok()) return out.status().WithContext("%s", program_name_.c_str());
  return out;
}

Result<uint64_t> LoadedMethod::start(runtime::Span<const int64_t> prompt,
                                     const generation::GenerateOptions& options) {
  if (!generator_.has_value()) return generator_error_.WithContext("%s", program_name_.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t ticket = ++epoch_;
  const Status started = generator_->start(prompt, options);
  if (!started.ok()) return started.WithContext("%s", program_name_.c_str());
  return ticket;
}

Result<int64_t> LoadedMethod::next(uint64_t ticket) {
  ES_CHECK_OR_RETURN_ERROR(generator_.has_value(), Error::InvalidState,
                           "method '%s' of %s does not generate", name(), program_name_.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  ES_CHECK_OR_RETURN_ERROR(ticket == epoch_, Error::InvalidState,
                           "the generation streamed from method '%s' of %s was interrupted by "
                           "another use of the method",
                           name(), program_name_.c_str());
  if (generator_->done()) return static_cast<int64_t>(-1);
  Result<int64_t> token = generator_->next();
  if (!token.ok()) return token.status().WithContext("%s", program_name_.c_str());
  return token;
}

generation::Generation LoadedMethod::timings() {
  generation::Generation out;
  if (!generator_.has_value()) return out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.prefill_ms = generator_->prefill_ms();
  out.decode_tokens_per_s = generator_->decode_tokens_per_s();
  out.finish_reason = generator_->finish_reason();
  out.prefilled_tokens = generator_->prefilled_tokens();
  return out;
}

size_t LoadedMethod::cached_length() {
  if (!generator_.has_value()) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  return generator_->cached_length();
}

Result<std::vector<OwnedTensor>> LoadedMethod::run(const std::vector<Tensor>& inputs) {
  ES_CHECK_OR_RETURN_ERROR(inputs.size() == method_.num_inputs(), Error::InvalidArgument,
                           "method '%s' of %s takes %zu input(s), not %zu", name(),
                           program_name_.c_str(), method_.num_inputs(), inputs.size());
  if (token_bounds_.has_value()) {
    const Status checked = generation::check_token_inputs(
        *token_bounds_, runtime::Span<const Tensor>(inputs.data(), inputs.size()), name());
    if (!checked.ok()) return checked.WithContext("%s", program_name_.c_str());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++epoch_;
  if (generator_.has_value()) generator_->forget_cache();  // The run changes the KV cache.
  for (size_t i = 0; i < inputs.size(); ++i) {
    Status status = method_.set_input(i, inputs[i]);
    if (!status.ok()) return status.WithContext("%s", program_name_.c_str());
  }
  ES_RETURN_IF_ERROR(method_.execute());
  std::vector<OwnedTensor> outputs;
  outputs.reserve(method_.num_outputs());
  for (size_t i = 0; i < method_.num_outputs(); ++i) {
    ES_ASSIGN_OR_RETURN(Tensor output, method_.output(i));
    outputs.push_back(CopyOut(output));
  }
  return outputs;
}

Status LoadedMethod::rebind(const runtime::NamedDataMap& data) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++epoch_;
  if (generator_.has_value()) generator_->forget_cache();  // Rebinding resets the state.
  return method_.rebind_data(data);
}

Status LoadedMethod::rebind(std::shared_ptr<const runtime::NamedDataMap> data) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++epoch_;
  if (generator_.has_value()) generator_->forget_cache();  // Rebinding resets the state.
  return method_.rebind_data(std::move(data));
}

Result<std::shared_ptr<LoadedProgram>> LoadedProgram::load(
    const std::string& path, std::vector<std::shared_ptr<const DataFile>> data_files,
    const std::vector<std::string>& only_methods, size_t threads) {
  std::shared_ptr<LoadedProgram> loaded(new LoadedProgram());
  loaded->path_ = path;
  ES_ASSIGN_OR_RETURN(runtime::Threads made, runtime::Threads::create(threads));
  loaded->threads_ = std::make_unique<runtime::Threads>(std::move(made));
  loaded->data_files_ = std::move(data_files);
  std::vector<const runtime::NamedDataMap*> maps;
  for (const std::shared_ptr<const DataFile>& file : loaded->data_files_) {
    ES_CHECK_OR_RETURN_ERROR(file != nullptr, Error::InvalidArgument,
                             "a data file given for %s is not open", path.c_str());
    maps.push_back(&file->map());
  }
  if (!maps.empty()) {
    ES_ASSIGN_OR_RETURN(MergedDataMap merged, MergedDataMap::create(maps));
    loaded->external_ = std::make_unique<MergedDataMap>(std::move(merged));
  }
  ES_ASSIGN_OR_RETURN(MmapDataLoader loader, MmapDataLoader::from(path.c_str()));
  loaded->loader_ = std::make_unique<MmapDataLoader>(std::move(loader));
  ES_ASSIGN_OR_RETURN(Program program, Program::load(loaded->loader_.get()));
  loaded->program_ = std::make_unique<Program>(std::move(program));
  ES_RETURN_IF_ERROR(
      tools::check_foundation(loaded->program_->foundation_digest(), path, loaded->data_files_));
  std::vector<std::string> names;
  std::string available;
  for (size_t m = 0; m < loaded->program_->num_methods(); ++m) {
    ES_ASSIGN_OR_RETURN(const char* name, loaded->program_->get_method_name(m));
    names.emplace_back(name);
    available += (available.size() ? ", " : "") + names.back();
  }
  for (const std::string& wanted : only_methods) {
    ES_CHECK_OR_RETURN_ERROR(std::find(names.begin(), names.end(), wanted) != names.end(),
                             Error::InvalidArgument, "%s has no method '%s' (methods: %s)",
                             path.c_str(), wanted.c_str(), available.c_str());
  }
  for (size_t m = 0; m < names.size(); ++m) {
    if (!only_methods.empty() &&
        std::find(only_methods.begin(), only_methods.end(), names[m]) == only_methods.end()) {
      continue;
    }
    ES_ASSIGN_OR_RETURN(Method method,
                        loaded->program_->load_method(names[m].c_str(), loaded->external_.get(),
                                                      loaded->threads_.get()));
    loaded->methods_.push_back(
        std::make_unique<LoadedMethod>(std::move(method), loaded->program_->name()));
  }
  return loaded;
}

Result<LoadedMethod*> LoadedProgram::method(const std::string& name) {
  std::string available;
  for (const std::unique_ptr<LoadedMethod>& method : methods_) {
    if (name == method->name()) return method.get();
    available += (available.empty() ? "" : ", ") + std::string(method->name());
  }
  return Status::Format(Error::NotFound, "%s has no method '%s' (methods: %s)", program_->name(),
                        name.c_str(), available.c_str());
}

std::shared_ptr<const DataFile> LoadedProgram::adapter() const {
  std::lock_guard<std::mutex> lock(adapter_mutex_);
  return adapter_;
}

Status LoadedProgram::bind_adapter(std::shared_ptr<const DataFile> adapter) {
  ES_CHECK_OR_RETURN_ERROR(adapter != nullptr, Error::InvalidArgument,
                           "bind_adapter on %s: the adapter file is not open", path_.c_str());
  std::lock_guard<std::mutex> lock(adapter_mutex_);
  ES_ASSIGN_OR_RETURN(const NamedDataMap* replaced,
                      tools::replaced_adapter(*adapter, adapter_.get(), data_files_, path_));
  ES_RETURN_IF_ERROR(
      tools::check_same_adapter_keys(adapter->map(), *replaced, adapter->path(), path_));
  ES_RETURN_IF_ERROR(tools::check_adapter_foundation(*adapter, program_->foundation_digest(), path_,
                                                     data_files_));
  size_t rebound = 0;
  Status none = Status();
  for (size_t m = 0; m < methods_.size(); ++m) {
    // Remembered per file: an adapter bound again is switched to by pointer.
    Status status =
        methods_[m]->rebind(std::shared_ptr<const NamedDataMap>(adapter, &adapter->map()));
    if (status.code() == Error::NotFound) {  // This method reads none of the adapter's keys.
      if (none.ok()) none = status;
      continue;
    }
    if (!status.ok()) {
      // All or nothing: the methods already rebound go back to the bytes they had.
      for (size_t back = 0; back < m; ++back) (void)methods_[back]->rebind(*replaced);
      return status;
    }
    ++rebound;
  }
  if (rebound == 0) return none;
  adapter_ = std::move(adapter);
  return Status();
}

}  // namespace python
}  // namespace edgeshare
