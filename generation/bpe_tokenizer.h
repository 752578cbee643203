// BpeTokenizer: a Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama 3, Qwen2 and
// SmolLM style), in C++: added and special tokens, the pre-tokenizer's regular expressions (PCRE2,
// Unicode properties), byte-level mapping, merges by rank, byte fallback, and the post-processor's
// special tokens. Its ids and text equal Hugging Face `tokenizers`' for the files it accepts; a
// file using a part it does not implement is refused by name rather than tokenized differently.
//
//   ES_ASSIGN_OR_RETURN(BpeTokenizer tokenizer, BpeTokenizer::load("out/tokenizer.json"));
//   ES_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.encode("Grüße, 東京"));
//   std::string text = tokenizer.decode(ids);              // special tokens left out
//
//   Utf8Stream stream;                                     // streaming: whole characters only
//   std::string piece;
//   for (int64_t id : generated) {
//     piece.clear();
//     stream.add(tokenizer.token_bytes(id), &piece);      // "" while a character is incomplete
//     print(piece);
//   }
//   piece.clear();  stream.finish(&piece);  print(piece);   // the pieces concatenate to decode()
//
// Accepted: normalizer null; pre_tokenizer ByteLevel (add_prefix_space false), Split (a Regex,
// behavior Isolated, not inverted) or a Sequence of them; model BPE (merges as "a b" strings or
// [a, b] pairs, ignore_merges, byte_fallback, unk_token); decoder ByteLevel (or a Sequence holding
// it); post_processor null, ByteLevel, TemplateProcessing (its "single" template) or a Sequence.
// Errors: load(): AccessFailed for an unreadable file, InvalidData for malformed JSON or
// entries, NotSupported naming the part it does not implement. encode(): InvalidArgument for
// text that is not UTF-8, NotFound for a piece neither the vocabulary nor byte fallback or an
// unknown token covers.
// Thread-safety: const methods may run concurrently. Ownership: owns its tables; the compiled
// regular expressions are freed with it.

#ifndef EDGESHARE_GENERATION_BPE_TOKENIZER_H_
#define EDGESHARE_GENERATION_BPE_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "edgeshare/generation/tokenizer.h"
#include "edgeshare/runtime/core/result.h"
#include "edgeshare/runtime/core/span.h"

namespace edgeshare {
namespace generation {

class BpeTokenizer : public Tokenizer {
 public:
  static runtime::Result<BpeTokenizer> load(const std::string& path);
  // The same from the file's text; `name` is what errors call it.
  static runtime::Result<BpeTokenizer> parse(std::string_view json, const std::string& name);

  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer() override;

  // The ids of `text`, with the post-processor's special tokens when add_special_tokens.
  runtime::Result<std::vector<int64_t>> encode(std::string_view text,
                                               bool add_special_tokens = true) const override;
  // The text of `ids` (invalid UTF-8 as U+FFFD, as Hugging Face decodes); special tokens are left
  // out when skip_special_tokens; ids outside the vocabulary are skipped.
  std::string decode(runtime::Span<const int64_t> ids,
                     bool skip_special_tokens = true) const override;
  // The bytes one token stands for ("" for a special token when skip_special_tokens, or an id
  // outside the vocabulary): decode() is the UTF-8 repair of their concatenation.
  std::string_view token_bytes(int64_t id, bool skip_special_tokens = true) const;
  // Utf8Stream over token_bytes().
  std::unique_ptr<TextStream> stream(bool skip_special_tokens = true) const override;
  // An id for a token's text (e.g. "<|im_end|>"), or -1.
  int64_t token_to_id(std::string_view token) const override;
  // Tokens known, added ones included (the largest id + 1).
  size_t vocab_size() const override { return bytes_.size(); }

 private:
  struct Regex;
  BpeTokenizer();

  runtime::Status encode_piece(std::string_view piece, std::vector<int64_t>* ids) const;
  runtime::Status encode_ordinary(std::string_view text, std::vector<int64_t>* ids) const;

  std::string name_;
  std::vector<std::unique_ptr<Regex>> splits_;  // applied in order, each piece split further
  bool byte_level_ = false;                     // bytes mapped to GPT-2's printable characters
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left\xffright" -> rank
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  int64_t unk_id_ = -1;
  struct Added {
    std::string content;
    int64_t id;
    bool special;
  };
  std::vector<Added> added_;  // matched in the raw text before anything else
  std::vector<int64_t> prefix_ids_;  // the post-processor's template around the sequence
  std::vector<int64_t> suffix_ids_;
  std::vector<std::string> bytes_;  // id -> the bytes it decodes to
  std::vector<uint8_t> special_;    // id -> a special added token
};

// Splits a stream of bytes into pieces of whole UTF-8 characters: an incomplete sequence at the end
// waits for the next bytes; invalid bytes become U+FFFD as they do in decode() (one per maximal
// invalid subpart, as Python's and Rust's UTF-8 decoders do), so the pieces concatenate to the
// repair of all the bytes. Allocates only when `out` grows.
class Utf8Stream {
 public:
  // Appends to *out the text the bytes so far complete.
  void add(std::string_view bytes, std::string* out);
  // Appends what is left (an incomplete sequence as U+FFFD) and starts over.
  void finish(std::string* out);

 private:
  std::string pending_;  // at most 3 bytes of a sequence not yet complete
};

// The UTF-8 repair of `bytes` (each maximal invalid subpart as U+FFFD), appended to *out.
void append_utf8_lossy(std::string_view bytes, std::string* out);

// The same with each invalid byte as U+FFFD (SentencePiece's repair of a run of byte tokens); a
// valid but incomplete character at the end is left unconsumed unless `final`. Returns the bytes
// consumed.
size_t append_utf8_per_byte(std::string_view bytes, std::string* out, bool final);

// Whether `text` is valid UTF-8.
bool is_utf8(std::string_view text);

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_BPE_TOKENIZER_H_
