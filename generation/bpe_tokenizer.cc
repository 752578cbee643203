#include "edgeshare/generation/bpe_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

namespace edgeshare {
namespace generation {

using runtime::Error;
using runtime::Result;
using runtime::Span;
using runtime::Status;
using Json = nlohmann::json;

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// GPT-2's pre-tokenizer pattern, which ByteLevel(use_regex=true) applies.
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
struct ByteMap {
  std::string to_char[256];
  std::unordered_map<std::string, uint8_t> to_byte;
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      AppendCodePoint(printable ? b : next++, &to_char[b]);
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap* map = new ByteMap();
  return *map;
}

// The length of the UTF-8 character starting at s[i] (1 for an invalid byte, which the caller
// checks before).
size_t CharLength(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

// Decodes the longest prefix of `s` it can: valid characters copied, each maximal invalid subpart
// (each invalid byte when per_byte) as U+FFFD; a valid but incomplete sequence at the end is left
// unconsumed unless `final`. Returns the bytes consumed.
size_t DecodeUtf8(std::string_view s, std::string* out, bool final, bool per_byte = false) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b == 0xE0) {
      need = 2, lo = 0xA0;
    } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
      need = 2;
    } else if (b == 0xED) {
      need = 2, hi = 0x9F;
    } else if (b == 0xF0) {
      need = 3, lo = 0x90;
    } else if (b >= 0xF1 && b <= 0xF3) {
      need = 3;
    } else if (b == 0xF4) {
      need = 3, hi = 0x8F;
    } else {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool bad = false;
    for (size_t k = 0; k < need; ++k, ++j) {
      if (j >= n) {
        if (!final) return i;  // wait for the rest of the character
        bad = true;
        break;
      }
      const uint8_t c = static_cast<uint8_t>(s[j]);
      const uint8_t low = k == 0 ? lo : 0x80, high = k == 0 ? hi : 0xBF;
      if (c < low || c > high) {
        bad = true;
        break;
      }
    }
    if (bad) {
      out->append(kReplacement);
      i = per_byte ? i + 1 : j;
      continue;
    }
    out->append(s.substr(i, need + 1));
    i = j;
  }
  return i;
}

bool IsUtf8(std::string_view s) {
  std::string scratch;
  scratch.reserve(s.size());
  return DecodeUtf8(s, &scratch, true) == s.size() && scratch.size() == s.size() &&
         scratch == s;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  ES_CHECK_OR_RETURN_ERROR(file.is_open(), Error::AccessFailed, "cannot open %s", path.c_str());
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ES_CHECK_OR_RETURN_ERROR(!file.bad(), Error::AccessFailed, "cannot read %s", path.c_str());
  return text;
}

std::string TypeOf(const Json& node) {
  if (!node.is_object()) return "";
  auto type = node.find("type");
  return type != node.end() && type->is_string() ? type->get<std::string>() : "";
}

// node[key], or null when node is not an object or has no such key (const operator[] may not be
// used on a missing key).
const Json& Get(const Json& node, const char* key) {
  static const Json* null = new Json();
  if (!node.is_object()) return *null;
  auto it = node.find(key);
  return it == node.end() ? *null : *it;
}

