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
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
// An added token's id above this is refused (it would size the id table).
constexpr int64_t kMaxAddedId = int64_t{1} << 24;

// The protobuf wire format, just enough to read a ModelProto's piece types and replace its
// normalizer (the library's header hides its ModelProto; Debian ships no generated header).
bool ReadVarint(std::string_view data, size_t* at, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= data.size()) return false;
    const uint8_t byte = static_cast<uint8_t>(data[(*at)++]);
    *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return true;
  }
  return false;
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

struct WireField {
  uint64_t number;
  std::string_view whole;    // tag included
  std::string_view payload;  // of a length-delimited field
  uint64_t value;            // of a varint field
};

bool ReadFields(std::string_view data, std::vector<WireField>* fields) {
  size_t at = 0;
  while (at < data.size()) {
    const size_t start = at;
    uint64_t key = 0;
    WireField field{};
    if (!ReadVarint(data, &at, &key)) return false;
    field.number = key >> 3;
    switch (key & 7) {
      case 0:
        if (!ReadVarint(data, &at, &field.value)) return false;
        break;
      case 1:
        at += 8;
        break;
      case 2: {
        uint64_t size = 0;
        if (!ReadVarint(data, &at, &size) || size > data.size() - std::min(at, data.size())) {
          return false;
        }
        field.payload = data.substr(at, size);
        at += size;
        break;
      }
      case 5:
        at += 4;
        break;
      default:
        return false;
    }
    if (at > data.size()) return false;
    field.whole = data.substr(start, at - start);
    fields->push_back(field);
  }
  return true;
}

// The model with its normalizer off (no dummy prefix, no whitespace folding, no character map;
// spaces still escaped as "▁", as Hugging Face's Metaspace leaves them to the BPE) and no
// self-test samples into *model, and each piece's type (1 normal, 2 unknown, 3 control, 4
// user-defined, 5 unused, 6 byte).
bool WithoutNormalizer(std::string_view serialized, std::string* model, std::vector<int>* types) {
  std::vector<WireField> fields;
  if (!ReadFields(serialized, &fields)) return false;
  std::string spec;  // occurrences of one embedded message merge
  for (const WireField& f : fields) {
    if (f.number == 3) {
      spec.append(f.payload);
    } else if (f.number != 4) {
      // Not self_test_data (4): its samples were made with the model's own normalizer, and the
      // library checks them when it loads the model.
      model->append(f.whole);
    }
    if (f.number != 1) continue;
    std::vector<WireField> piece;  // {1: piece, 2: score, 3: type (NORMAL when absent)}
    if (!ReadFields(f.payload, &piece)) return false;
    int type = 1;
    for (const WireField& p : piece) {
      if (p.number == 3) type = static_cast<int>(p.value);
    }
    types->push_back(type);
  }
  std::vector<WireField> spec_fields;
  if (!ReadFields(spec, &spec_fields)) return false;
  // Keep what the fields 1-6 (name, character map, dummy prefix, whitespace folding, escaping,
  // rule tsv) do not cover.
  std::string normalizer;
  for (const WireField& f : spec_fields) {
    if (f.number > 6) normalizer.append(f.whole);
  }
  constexpr std::string_view kIdentity = "identity";
  normalizer.push_back('\x0a');
  AppendVarint(kIdentity.size(), &normalizer);
  normalizer.append(kIdentity);
  normalizer.append("\x18\x00\x20\x00\x28\x01", 6);  // no dummy prefix or folding; escaping
  model->push_back('\x1a');
  AppendVarint(normalizer.size(), model);
  model->append(normalizer);
  return true;
}

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

