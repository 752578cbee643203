#include "edgeshare/generation/tokenizers.h"

#include <sys/stat.h>

#include <cstdlib>
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

// What tokenizer_config.json says of a tokenizer.model, as transformers' LlamaTokenizer reads it:
// add_bos_token / add_eos_token; legacy and add_prefix_space (where a "▁" goes in front);
// added_tokens_decoder ({"id": {"content": str, "special": bool, ...}}).
Status ReadSentencePieceOptions(const std::string& path, SentencePieceTokenizer::Options* options) {
  if (!IsFile(path)) return Status();
  std::ifstream file(path, std::ios::binary);
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed, "cannot open %s", path.c_str());
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ES_CHECK_OR_RETURN_ERROR(config.is_object(), Error::InvalidData, "%s is not a JSON object",
                           path.c_str());
  bool legacy = false;
  bool add_prefix_space = true;
  const std::pair<const char*, bool*> flags[] = {{"add_bos_token", &options->add_bos},
                                                 {"add_eos_token", &options->add_eos},
                                                 {"legacy", &legacy},
                                                 {"add_prefix_space", &add_prefix_space}};
  for (const auto& [key, flag] : flags) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    ES_CHECK_OR_RETURN_ERROR(it->is_boolean(), Error::InvalidData, "%s: %s must be true or false",
                             path.c_str(), key);
    *flag = it->get<bool>();
  }
  using Scheme = SentencePieceTokenizer::PrependScheme;
  options->prepend_scheme = !add_prefix_space ? Scheme::kNever
                            : legacy          ? Scheme::kAlways
                                              : Scheme::kFirst;
  auto added = config.find("added_tokens_decoder");
  if (added == config.end() || added->is_null()) return Status();
  ES_CHECK_OR_RETURN_ERROR(added->is_object(), Error::InvalidData,
                           "%s: added_tokens_decoder must be an object", path.c_str());
  for (const auto& [key, token] : added->items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    const bool is_id = !key.empty() && *end == '\0' && id >= 0;
    const auto content = token.is_object() ? token.find("content") : token.end();
    const auto special = token.is_object() ? token.find("special") : token.end();
    ES_CHECK_OR_RETURN_ERROR(
        is_id && content != token.end() && content->is_string() &&
            (special == token.end() || special->is_boolean()),
        Error::InvalidData,
        "%s: added_tokens_decoder[\"%s\"] must be {\"content\": text, \"special\": true|false}",
        path.c_str(), key.c_str());
    options->added_tokens.push_back({static_cast<int64_t>(id), content->get<std::string>(),
                                     special != token.end() && special->get<bool>()});
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
