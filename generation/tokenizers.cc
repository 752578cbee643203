#include "edgeshare/generation/tokenizers.h"

#include <sys/stat.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

#include "edgeshare/generation/bpe_tokenizer.h"
#include "edgeshare/generation/sentencepiece_tokenizer.h"

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Result;
using runtime::Status;

namespace {

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// tokenizer_config.json's add_bos_token / add_eos_token over the defaults.
Status ReadSentencePieceOptions(const std::string& path, SentencePieceTokenizer::Options* options) {
  if (!IsFile(path)) return Status();
  std::ifstream file(path, std::ios::binary);
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed, "cannot open %s", path.c_str());
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ES_CHECK_OR_RETURN_ERROR(config.is_object(), Error::InvalidData, "%s is not a JSON object",
                           path.c_str());
  const std::pair<const char*, bool*> flags[] = {{"add_bos_token", &options->add_bos},
                                                 {"add_eos_token", &options->add_eos}};
  for (const auto& [key, flag] : flags) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    ES_CHECK_OR_RETURN_ERROR(it->is_boolean(), Error::InvalidData, "%s: %s must be true or false",
                             path.c_str(), key);
    *flag = it->get<bool>();
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& folder) {
  const std::string prefix = folder.empty() || folder.back() == '/' ? folder : folder + "/";
  if (IsFile(prefix + "tokenizer.json")) {
    ES_ASSIGN_OR_RETURN(BpeTokenizer bpe, BpeTokenizer::load(prefix + "tokenizer.json"));
    return std::unique_ptr<Tokenizer>(std::make_unique<BpeTokenizer>(std::move(bpe)));
  }
  if (IsFile(prefix + "tokenizer.model")) {
    SentencePieceTokenizer::Options options;
    ES_RETURN_IF_ERROR(ReadSentencePieceOptions(prefix + "tokenizer_config.json", &options));
    ES_ASSIGN_OR_RETURN(SentencePieceTokenizer sp,
                        SentencePieceTokenizer::load(prefix + "tokenizer.model", options));
    return std::unique_ptr<Tokenizer>(std::make_unique<SentencePieceTokenizer>(std::move(sp)));
  }
  return std::unique_ptr<Tokenizer>();
}

}  // namespace generation
}  // namespace edgeshare