// Bytes of the UTF-8 character a lead byte starts (1 for a stray continuation byte).
size_t Utf8Length(unsigned char lead) {
  return lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

std::string ReplaceSpaces(std::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == ' ') {
      escaped.append(kSpaceSymbol);
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
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

// Hugging Face's decoding of a converted tokenizer.model, one token at a time: "▁" as a space, a
// run of byte tokens as its UTF-8 text or one U+FFFD per token, one leading space of the text
// dropped, special tokens skipped or written as their text.
class SentencePieceTextStream final : public TextStream {
 public:
  SentencePieceTextStream(const SentencePieceTokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  void add(int64_t id, std::string* out) override {
    const SentencePieceTokenizer::Piece* piece = tokenizer_->piece(id);
    using Kind = SentencePieceTokenizer::Kind;
    if (piece == nullptr || piece->kind == Kind::kNone) return;
    // Left out before the decoder runs: the byte tokens around a skipped one make one run.
    if (piece->kind == Kind::kSpecial && skip_special_tokens_) return;
    if (piece->kind == Kind::kByte) {
      bytes_.append(piece->text);
      ++byte_tokens_;
      return;
    }
    flush(out);
    emit(piece->text, out);
  }

  void finish(std::string* out) override {
    flush(out);
    at_start_ = true;
  }

 private:
  void flush(std::string* out) {
    if (byte_tokens_ == 0) return;
    if (is_utf8(bytes_)) {
      emit(bytes_, out);
    } else {
      std::string replacement;
      for (size_t i = 0; i < byte_tokens_; ++i) replacement.append(kReplacement);
      emit(replacement, out);
    }
    bytes_.clear();
    byte_tokens_ = 0;
  }

  void emit(std::string_view text, std::string* out) {
    if (at_start_ && !text.empty()) {
      if (text[0] == ' ' && tokenizer_->strips_leading_space()) text.remove_prefix(1);
      at_start_ = false;
    }
    out->append(text);
  }

  const SentencePieceTokenizer* tokenizer_;
  bool skip_special_tokens_;
  bool at_start_ = true;
  std::string bytes_;  // the run of byte tokens so far
  size_t byte_tokens_ = 0;
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
  std::string model;
  std::vector<int> types;
  ES_CHECK_OR_RETURN_ERROR(WithoutNormalizer(serialized, &model, &types), Error::InvalidData,
                           "%s is not a SentencePiece model: not a protobuf message", name.c_str());
  tokenizer.processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::SentencePieceProcessor& sp = *tokenizer.processor_;
  const sentencepiece::util::Status status = sp.LoadFromSerializedProto(model);
  ES_CHECK_OR_RETURN_ERROR(status.ok(), Error::InvalidData, "%s is not a SentencePiece model: %s",
                           name.c_str(), status.ToString().c_str());
  const int size = sp.GetPieceSize();
  ES_CHECK_OR_RETURN_ERROR(size > 0 && static_cast<size_t>(size) == types.size(),
                           Error::InvalidData, "%s: the model has %d pieces", name.c_str(), size);
  int64_t vocab = size;
  for (const AddedToken& added : options.added_tokens) {
    ES_CHECK_OR_RETURN_ERROR(added.id >= 0 && added.id < kMaxAddedId, Error::InvalidData,
                             "%s: added token '%s' has id %lld", name.c_str(),
                             added.content.c_str(), static_cast<long long>(added.id));
    vocab = std::max(vocab, added.id + 1);
  }
  tokenizer.pieces_.assign(static_cast<size_t>(vocab), Piece{std::string(), Kind::kNone});
  for (int id = 0; id < size; ++id) {
    const std::string& text = sp.IdToPiece(id);
    Piece& piece = tokenizer.pieces_[static_cast<size_t>(id)];
    constexpr int kUnknown = 2, kControl = 3, kUserDefined = 4;
    const int type = types[static_cast<size_t>(id)];
    if (type == kUnknown || type == kControl) {
      piece = {text, Kind::kSpecial};
    } else if (type == kUserDefined) {
      piece = {text, Kind::kAdded};
    } else if (sp.IsByte(id)) {
      tokenizer.has_byte_pieces_ = true;
      const int byte = ParseBytePiece(text);
      ES_CHECK_OR_RETURN_ERROR(byte >= 0, Error::InvalidData, "%s: byte piece %d is '%s'",
                               name.c_str(), id, text.c_str());
      piece = {std::string(1, static_cast<char>(byte)), Kind::kByte};
    } else {
      piece = {ReplaceSpaceSymbol(text), Kind::kNormal};
    }
  }
  for (const AddedToken& added : options.added_tokens) {
    tokenizer.pieces_[static_cast<size_t>(added.id)] = {
        added.content, added.special ? Kind::kSpecial : Kind::kAdded};
  }
  for (size_t id = 0; id < tokenizer.pieces_.size(); ++id) {
    Piece& piece = tokenizer.pieces_[id];
    if (piece.kind != Kind::kSpecial && piece.kind != Kind::kAdded) continue;
    // Matched as written; decoded as Hugging Face's decoder writes any token ("▁" as a space).
    if (!piece.text.empty()) tokenizer.added_.push_back({piece.text, static_cast<int64_t>(id)});
    piece.text = ReplaceSpaceSymbol(piece.text);
  }
  std::stable_sort(tokenizer.added_.begin(), tokenizer.added_.end(),
                   [](const Added& a, const Added& b) { return a.text.size() > b.text.size(); });
  tokenizer.bos_id_ = sp.bos_id();
  tokenizer.eos_id_ = sp.eos_id();
  tokenizer.options_ = std::move(options);
  return tokenizer;
}

const SentencePieceTokenizer::Piece* SentencePieceTokenizer::piece(int64_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) return nullptr;
  return &pieces_[static_cast<size_t>(id)];
}

Status SentencePieceTokenizer::encode_stretch(std::string_view text, bool at_start,
                                              std::vector<int64_t>* ids) const {
  if (text.empty()) return Status();
  // Hugging Face's Metaspace: spaces as "▁", one "▁" in front unless there is one.
  std::string escaped = ReplaceSpaces(text);
  const bool prepend = options_.prepend_scheme == PrependScheme::kAlways ||
                       (options_.prepend_scheme == PrependScheme::kFirst && at_start);
  if (prepend && escaped.compare(0, kSpaceSymbol.size(), kSpaceSymbol) != 0) {
    escaped.insert(0, kSpaceSymbol);
  }
  if (!has_byte_pieces_) {
    // A character with no piece of its own is left out before merging, as transformers'
    // converted BPE (no unknown token, no byte pieces to fall back to) leaves it out.
    std::string kept;
    for (size_t at = 0; at < escaped.size();) {
      const size_t size = Utf8Length(static_cast<unsigned char>(escaped[at]));
      const std::string_view c = std::string_view(escaped).substr(at, size);
      if (processor_->PieceToId(c) != processor_->unk_id()) kept.append(c);
      at += size;
    }
    escaped.swap(kept);
  }
  std::vector<int> out;
  const sentencepiece::util::Status status = processor_->Encode(escaped, &out);
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
    const Added* added = nullptr;
    for (const Added& a : added_) {  // longest first: the first at a position wins
      const size_t at = text.find(a.text, pos);
      if (at < found) found = at, added = &a;
    }
    ES_RETURN_IF_ERROR(encode_stretch(text.substr(pos, found - pos), pos == 0, &ids));
    if (added == nullptr) break;
    ids.push_back(added->id);
    pos = found + added->text.size();
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
  for (const Added& a : added_) {
    if (a.text == token) return a.id;
  }
  const int id = processor_->PieceToId(token);
  if (id < 0 || id >= processor_->GetPieceSize()) return -1;
  // The library answers the unknown token's id for any piece it does not know.
  return processor_->IdToPiece(id) == token ? id : -1;
}

}  // namespace generation
}  // namespace edgeshare
