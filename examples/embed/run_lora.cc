#include "run_lora.h"

#include <utility>

namespace embed_example {

using namespace edgeshare::runtime;  // NOLINT: an example reads better without prefixes.

Result<LoraProgram> LoraProgram::load(const char* pte, const char* ptd) {
  LoraProgram lora;
  ES_ASSIGN_OR_RETURN(lora.foundation_, DataFile::open(ptd));
  ES_ASSIGN_OR_RETURN(FileDataLoader loader, FileDataLoader::from(pte));
  lora.loader_ = std::make_unique<FileDataLoader>(std::move(loader));
  ES_ASSIGN_OR_RETURN(Program program, Program::load(lora.loader_.get()));
  lora.program_ = std::make_unique<Program>(std::move(program));
  ES_ASSIGN_OR_RETURN(Method forward, lora.program_->load_method("forward", &lora.foundation_->map()));
  lora.forward_ = std::make_unique<Method>(std::move(forward));
  return lora;
}

Result<double> LoraProgram::run(int32_t tokens) {
  ids_.resize(static_cast<size_t>(tokens));
  for (int32_t i = 0; i < tokens; ++i) ids_[static_cast<size_t>(i)] = i;
  ES_RETURN_IF_ERROR(forward_->set_input(0, Tensor(ScalarType::Long, {1, tokens}, ids_.data())));
  ES_RETURN_IF_ERROR(forward_->execute());
  ES_ASSIGN_OR_RETURN(Tensor logits, forward_->output(0));
  double sum = 0;
  for (size_t i = 0; i < logits.numel(); ++i) sum += logits.data<float>()[i];
  return sum;
}

}  // namespace embed_example
