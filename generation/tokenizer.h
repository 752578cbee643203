// Tokenizer: what text generation needs of a model's tokenizer, whichever file it comes from
// (tokenizer.json's BPE, byte-level or SentencePiece-style: BpeTokenizer; a SentencePiece
// tokenizer.model: SentencePieceTokenizer). load_tokenizer() in tokenizers.h picks one for an
// export folder.
//
// Thread-safety: const methods may run concurrently.

#ifndef EDGESHARE_GENERATION_TOKENIZER_H_
#define EDGESHARE_GENERATION_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace generation {

// Decodes tokens one at a time into pieces of whole UTF-8 characters; the pieces concatenate to
// decode() of all the tokens. Allocates only when `out` grows.
//
//   std::unique_ptr<TextStream> stream = tokenizer.stream();
//   for (int64_t id : generated) { piece.clear(); stream->add(id, &piece); print(piece); }
//   piece.clear(); stream->finish(&piece); print(piece);
class TextStream {
 public:
  virtual ~TextStream() = default;
  // Appends to *out the text the tokens so far complete ("" while a character is incomplete).
  virtual void add(int64_t id, std::string* out) = 0;
  // Appends what is left and starts over (the next token is the start of a new text).
  virtual void finish(std::string* out) = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with the model's special tokens (a BOS) when add_special_tokens.
  virtual runtime::Result<std::vector<int64_t>> encode(std::string_view text,
                                                       bool add_special_tokens = true) const = 0;
  // The text of `ids`; special tokens are left out when skip_special_tokens; ids outside the
  // vocabulary are skipped.
  virtual std::string decode(runtime::Span<const int64_t> ids,
                             bool skip_special_tokens = true) const = 0;
  // A decoder of tokens as they come (see TextStream).
  virtual std::unique_ptr<TextStream> stream(bool skip_special_tokens = true) const = 0;
  // An id for a token's text (e.g. "<|im_end|>" or "</s>"), or -1.
  virtual int64_t token_to_id(std::string_view token) const = 0;
  // Tokens known, added ones included (the largest id + 1).
  virtual size_t vocab_size() const = 0;
};

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_TOKENIZER_H_
