#include "edgeshare/generation/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

#include "edgeshare/generation/bpe_tokenizer.h"

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Result;
using runtime::Span;
using runtime::Status;

namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, "▁"
// What the library decodes an unknown token to (its default unk_surface, U+2047 between spaces).
constexpr std::string_view kUnknownSurface = " \xE2\x81\x87 ";

// "<0xNN>" -> the byte, or -1.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string ReplaceSpaceSymbol(std::string_view piece) {
  std::string text;
  text.reserve(piece.size());
  size_t i = 0;
  while (i < piece.size()) {
    if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      text.push_back(' ');
      i += kSpaceSymbol.size();
    } else {
      text.push_back(piece[i++]);
    }
  }
  return text;
}

// SentencePiece's decoding, one token at a time: the first piece of a text loses its dummy prefix,
// a run of byte tokens is UTF-8 with each invalid byte as U+FFFD, control tokens are invisible
// (their piece when not skipped).
class SentencePieceTextStream final : public TextStream {
 public:
  SentencePieceTextStream(const SentencePieceTokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  void add(int64_t id, std::string* out) override {
    const SentencePieceTokenizer::Piece* piece = tokenizer_->piece(id);
    if (piece == nullptr) return;
    using Kind = SentencePieceTokenizer::Kind;
    if (piece->kind == Kind::kByte) {
      at_start_ = false;
      bytes_.append(piece->text);
      bytes_.erase(0, append_utf8_per_byte(bytes_, out, false));
      return;
    }
    flush(out);
    if (piece->kind == Kind::kControl) {
      if (!skip_special_tokens_) out->append(piece->text);
      return;
    }
    std::string_view text = piece->text;
    if (at_start_ && piece->kind == Kind::kNormal && tokenizer_->strips_dummy_prefix() &&
        !text.empty() && text[0] == ' ') {
      text.remove_prefix(1);
    }
    at_start_ = false;
    out->append(text);
  }

  void finish(std::string* out) override {
    flush(out);
    at_start_ = true;
  }

 private:
  void flush(std::string* out) {
    append_utf8_per_byte(bytes_, out, true);
    bytes_.clear();
  }

  const SentencePieceTokenizer* tokenizer_;
  bool skip_special_tokens_;
  bool at_start_ = true;
  std::string bytes_;  // an incomplete character of a run of byte tokens
};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept =
    default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& path,
                                                            Options options) {
  std::ifstream file(path, std::ios::binary);
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed, "cannot open %s", path.c_str());
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ES_CHECK_OR_RETURN_ERROR(!file.bad(), Error::AccessFailed, "cannot read %s", path.c_str());
  return parse(bytes, path, options);
}