bool Flag(const Json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  return it != node.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

void append_utf8_lossy(std::string_view bytes, std::string* out) {
  DecodeUtf8(bytes, out, true);
}

size_t append_utf8_per_byte(std::string_view bytes, std::string* out, bool final) {
  return DecodeUtf8(bytes, out, final, true);
}

bool is_utf8(std::string_view text) { return IsUtf8(text); }

void Utf8Stream::add(std::string_view bytes, std::string* out) {
  if (pending_.empty()) {
    const size_t used = DecodeUtf8(bytes, out, false);
    pending_.assign(bytes.substr(used));
    return;
  }
  pending_.append(bytes);
  const size_t used = DecodeUtf8(pending_, out, false);
  pending_.erase(0, used);
}

void Utf8Stream::finish(std::string* out) {
  DecodeUtf8(pending_, out, true);
  pending_.clear();
}

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

Result<BpeTokenizer> BpeTokenizer::load(const std::string& path) {
  ES_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return parse(text, path);
}

Result<BpeTokenizer> BpeTokenizer::parse(std::string_view text, const std::string& name) {
  const char* file = name.c_str();
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  ES_CHECK_OR_RETURN_ERROR(root.is_object(), Error::InvalidData, "%s is not a JSON object", file);
  BpeTokenizer t;
  t.name_ = name;

  auto normalizer = root.find("normalizer");
  ES_CHECK_OR_RETURN_ERROR(normalizer == root.end() || normalizer->is_null(), Error::NotSupported,
                           "%s: normalizer '%s' is not supported (only none)", file,
                           TypeOf(*normalizer).c_str());

  // Pre-tokenizer: a list of splits (regexes) and whether bytes are mapped.
  std::vector<std::string> patterns;
  auto pre = root.find("pre_tokenizer");
  if (pre != root.end() && !pre->is_null()) {
    std::vector<const Json*> steps;
    if (TypeOf(*pre) == "Sequence" && pre->contains("pretokenizers") &&
        (*pre)["pretokenizers"].is_array()) {
      for (const Json& step : (*pre)["pretokenizers"]) steps.push_back(&step);
    } else {
      steps.push_back(&*pre);
    }
    for (const Json* step : steps) {
      const std::string type = TypeOf(*step);
      if (type == "ByteLevel") {
        ES_CHECK_OR_RETURN_ERROR(!Flag(*step, "add_prefix_space", false), Error::NotSupported,
                                 "%s: ByteLevel add_prefix_space is not supported", file);
        if (Flag(*step, "use_regex", true)) patterns.push_back(kGpt2Pattern);
        t.byte_level_ = true;
      } else if (type == "Split") {
        const Json& pattern = Get(*step, "pattern");
        ES_CHECK_OR_RETURN_ERROR(pattern.is_object() && pattern.contains("Regex") &&
                                     pattern["Regex"].is_string(),
                                 Error::NotSupported, "%s: a Split pre-tokenizer without a Regex",
                                 file);
        ES_CHECK_OR_RETURN_ERROR(
            Get(*step, "behavior") == "Isolated" && !Flag(*step, "invert", false),
            Error::NotSupported, "%s: Split behaviors other than Isolated are not supported", file);
        patterns.push_back(pattern["Regex"].get<std::string>());
      } else {
        return Status::Format(Error::NotSupported, "%s: pre-tokenizer '%s' is not supported",
                              file, type.c_str());
      }
    }
  }
  for (const std::string& pattern : patterns) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      return Status::Format(Error::InvalidData, "%s: pre-tokenizer regex at offset %zu: %s", file,
                            static_cast<size_t>(offset), reinterpret_cast<char*>(message));
    }
    t.splits_.push_back(std::move(regex));
  }

  // The BPE model.
  const Json& model = root.contains("model") ? root["model"] : Json();
  ES_CHECK_OR_RETURN_ERROR(TypeOf(model) == "BPE", Error::NotSupported,
                           "%s: model '%s' is not supported (only BPE)", file,
                           TypeOf(model).c_str());
  ES_CHECK_OR_RETURN_ERROR(model.contains("vocab") && model["vocab"].is_object(),
                           Error::InvalidData, "%s: the model has no vocab", file);
  int64_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    ES_CHECK_OR_RETURN_ERROR(it.value().is_number_unsigned(), Error::InvalidData,
                             "%s: vocab entry '%s' has no id", file, it.key().c_str());
    const int64_t id = it.value().get<int64_t>();
    t.vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    int32_t rank = 0;
    for (const Json& merge : model["merges"]) {
      std::string left, right;
      if (merge.is_string()) {
        const std::string pair = merge.get<std::string>();
        const size_t space = pair.find(' ');
        ES_CHECK_OR_RETURN_ERROR(space != std::string::npos, Error::InvalidData,
                                 "%s: merge '%s' is not 'left right'", file, pair.c_str());
        left = pair.substr(0, space);
        right = pair.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        return Status::Format(Error::InvalidData, "%s: merge %d is malformed", file, rank);
      }
      t.merge_rank_.emplace(left + '\xff' + right, rank++);
    }
  }
  t.ignore_merges_ = Flag(model, "ignore_merges", false);
  t.byte_fallback_ = Flag(model, "byte_fallback", false);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto unk = t.vocab_.find(model["unk_token"].get<std::string>());
    if (unk != t.vocab_.end()) t.unk_id_ = unk->second;
  }
  ES_CHECK_OR_RETURN_ERROR(Get(model, "dropout").is_null() || Get(model, "dropout") == 0.0,
                           Error::NotSupported, "%s: BPE dropout is not supported", file);

  // Added tokens.
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const Json& token : root["added_tokens"]) {
      ES_CHECK_OR_RETURN_ERROR(token.is_object() && token.contains("id") &&
                                   token["id"].is_number_unsigned() && token.contains("content") &&
                                   token["content"].is_string() &&
                                   !token["content"].get<std::string>().empty(),
                               Error::InvalidData, "%s: an added token without id or content",
                               file);
      ES_CHECK_OR_RETURN_ERROR(!Flag(token, "lstrip", false) && !Flag(token, "rstrip", false) &&
                                   !Flag(token, "single_word", false),
                               Error::NotSupported,
                               "%s: added token '%s' strips or matches single words, which is "
                               "not supported",
                               file, token["content"].get<std::string>().c_str());
      Added added{token["content"].get<std::string>(), token["id"].get<int64_t>(),
                  Flag(token, "special", false)};
      max_id = std::max(max_id, added.id);
      t.added_.push_back(std::move(added));
    }
  }

  // Decoder: byte-level or nothing else.
  auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null()) {
    bool byte_level = TypeOf(*decoder) == "ByteLevel";
    if (TypeOf(*decoder) == "Sequence" && decoder->contains("decoders")) {
      for (const Json& step : (*decoder)["decoders"]) byte_level |= TypeOf(step) == "ByteLevel";
    }
    ES_CHECK_OR_RETURN_ERROR(byte_level, Error::NotSupported,
                             "%s: decoder '%s' is not supported (only ByteLevel)", file,
                             TypeOf(*decoder).c_str());
  }

  // Post-processor: special tokens around the sequence.
  auto post = root.find("post_processor");
  if (post != root.end() && !post->is_null()) {
    std::vector<const Json*> steps;
    if (TypeOf(*post) == "Sequence" && post->contains("processors")) {
      for (const Json& step : (*post)["processors"]) steps.push_back(&step);
    } else {
      steps.push_back(&*post);
    }
    for (const Json* step : steps) {
      const std::string type = TypeOf(*step);
      if (type == "ByteLevel") continue;
      ES_CHECK_OR_RETURN_ERROR(type == "TemplateProcessing", Error::NotSupported,
                               "%s: post-processor '%s' is not supported", file, type.c_str());
      const Json& single = Get(*step, "single");
      const Json& specials = Get(*step, "special_tokens");
      ES_CHECK_OR_RETURN_ERROR(single.is_array(), Error::InvalidData,
                               "%s: TemplateProcessing without a single template", file);
      bool after = false;
      for (const Json& item : single) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        ES_CHECK_OR_RETURN_ERROR(item.contains("SpecialToken") &&
                                     item["SpecialToken"].contains("id") &&
                                     item["SpecialToken"]["id"].is_string(),
                                 Error::InvalidData, "%s: a template item is malformed", file);
        const std::string key = item["SpecialToken"]["id"].get<std::string>();
        ES_CHECK_OR_RETURN_ERROR(specials.is_object() && specials.contains(key) &&
                                     specials[key].contains("ids") && specials[key]["ids"].is_array(),
                                 Error::InvalidData, "%s: template token '%s' has no ids", file,
                                 key.c_str());
        for (const Json& id : specials[key]["ids"]) {
          ES_CHECK_OR_RETURN_ERROR(id.is_number_unsigned(), Error::InvalidData,
                                   "%s: template token '%s' has a bad id", file, key.c_str());
          (after ? t.suffix_ids_ : t.prefix_ids_).push_back(id.get<int64_t>());
        }
      }
    }
  }

  // id -> bytes, for decoding.
  ES_CHECK_OR_RETURN_ERROR(max_id >= 0 && max_id < (int64_t{1} << 31), Error::InvalidData,
                           "%s: no tokens, or ids past 2^31", file);
  t.bytes_.assign(static_cast<size_t>(max_id) + 1, std::string());
  t.special_.assign(static_cast<size_t>(max_id) + 1, 0);
  const ByteMap& map = Bytes();
  auto token_bytes = [&](const std::string& token) {
    if (t.byte_fallback_ && token.size() == 6 && token.compare(0, 3, "<0x") == 0 &&
        token[5] == '>' && std::isxdigit(static_cast<unsigned char>(token[3])) &&
        std::isxdigit(static_cast<unsigned char>(token[4]))) {
      return std::string(1, static_cast<char>(std::strtol(token.substr(3, 2).c_str(), nullptr, 16)));
    }
    if (!t.byte_level_) return token;
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const size_t n = CharLength(token, i);
      auto b = map.to_byte.find(token.substr(i, n));
      if (b == map.to_byte.end()) return token;  // not byte-level text: its own UTF-8
      bytes.push_back(static_cast<char>(b->second));
      i += n;
    }
    return bytes;
  };
  for (const auto& [token, id] : t.vocab_) t.bytes_[static_cast<size_t>(id)] = token_bytes(token);
  for (const Added& added : t.added_) {
    t.bytes_[static_cast<size_t>(added.id)] = token_bytes(added.content);
    t.special_[static_cast<size_t>(added.id)] = added.special;
    t.vocab_.emplace(added.content, added.id);
  }
  return t;
}

