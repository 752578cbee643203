// SentencePieceTokenizer: a SentencePiece tokenizer.model (Llama 2, Mistral and Gemma style: BPE or
// unigram, byte fallback) in C++, on the SentencePiece library the models were trained with. Its
// ids and text equal the `sentencepiece` Python package's (and so Python generation's) for the same
// model.
//
//   ES_ASSIGN_OR_RETURN(SentencePieceTokenizer tokenizer,
//                       SentencePieceTokenizer::load("out/tokenizer.model"));
//   ES_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.encode("Grüße, 東京"));  // <s> first
//   std::string text = tokenizer.decode(ids);                // <s> and </s> left out
//
// Beyond the library's Encode: the control tokens' texts ("<s>", "</s>") in the input are those
// tokens, as Hugging Face's added special tokens are (a chat template writes them); the text
// between them is encoded by the library, each part with its own dummy prefix (transformers' legacy
// Llama tokenizer); BOS (and EOS) are added when add_special_tokens, as Options say
// (tokenizer_config.json's add_bos_token and add_eos_token). decode() is SentencePiece's: the first
// piece loses the dummy prefix's space, a run of byte tokens is decoded as UTF-8 with each invalid
// byte as U+FFFD, an unknown token is " ⁇ "; ids outside the vocabulary are skipped (the library
// would refuse them). Errors: load(): AccessFailed for an unreadable file, InvalidData for a file
// the library cannot parse (its message included). encode(): InvalidArgument for text that is not
// UTF-8, Internal for a failure the library reports. Thread-safety: const methods may run
// concurrently (the library's Encode is const).

#ifndef EDGESHARE_GENERATION_SENTENCEPIECE_TOKENIZER_H_
#define EDGESHARE_GENERATION_SENTENCEPIECE_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "edgeshare/generation/tokenizer.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace edgeshare {
namespace generation {

class SentencePieceTokenizer : public Tokenizer {
 public:
  struct Options {
    bool add_bos = true;  // Llama's default
    bool add_eos = false;
  };

  static runtime::Result<SentencePieceTokenizer> load(const std::string& path, Options options);
  static runtime::Result<SentencePieceTokenizer> load(const std::string& path) {
    return load(path, Options());
  }
  // The same from the file's bytes; `name` is what errors call it.
  static runtime::Result<SentencePieceTokenizer> parse(std::string_view serialized,
                                                       const std::string& name, Options options);

  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  runtime::Result<std::vector<int64_t>> encode(std::string_view text,
                                               bool add_special_tokens = true) const override;
  std::string decode(runtime::Span<const int64_t> ids,
                     bool skip_special_tokens = true) const override;
  std::unique_ptr<TextStream> stream(bool skip_special_tokens = true) const override;
  int64_t token_to_id(std::string_view token) const override;
  size_t vocab_size() const override { return pieces_.size(); }

  // What decoding needs of one id.
  enum class Kind : uint8_t { kNormal, kByte, kControl, kUnknown };
  struct Piece {
    std::string text;  // "▁" as " "; a byte token's one byte; a control token's piece
    Kind kind;
  };
  // The piece of `id`, or null outside the vocabulary.
  const Piece* piece(int64_t id) const;
  // Whether the first piece of a text drops a leading space (the dummy prefix).
  bool strips_dummy_prefix() const { return strips_dummy_prefix_; }

 private:
  SentencePieceTokenizer();
  runtime::Status encode_ordinary(std::string_view text, std::vector<int64_t>* ids) const;

  std::string name_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<Piece> pieces_;
  struct Control {
    std::string text;
    int64_t id;
  };
  std::vector<Control> controls_;  // matched in the raw text, longest first
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  Options options_;
  bool strips_dummy_prefix_ = false;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_SENTENCEPIECE_TOKENIZER_H_
