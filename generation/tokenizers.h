// load_tokenizer: the tokenizer of an export folder (or a model directory), as transformers picks
// it: tokenizer.json when there is one (Hugging Face's fast tokenizer; BpeTokenizer in C++), else
// a SentencePiece tokenizer.model, with tokenizer_config.json's add_bos_token / add_eos_token
// (default: BOS only, as Llama's tokenizer).
//
//   ES_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, load_tokenizer("out"));
//   if (tokenizer == nullptr) { /* no tokenizer: token ids only */ }
//
// Errors: those of the tokenizer's load() (naming the file); InvalidData for a
// tokenizer_config.json that is not a JSON object or whose add_bos_token / add_eos_token is not a
// boolean.

#ifndef EDGESHARE_GENERATION_TOKENIZERS_H_
#define EDGESHARE_GENERATION_TOKENIZERS_H_

#include <memory>
#include <string>

#include "edgeshare/generation/tokenizer.h"
#include "edgeshare/runtime/core/result.h"

namespace edgeshare {
namespace generation {

// The folder's tokenizer, or null when it has neither tokenizer.json nor tokenizer.model.
runtime::Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& folder);

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_TOKENIZERS_H_
