// SentencePieceTokenizer: a SentencePiece tokenizer.model (Llama 2 and Mistral style: BPE with byte
// fallback) in C++, on the SentencePiece library the models were trained with. Its ids and text
// equal those of transformers' LlamaTokenizer for the same folder (the Hugging Face `tokenizers`
// pipeline transformers converts a tokenizer.model to) and of Python generation's backend.
//
//   ES_ASSIGN_OR_RETURN(SentencePieceTokenizer tokenizer,
//                       SentencePieceTokenizer::load("out/tokenizer.model"));
//   ES_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.encode("Grüße, 東京"));  // <s> first
//   std::string text = tokenizer.decode(ids);                // <s> and </s> left out
//
// What Hugging Face does and this does too, where it differs from the library's own Encode/Decode:
// - Added tokens are matched in the raw text first: the model's control and unknown pieces
//   ("<s>", "</s>", "<unk>"; special), its user-defined pieces (not special) and Options'
//   added_tokens (tokenizer_config.json's added_tokens_decoder).
// - Each stretch between them gets one "▁" in front unless it starts with a space (Hugging Face's
//   Metaspace; the library's dummy prefix would add one in front of a space too): in front of
//   every stretch (legacy tokenizers), of the text's start only, or never, as Options say. The
//   model's own normalizer is off (transformers ignores it): the library only segments. In a
//   model without byte pieces, a character with no piece is left out (transformers' converted
//   BPE has no unknown token).
// - decode(): special tokens left out or written as their text; a run of byte tokens is its UTF-8
//   text, or one U+FFFD per token when the run is not valid UTF-8 (tokens skipped as special do
//   not end a run); the unknown token is "<unk>" (the library writes " ⁇ "); one leading space of
//   the whole text is dropped unless the prefix scheme is kNever; ids outside the vocabulary are
//   skipped. A stream holds a run of byte tokens back until the run ends.
// Errors: load(): AccessFailed for an unreadable file, InvalidData for a file the library cannot
// parse (its message included) or a negative added token id. encode(): InvalidArgument for text
// that is not UTF-8, Internal for a failure the library reports. Thread-safety: const methods may
// run concurrently (the library's Encode is const).

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
  // Where a "▁" goes in front of the text between added tokens (see above).
  enum class PrependScheme : uint8_t { kAlways, kFirst, kNever };
  // A token of tokenizer_config.json's added_tokens_decoder.
  struct AddedToken {
    int64_t id;
    std::string content;
    bool special;
  };
  // tokenizer_config.json's settings; the defaults are transformers' LlamaTokenizer's.
  struct Options {
    bool add_bos = true;
    bool add_eos = false;
    // kAlways for legacy tokenizers (legacy: true), kNever for add_prefix_space: false.
    PrependScheme prepend_scheme = PrependScheme::kFirst;
    std::vector<AddedToken> added_tokens;
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
  enum class Kind : uint8_t { kNormal, kByte, kAdded, kSpecial, kNone };
  struct Piece {
    std::string text;  // "▁" as " "; a byte token's one byte; an added token's content
    Kind kind;
  };
  // The piece of `id`, or null outside the vocabulary.
  const Piece* piece(int64_t id) const;
  // Whether decoding drops one leading space of the text.
  bool strips_leading_space() const { return options_.prepend_scheme != PrependScheme::kNever; }

 private:
  SentencePieceTokenizer();
  runtime::Status encode_stretch(std::string_view text, bool at_start,
                                 std::vector<int64_t>* ids) const;

  std::string name_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<Piece> pieces_;  // by id, added tokens included
  struct Added {
    std::string text;
    int64_t id;
  };
  std::vector<Added> added_;  // matched in the raw text, longest first
  int64_t bos_id_ = -1;
  int64_t eos_id_ = -1;
  Options options_;
  bool has_byte_pieces_ = false;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_SENTENCEPIECE_TOKENIZER_H_