int64_t BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

std::string_view BpeTokenizer::token_bytes(int64_t id, bool skip_special_tokens) const {
  if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) return {};
  if (skip_special_tokens && special_[static_cast<size_t>(id)]) return {};
  return bytes_[static_cast<size_t>(id)];
}

namespace {

class BpeTextStream final : public TextStream {
 public:
  BpeTextStream(const BpeTokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}
  void add(int64_t id, std::string* out) override {
    bytes_.add(tokenizer_->token_bytes(id, skip_special_tokens_), out);
  }
  void finish(std::string* out) override { bytes_.finish(out); }

 private:
  const BpeTokenizer* tokenizer_;
  bool skip_special_tokens_;
  Utf8Stream bytes_;
};

}  // namespace

std::unique_ptr<TextStream> BpeTokenizer::stream(bool skip_special_tokens) const {
  return std::make_unique<BpeTextStream>(this, skip_special_tokens);
}

std::string BpeTokenizer::decode(Span<const int64_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int64_t id : ids) bytes.append(token_bytes(id, skip_special_tokens));
  std::string text;
  append_utf8_lossy(bytes, &text);
  return text;
}

// One pre-tokenized piece: byte-level mapped, then merged by rank.
Status BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>* ids) const {
  std::string word;
  if (byte_level_) {
    const ByteMap& map = Bytes();
    for (char c : piece) word.append(map.to_char[static_cast<uint8_t>(c)]);
  } else {
    word.assign(piece);
  }
  if (ignore_merges_) {
    auto whole = vocab_.find(word);
    if (whole != vocab_.end()) {
      ids->push_back(whole->second);
      return Status();
    }
  }
  std::vector<std::string> symbols;
  for (size_t i = 0; i < word.size();) {
    const size_t n = CharLength(word, i);
    symbols.emplace_back(word.substr(i, n));
    i += n;
  }
  // The lowest-ranked adjacent pair merges first (the leftmost of equal ranks), as Hugging Face's
  // BPE does without dropout.
  std::string key;
  while (symbols.size() > 1) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).push_back('\xff');
      key.append(symbols[i + 1]);
      auto rank = merge_rank_.find(key);
      if (rank != merge_rank_.end() && rank->second < best) {
        best = rank->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    symbols[at] += symbols[at + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  for (const std::string& symbol : symbols) {
    auto id = vocab_.find(symbol);
    if (id != vocab_.end()) {
      ids->push_back(id->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : symbol) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
        auto byte = vocab_.find(name);
        all &= byte != vocab_.end();
        if (byte != vocab_.end()) ids->push_back(byte->second);
      }
      if (all) continue;
    }
    ES_CHECK_OR_RETURN_ERROR(unk_id_ >= 0, Error::NotFound,
                             "%s: no token for '%s' (no byte fallback, no unknown token)",
                             name_.c_str(), symbol.c_str());
    ids->push_back(unk_id_);
  }
  return Status();
}

