#include "run_lora.h"

#include <vector>

#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace embed_example {

using namespace edgeshare::runtime;  // NOLINT: an example reads better without prefixes.

Result<double> run_lora(const char* pte, const char* ptd) {
  ES_ASSIGN_OR_RETURN(auto foundation, DataFile::open(ptd));
  ES_ASSIGN_OR_RETURN(FileDataLoader loader, FileDataLoader::from(pte));
  ES_ASSIGN_OR_RETURN(Program program, Program::load(&loader));
  ES_ASSIGN_OR_RETURN(Method forward, program.load_method("forward", &foundation->map()));
  ES_ASSIGN_OR_RETURN(Tensor input, forward.input(0));
  for (size_t i = 0; i < input.numel(); ++i) input.data<float>()[i] = 1.0f;
  ES_RETURN_IF_ERROR(forward.execute());
  ES_ASSIGN_OR_RETURN(Tensor output, forward.output(0));
  double sum = 0;
  for (size_t i = 0; i < output.numel(); ++i) sum += output.data<float>()[i];
  return sum;
}

}  // namespace embed_example