Result<SentencePieceTokenizer> SentencePieceTokenizer::parse(std::string_view serialized,
                                                             const std::string& name,
                                                             Options options) {
  SentencePieceTokenizer tokenizer;
  tokenizer.name_ = name;
  tokenizer.options_ = options;
  tokenizer.processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::SentencePieceProcessor& sp = *tokenizer.processor_;
  const sentencepiece::util::Status status = sp.LoadFromSerializedProto(serialized);
  ES_CHECK_OR_RETURN_ERROR(status.ok(), Error::InvalidData, "%s is not a SentencePiece model: %s",
                           name.c_str(), status.ToString().c_str());
  const int size = sp.GetPieceSize();
  ES_CHECK_OR_RETURN_ERROR(size > 0, Error::InvalidData, "%s: the model has no pieces",
                           name.c_str());
  tokenizer.pieces_.reserve(static_cast<size_t>(size));
  for (int id = 0; id < size; ++id) {
    const std::string& text = sp.IdToPiece(id);
    Piece piece;
    if (sp.IsControl(id)) {
      piece = {text, Kind::kControl};
    } else if (sp.IsUnknown(id)) {
      piece = {std::string(kUnknownSurface), Kind::kUnknown};
    } else if (sp.IsByte(id)) {
      const int byte = ParseBytePiece(text);
      ES_CHECK_OR_RETURN_ERROR(byte >= 0, Error::InvalidData, "%s: byte piece %d is '%s'",
                               name.c_str(), id, text.c_str());
      piece = {std::string(1, static_cast<char>(byte)), Kind::kByte};
    } else {
      piece = {ReplaceSpaceSymbol(text), Kind::kNormal};
    }
    // Hugging Face's conversion makes the unknown, BOS and EOS pieces special tokens, matched
    // as such in the raw text.
    if ((piece.kind == Kind::kControl || piece.kind == Kind::kUnknown) && !text.empty()) {
      tokenizer.controls_.push_back({text, id});
    }
    tokenizer.pieces_.push_back(std::move(piece));
  }
  std::stable_sort(
      tokenizer.controls_.begin(), tokenizer.controls_.end(),
      [](const Control& a, const Control& b) { return a.text.size() > b.text.size(); });
  tokenizer.bos_id_ = sp.bos_id();
  tokenizer.eos_id_ = sp.eos_id();
  // Whether the model's decoding drops the dummy prefix: ask the library about one "▁word" piece.
  for (int id = 0; id < size; ++id) {
    const std::string& text = sp.IdToPiece(id);
    if (tokenizer.pieces_[static_cast<size_t>(id)].kind == Kind::kNormal &&
        text.size() > kSpaceSymbol.size() &&
        text.compare(0, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
      tokenizer.strips_dummy_prefix_ = sp.DecodeIds({id}).compare(0, 1, " ") != 0;
      break;
    }
  }
  return tokenizer;
}

const SentencePieceTokenizer::Piece* SentencePieceTokenizer::piece(int64_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return nullptr;
  return &pieces_[static_cast<size_t>(id)];
}

Status SentencePieceTokenizer::encode_ordinary(std::string_view text,
                                               std::vector<int64_t>* ids) const {
  if (text.empty()) return Status();
  std::vector<int> out;
  const sentencepiece::util::Status status = processor_->Encode(text, &out);
  ES_CHECK_OR_RETURN_ERROR(status.ok(), Error::Internal, "%s: encoding failed: %s", name_.c_str(),
                           status.ToString().c_str());
  ids->insert(ids->end(), out.begin(), out.end());
  return Status();
}

Result<std::vector<int64_t>> SentencePieceTokenizer::encode(std::string_view text,
                                                            bool add_special_tokens) const {
  ES_CHECK_OR_RETURN_ERROR(is_utf8(text), Error::InvalidArgument,
                           "%s: the text to encode is not UTF-8", name_.c_str());
  std::vector<int64_t> ids;
  if (add_special_tokens && options_.add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t found = std::string_view::npos;
    const Control* control = nullptr;
    for (const Control& c : controls_) {  // longest first: the first at a position wins
      const size_t at = text.find(c.text, pos);
      if (at < found) found = at, control = &c;
    }
    ES_RETURN_IF_ERROR(encode_ordinary(text.substr(pos, found - pos), &ids));
    if (control == nullptr) break;
    ids.push_back(control->id);
    pos = found + control->text.size();
  }
  if (add_special_tokens && options_.add_eos && eos_id_ >= 0) ids.push_back(eos_id_);
  return ids;
}

std::string SentencePieceTokenizer::decode(Span<const int64_t> ids,
                                           bool skip_special_tokens) const {
  std::string text;
  SentencePieceTextStream stream(this, skip_special_tokens);
  for (int64_t id : ids) stream.add(id, &text);
  stream.finish(&text);
  return text;
}

std::unique_ptr<TextStream> SentencePieceTokenizer::stream(bool skip_special_tokens) const {
  return std::make_unique<SentencePieceTextStream>(this, skip_special_tokens);
}

int64_t SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = processor_->PieceToId(token);
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return -1;
  // The library answers the unknown token's id for any piece it does not know.
  return processor_->IdToPiece(id) == token ? id : -1;
}

}  // namespace generation
}  // namespace edgeshare