// Text without added tokens: split by each pre-tokenizer regex in turn (matches and the gaps
// between them are pieces: Split's Isolated behavior), then BPE per piece.
Status BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>* ids) const {
  if (text.empty()) return Status();
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  for (const std::unique_ptr<Regex>& regex : splits_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    ES_CHECK_OR_RETURN_ERROR(match != nullptr, Error::MemoryAllocationFailed,
                             "%s: no memory for a regex match", name_.c_str());
    next.clear();
    for (std::string_view piece : pieces) {
      size_t start = 0;
      size_t gap = 0;
      while (start < piece.size()) {
        const int rc = pcre2_match(regex->code, reinterpret_cast<PCRE2_SPTR>(piece.data()),
                                   piece.size(), start, PCRE2_NO_UTF_CHECK, match, nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t begin = ovector[0], end = ovector[1];
        if (end == begin) {  // an empty match: move on by one character
          start = begin + CharLength(piece, begin);
          continue;
        }
        if (begin > gap) next.push_back(piece.substr(gap, begin - gap));
        next.push_back(piece.substr(begin, end - begin));
        start = gap = end;
      }
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    pcre2_match_data_free(match);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) ES_RETURN_IF_ERROR(encode_piece(piece, ids));
  return Status();
}

Result<std::vector<int64_t>> BpeTokenizer::encode(std::string_view text,
                                                  bool add_special_tokens) const {
  ES_CHECK_OR_RETURN_ERROR(IsUtf8(text), Error::InvalidArgument,
                           "%s: the text to encode is not UTF-8", name_.c_str());
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  // Added tokens first: at each position the earliest match, the longest of those.
  size_t done = 0;
  while (done < text.size()) {
    size_t best_at = std::string_view::npos;
    const Added* best = nullptr;
    for (const Added& added : added_) {
      const size_t at = text.find(added.content, done);
      if (at == std::string_view::npos) continue;
      if (best == nullptr || at < best_at ||
          (at == best_at && added.content.size() > best->content.size())) {
        best_at = at;
        best = &added;
      }
    }
    if (best == nullptr) break;
    ES_RETURN_IF_ERROR(encode_ordinary(text.substr(done, best_at - done), &ids));
    ids.push_back(best->id);
    done = best_at + best->content.size();
  }
  ES_RETURN_IF_ERROR(encode_ordinary(text.substr(done), &ids));
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

}  // namespace generation
}  // namespace edgeshare
