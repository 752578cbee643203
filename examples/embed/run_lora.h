// What an embedder writes: LoRA programs loaded over one shared foundation data file, then run.
//
//   ES_ASSIGN_OR_RETURN(auto chat, embed_example::LoraProgram::load("chat.pte", "foundation.ptd"));
//   ES_ASSIGN_OR_RETURN(auto code, embed_example::LoraProgram::load("code.pte", "foundation.ptd"));
//   ES_ASSIGN_OR_RETURN(double sum, chat.run(5));   // the file is open once, for both
//
// Ownership: a LoraProgram owns its program's loader, the Program and its method "forward", and a
// share of the foundation file: DataFile::open hands every LoraProgram over the same file the one
// mapping already open, which closes when the last of them is destroyed.

#ifndef EMBED_EXAMPLE_RUN_LORA_H_
#define EMBED_EXAMPLE_RUN_LORA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/data_loader/file_data_loader.h"
#include "edgeshare/runtime/executor/program.h"
#include "edgeshare/runtime/named_data/data_file.h"

namespace embed_example {

class LoraProgram {
 public:
  // Loads `pte`'s method "forward" over the foundation weights in `ptd`.
  static edgeshare::runtime::Result<LoraProgram> load(const char* pte, const char* ptd);

  // Runs "forward" on the token ids 0, 1, ..., tokens - 1 and returns the sum of its logits.
  edgeshare::runtime::Result<double> run(int32_t tokens);

 private:
  LoraProgram() = default;

  // Declared in the order they are needed: destroyed method first, foundation last.
  std::shared_ptr<const edgeshare::runtime::DataFile> foundation_;
  std::unique_ptr<edgeshare::runtime::FileDataLoader> loader_;
  std::unique_ptr<edgeshare::runtime::Program> program_;
  std::unique_ptr<edgeshare::runtime::Method> forward_;
  std::vector<int64_t> ids_;
};

}  // namespace embed_example

#endif  // EMBED_EXAMPLE_RUN_LORA_H_
