#include "edgeshare/runtime/executor/program.h"

#include <utility>

#include "edgeshare/runtime/executor/program_image.h"
#include "edgeshare/schema/program_generated.h"

namespace edgeshare {
namespace runtime {

Program::Program(std::shared_ptr<const ProgramImage> image) : image_(std::move(image)) {}
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

Result<Program> Program::load(const DataLoader* loader) {
  ES_ASSIGN_OR_RETURN(ProgramImage image, ProgramImage::load(loader));
  return Program(std::make_shared<ProgramImage>(std::move(image)));
}

size_t Program::num_methods() const { return image_->num_methods(); }

Result<const char*> Program::get_method_name(size_t index) const {
  ES_CHECK_OR_RETURN_ERROR(index < num_methods(), Error::OutOfRange,
                           "%s has %zu methods; there is no method %zu", name(), num_methods(),
                           index);
  return image_->method(index).name()->c_str();
}

const NamedDataMap* Program::named_data() const { return image_->named_data(); }

const char* Program::name() const { return image_->name(); }

const Digest* Program::foundation_digest() const { return image_->foundation_digest(); }

Result<Method> Program::load_method(const char* method_name, const NamedDataMap* external_data,
                                    const Threads* threads) const {
  ES_CHECK_OR_RETURN_ERROR(method_name != nullptr, Error::InvalidArgument,
                           "load_method: null method name");
  const schema::ExecutionPlan* plan = image_->find_method(method_name);
  ES_CHECK_OR_RETURN_ERROR(plan != nullptr, Error::NotFound, "%s has no method '%s'", name(),
                           method_name);
  return Method::load(image_, *plan, external_data, threads);
}

}  // namespace runtime
}  // namespace edgeshare
