// BpeTokenizer: a Hugging Face tokenizer.json with a BPE model, in C++: byte-level files (GPT-2,
// Llama 3, Qwen2, SmolLM2) and SentencePiece-style ones (Gemma, Llama 2, Mistral, Phi-3: "▁" for a
// space, byte fallback). It runs Hugging Face's pipeline: added tokens matched in the raw text (or,
// for "normalized" ones, in the normalized text), the normalizer, the pre-tokenizer, BPE merges by
// rank, the post-processor's special tokens; and decoding through the file's decoder. Its ids and
// text equal Hugging Face `tokenizers`' for the files it accepts; a file using a part it does not
// implement is refused by name rather than tokenized differently.
//
//   ES_ASSIGN_OR_RETURN(BpeTokenizer tokenizer, BpeTokenizer::load("out/tokenizer.json"));
//   ES_ASSIGN_OR_RETURN(std::vector<int64_t> ids, tokenizer.encode("Grüße, 東京"));
//   std::string text = tokenizer.decode(ids);              // special tokens left out
//
//   std::unique_ptr<TextStream> stream = tokenizer.stream();  // whole characters at a time
//   for (int64_t id : generated) { piece.clear(); stream->add(id, &piece); print(piece); }
//   piece.clear(); stream->finish(&piece); print(piece);      // the pieces concatenate to decode()
//
// Accepted: normalizer null, Replace (String or Regex pattern), Prepend, NFC, NFD, NFKC, NFKD,
// Lowercase, Strip or a Sequence of them; pre_tokenizer null, ByteLevel, Split (String or Regex
// pattern, every behavior, invert), Digits, Metaspace (prepend_scheme first/always/never, split) or
// a Sequence of them (nothing after ByteLevel); model BPE (merges as "a b" strings or [a, b] pairs,
// ignore_merges, byte_fallback, unk_token, fuse_unk); added tokens with lstrip / rstrip /
// normalized; decoder null, ByteLevel, or a Sequence of Replace (String), Metaspace, ByteFallback,
// Fuse and Strip (leading only, after Fuse); post_processor null, ByteLevel, TemplateProcessing
// (its "single" template) or a Sequence.
// Errors: load(): AccessFailed for an unreadable file, InvalidData for malformed JSON or
// entries, NotSupported naming the part it does not implement. encode(): InvalidArgument for
// text that is not UTF-8, NotFound for a piece neither the vocabulary nor byte fallback or an
// unknown token covers.
// Thread-safety: const methods may run concurrently. Ownership: owns its tables; the compiled
// regular expressions are freed with it; a stream borrows the tokenizer, which must outlive it.

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
  // The text of `ids` through the file's decoder (invalid UTF-8 as U+FFFD, as Hugging Face
  // decodes); special tokens are left out when skip_special_tokens; ids outside the vocabulary are
  // skipped.
  std::string decode(runtime::Span<const int64_t> ids,
                     bool skip_special_tokens = true) const override;
  // Tokens decoded as they come: the pieces concatenate to decode() of all of them.
  std::unique_ptr<TextStream> stream(bool skip_special_tokens = true) const override;
  // An id for a token's text (e.g. "<|im_end|>"), or -1.
  int64_t token_to_id(std::string_view token) const override;
  // Tokens known, added ones included (the largest id + 1).
  size_t vocab_size() const override;

 private:
  struct Regex;
  struct Normalizer;    // one normalizer step
  struct PreTokenizer;  // one pre-tokenizer step
  struct Decoder;
  struct Added;
  struct Piece;
  class Parser;
  class Stream;
  BpeTokenizer();

  runtime::Result<std::string> normalize(std::string_view text) const;
  runtime::Status encode_segment(std::string_view segment, bool at_start,
                                 std::vector<int64_t>* ids) const;
  runtime::Status encode_ordinary(std::string_view text, bool at_start,
                                  std::vector<int64_t>* ids) const;
  runtime::Status encode_piece(std::string_view piece, std::vector<int64_t>* ids) const;
  const Added* find_added(std::string_view text, size_t from, bool normalized, size_t* begin,
                          size_t* end) const;

  std::string name_;
  std::vector<Normalizer> normalizers_;       // applied in order to the text between added tokens
  std::vector<PreTokenizer> pre_tokenizers_;  // applied in order, each piece split further
  bool byte_level_ = false;  // pieces' bytes mapped to GPT-2's printable characters
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left\xffright" -> rank
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int64_t unk_id_ = -1;
  std::vector<Added> added_;  // matched before anything else
  // [256 * normalized + first byte] -> indices into added_, longest first.
  std::vector<std::vector<uint32_t>> added_by_byte_;
  std::vector<int64_t> prefix_ids_;  // the post-processor's template around the sequence
  std::vector<int64_t> suffix_ids_;
  std::unique_ptr<Decoder> decoder_;
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

// Whether `text` is valid UTF-8.
bool is_utf8(std::string_view text);

}  // namespace generation
}  // namespace edgeshare

#endif  // EDGESHARE_GENERATION_BPE_TOKENIZER_H_
