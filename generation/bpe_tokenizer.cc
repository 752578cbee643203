#include "edgeshare/generation/bpe_tokenizer.h"

#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <queue>
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
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
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
// as U+FFFD; a valid but incomplete sequence at the end is left unconsumed unless `final`. Returns
// the bytes consumed.
size_t DecodeUtf8(std::string_view s, std::string* out, bool final) {
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
      i = j;
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
  return DecodeUtf8(s, &scratch, true) == s.size() && scratch.size() == s.size() && scratch == s;
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

void append_utf8_lossy(std::string_view bytes, std::string* out) { DecodeUtf8(bytes, out, true); }

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

namespace {

// The code point at s[i] (valid UTF-8) and its length in bytes.
uint32_t CodePointAt(std::string_view s, size_t i, size_t* length) {
  const size_t n = CharLength(s, i);
  *length = n;
  const uint8_t b = static_cast<uint8_t>(s[i]);
  if (n == 1) return b;
  uint32_t cp = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Unicode's White_Space property, which Rust's char::is_whitespace (added tokens' lstrip / rstrip,
// the Strip normalizer) tests.
bool IsWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Where the whitespace before `end` starts (not before `floor`).
size_t SkipWhitespaceBack(std::string_view s, size_t floor, size_t end) {
  while (end > floor) {
    size_t start = end - 1;
    while (start > floor && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t n = 0;
    if (!IsWhitespace(CodePointAt(s, start, &n))) break;
    end = start;
  }
  return end;
}

// Where the whitespace from `begin` ends.
size_t SkipWhitespace(std::string_view s, size_t begin) {
  while (begin < s.size()) {
    size_t n = 0;
    if (!IsWhitespace(CodePointAt(s, begin, &n))) break;
    begin += n;
  }
  return begin;
}

// Appends text with each occurrence of pattern (left to right, not overlapping) as content.
void ReplaceAll(std::string_view text, std::string_view pattern, std::string_view content,
                std::string* out) {
  if (pattern.empty()) {
    out->append(text);
    return;
  }
  size_t done = 0;
  for (size_t at = text.find(pattern); at != std::string_view::npos;
       at = text.find(pattern, done)) {
    out->append(text.substr(done, at - done)).append(content);
    done = at + pattern.size();
  }
  out->append(text.substr(done));
}

// A Split's or Replace's pattern: {"String": s} or {"Regex": r}.
struct Pattern {
  bool regex = false;
  std::string text;
};

Result<Pattern> PatternOf(const Json& node, const char* file, const char* what) {
  const Json& pattern = Get(node, "pattern");
  if (Get(pattern, "String").is_string())
    return Pattern{false, pattern["String"].get<std::string>()};
  if (Get(pattern, "Regex").is_string()) return Pattern{true, pattern["Regex"].get<std::string>()};
  return Status::Format(Error::InvalidData, "%s: %s has no String or Regex pattern", file, what);
}

// The steps of a node that may be a Sequence (under `key`) or a single step.
std::vector<const Json*> Steps(const Json& node, const char* key) {
  std::vector<const Json*> steps;
  if (node.is_null()) return steps;
  if (TypeOf(node) == "Sequence" && Get(node, key).is_array()) {
    for (const Json& step : node[key]) steps.push_back(&step);
  } else {
    steps.push_back(&node);
  }
  return steps;
}

// The symbols of `word` (its characters) after BPE's merges: the lowest-ranked adjacent pair merges
// first (the leftmost of equal ranks), as Hugging Face's BPE does without dropout. A queue of
// candidate pairs makes a word of n characters cost O(n log n): SentencePiece-style files hand the
// whole text to BPE as one word.
std::vector<std::string_view> MergeByRank(
    std::string_view word, const std::unordered_map<std::string, int32_t>& merge_rank) {
  struct Symbol {
    size_t begin, size;  // bytes of `word`; size 0 once merged into its left neighbour
    ptrdiff_t prev, next;
  };
  struct Candidate {
    int32_t rank;
    size_t left;      // the left symbol's index
    size_t combined;  // the pair's size in bytes when queued: a stale entry no longer matches
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < word.size();) {
    const size_t n = CharLength(word, i);
    const ptrdiff_t index = static_cast<ptrdiff_t>(symbols.size());
    symbols.push_back({i, n, index - 1, index + 1});
    i += n;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  std::string key;
  auto consider = [&](ptrdiff_t left) {
    if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    key.assign(word.substr(a.begin, a.size)).push_back('\xff');
    key.append(word.substr(b.begin, b.size));
    auto rank = merge_rank.find(key);
    if (rank != merge_rank.end()) {
      queue.push({rank->second, static_cast<size_t>(left), a.size + b.size});
    }
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<ptrdiff_t>(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.size == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (left.size + right.size != top.combined) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (left.next >= 0) {
      symbols[static_cast<size_t>(left.next)].prev = static_cast<ptrdiff_t>(top.left);
    }
    consider(left.prev);
    consider(static_cast<ptrdiff_t>(top.left));
  }
  std::vector<std::string_view> merged;
  for (ptrdiff_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    merged.push_back(
        word.substr(symbols[static_cast<size_t>(i)].begin, symbols[static_cast<size_t>(i)].size));
  }
  return merged;
}

// Split's behaviors (Hugging Face's SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }

  static Result<std::unique_ptr<Regex>> compile(const std::string& pattern, const char* file,
                                                const char* what) {
    auto regex = std::make_unique<Regex>();
    int code = 0;
    PCRE2_SIZE offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      return Status::Format(Error::InvalidData, "%s: %s regex at offset %zu: %s", file, what,
                            static_cast<size_t>(offset), reinterpret_cast<char*>(message));
    }
    return regex;
  }

  // The non-empty matches in `text`, in order, as [begin, end) byte ranges.
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
    ES_CHECK_OR_RETURN_ERROR(match != nullptr, Error::MemoryAllocationFailed,
                             "no memory for a regex match");
    size_t start = 0;
    while (start < text.size()) {
      const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                 start, PCRE2_NO_UTF_CHECK, match, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      const size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // an empty match: move on by one character
        start = begin + CharLength(text, begin);
        continue;
      }
      matches->emplace_back(begin, end);
      start = end;
    }
    pcre2_match_data_free(match);
    return Status();
  }
};

// A piece of text on its way through the pre-tokenizer: `at_start` when it begins the input (a
// Metaspace with prepend_scheme "first" prepends only there).
struct BpeTokenizer::Piece {
  std::string text;
  bool at_start;
};

struct BpeTokenizer::Normalizer {
  enum class Kind { kReplace, kPrepend, kUnicode, kLowercase, kStrip };
  Kind kind;
  std::string pattern;           // Replace's String pattern
  std::unique_ptr<Regex> regex;  // or its Regex pattern
  std::string content;           // Replace's and Prepend's text
  int unicode_options = 0;       // utf8proc's flags for NFC, NFD, NFKC, NFKD
  bool strip_left = false, strip_right = false;

  Status apply(std::string* text) const {
    std::string out;
    switch (kind) {
      case Kind::kReplace:
        if (regex == nullptr) {
          ReplaceAll(*text, pattern, content, &out);
        } else {
          std::vector<std::pair<size_t, size_t>> matches;
          ES_RETURN_IF_ERROR(regex->find_all(*text, &matches));
          size_t done = 0;
          for (const auto& [begin, end] : matches) {
            out.append(*text, done, begin - done).append(content);
            done = end;
          }
          out.append(*text, done, std::string::npos);
        }
        break;
      case Kind::kPrepend:
        if (text->empty()) return Status();
        out = content + *text;
        break;
      case Kind::kUnicode: {
        utf8proc_uint8_t* mapped = nullptr;
        const utf8proc_ssize_t n =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                         static_cast<utf8proc_ssize_t>(text->size()), &mapped,
                         static_cast<utf8proc_option_t>(unicode_options));
        ES_CHECK_OR_RETURN_ERROR(n >= 0, Error::InvalidArgument, "Unicode normalization: %s",
                                 utf8proc_errmsg(n));
        out.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
        std::free(mapped);
        break;
      }
      case Kind::kLowercase:
        // Rust's char::to_lowercase: the simple mapping, except U+0130 whose full lowercase is
        // two characters (SpecialCasing's one unconditional lowercase entry).
        for (size_t i = 0, n = 0; i < text->size(); i += n) {
          const uint32_t cp = CodePointAt(*text, i, &n);
          if (cp == 0x130) {
            out.append("i\xCC\x87");
          } else {
            AppendCodePoint(static_cast<uint32_t>(utf8proc_tolower(static_cast<int32_t>(cp))),
                            &out);
          }
        }
        break;
      case Kind::kStrip: {
        const size_t begin = strip_left ? SkipWhitespace(*text, 0) : 0;
        const size_t end =
            strip_right ? SkipWhitespaceBack(*text, begin, text->size()) : text->size();
        out.assign(*text, begin, end - begin);
        break;
      }
    }
    text->swap(out);
    return Status();
  }
};

struct BpeTokenizer::PreTokenizer {
  enum class Kind { kSplit, kPrefixSpace, kMetaspace };
  enum class Prepend { kFirst, kAlways, kNever };
  Kind kind;
  std::string literal;           // Split's String pattern
  std::unique_ptr<Regex> regex;  // or its Regex pattern
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  std::string replacement;  // Metaspace's
  Prepend prepend = Prepend::kAlways;
  bool split = true;

  Status apply(const std::vector<Piece>& in, std::vector<Piece>* out) const {
    for (const Piece& piece : in) {
      switch (kind) {
        case Kind::kSplit:
          ES_RETURN_IF_ERROR(split_piece(piece, out));
          break;
        case Kind::kPrefixSpace:
          out->push_back(piece);
          if (piece.text.empty() || piece.text[0] != ' ') out->back().text.insert(0, " ");
          break;
        case Kind::kMetaspace: {
          std::string text;
          ReplaceAll(piece.text, " ", replacement, &text);
          const bool prepend_here =
              prepend == Prepend::kAlways || (prepend == Prepend::kFirst && piece.at_start);
          if (prepend_here && text.compare(0, replacement.size(), replacement) != 0) {
            text.insert(0, replacement);
          }
          if (!split) {
            out->push_back({std::move(text), piece.at_start});
            break;
          }
          // Split on the replacement, each one starting a piece (MergedWithNext).
          size_t begin = 0;
          for (size_t at = text.find(replacement, 1); at != std::string::npos;
               at = text.find(replacement, at + replacement.size())) {
            if (at > begin)
              out->push_back({text.substr(begin, at - begin), piece.at_start && begin == 0});
            begin = at;
          }
          if (begin < text.size())
            out->push_back({text.substr(begin), piece.at_start && begin == 0});
          break;
        }
      }
    }
    return Status();
  }

  // Hugging Face's NormalizedString::split: the pattern's matches and the gaps between them, the
  // matches swapped with the gaps when inverted, merged or dropped as the behavior says; empty
  // pieces dropped.
  Status split_piece(const Piece& piece, std::vector<Piece>* out) const {
    const std::string& text = piece.text;
    std::vector<std::pair<size_t, size_t>> matches;
    if (regex != nullptr) {
      ES_RETURN_IF_ERROR(regex->find_all(text, &matches));
    } else if (!literal.empty()) {
      for (size_t at = text.find(literal); at != std::string::npos;
           at = text.find(literal, at + literal.size())) {
        matches.emplace_back(at, at + literal.size());
      }
    }
    struct Part {
      size_t begin, end;
      bool match;
    };
    std::vector<Part> parts;
    size_t done = 0;
    for (const auto& [begin, end] : matches) {
      if (begin > done) parts.push_back({done, begin, invert});
      parts.push_back({begin, end, !invert});
      done = end;
    }
    if (done < text.size()) parts.push_back({done, text.size(), invert});

    std::vector<Part> merged;
    bool previous_match = false;
    switch (behavior) {
      case Behavior::kRemoved:
        for (const Part& part : parts) {
          if (!part.match) merged.push_back(part);
        }
        break;
      case Behavior::kIsolated:
        merged = parts;
        break;
      case Behavior::kMergedWithPrevious:
        for (const Part& part : parts) {
          if (part.match && !previous_match && !merged.empty()) {
            merged.back().end = part.end;
          } else {
            merged.push_back(part);
          }
          previous_match = part.match;
        }
        break;
      case Behavior::kMergedWithNext:
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
          if (it->match && !previous_match && !merged.empty()) {
            merged.back().begin = it->begin;
          } else {
            merged.push_back(*it);
          }
          previous_match = it->match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      case Behavior::kContiguous:
        for (size_t i = 0; i < parts.size(); ++i) {
          if (i > 0 && parts[i].match == previous_match) {
            merged.back().end = parts[i].end;
          } else {
            merged.push_back(parts[i]);
          }
          previous_match = parts[i].match;
        }
        break;
    }
    for (const Part& part : merged) {
      if (part.end > part.begin) {
        out->push_back(
            {text.substr(part.begin, part.end - part.begin), piece.at_start && part.begin == 0});
      }
    }
    return Status();
  }
};

struct BpeTokenizer::Added {
  std::string content;
  std::string match;  // what is looked for: the content, normalized when `normalized`
  int64_t id;
  bool special;
  bool normalized;
  bool lstrip, rstrip;
};

// How ids become text: the decoder's steps, and each token's text after the steps that work one
// token at a time.
struct BpeTokenizer::Decoder {
  enum class Kind {
    kJoin,       // no decoder: tokens joined by spaces
    kByteLevel,  // tokens' characters back to bytes, the whole repaired as UTF-8
    kText,       // Replace / Metaspace / ByteFallback / Fuse / Strip
  };
  Kind kind = Kind::kJoin;
  std::vector<std::pair<std::string, std::string>> replaces;  // per token, in order
  std::string metaspace;               // a Metaspace decoder's replacement, "" for none
  bool metaspace_drops_first = false;  // its replacements in the first token vanish
  bool byte_fallback = false;
  bool fused = false;
  size_t strip_start = 0;  // Strip after Fuse: this many leading `strip_content` dropped
  std::string strip_content;

  struct Token {
    std::string text;        // bytes for kByteLevel; the text after per-token steps otherwise
    std::string first_text;  // the same as the first token, when metaspace_drops_first
    int16_t byte = -1;       // a <0xNN> token's byte when byte_fallback
    bool special = false;
    bool known = false;
  };
  std::vector<Token> tokens;  // by id

  void set(int64_t id, const std::string& token, bool special) {
    Token& t = tokens[static_cast<size_t>(id)];
    t = Token();
    t.known = true;
    t.special = special;
    if (kind == Kind::kByteLevel) {
      t.text = ByteLevelBytes(token);
      return;
    }
    if (kind == Kind::kJoin) {
      t.text = token;
      return;
    }
    if (byte_fallback && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(token[3])) &&
        std::isxdigit(static_cast<unsigned char>(token[4]))) {
      t.byte = static_cast<int16_t>(std::strtol(token.substr(3, 2).c_str(), nullptr, 16));
    }
    std::string text = token;
    for (const auto& [pattern, content] : replaces) {
      std::string next;
      ReplaceAll(text, pattern, content, &next);
      text.swap(next);
    }
    if (!metaspace.empty()) {
      ReplaceAll(text, metaspace, " ", &t.text);
      if (metaspace_drops_first) ReplaceAll(text, metaspace, "", &t.first_text);
    } else {
      t.text = std::move(text);
    }
  }

  // A byte-level token's bytes; a token with characters outside the byte map is its own UTF-8.
  static std::string ByteLevelBytes(const std::string& token) {
    const ByteMap& map = Bytes();
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const size_t n = CharLength(token, i);
      auto b = map.to_byte.find(token.substr(i, n));
      if (b == map.to_byte.end()) return token;
      bytes.push_back(static_cast<char>(b->second));
      i += n;
    }
    return bytes;
  }
};

// Decodes as Hugging Face's decoders do, token by token: ByteLevel's bytes repaired as UTF-8
// across tokens; a run of byte-fallback tokens as its UTF-8 text or, when that is invalid, one
// U+FFFD per token; Strip's leading characters dropped from the start of the text.
class BpeTokenizer::Stream final : public TextStream {
 public:
  Stream(const Decoder* decoder, bool skip_special_tokens)
      : decoder_(decoder), skip_special_tokens_(skip_special_tokens) {
    restart();
  }

  void add(int64_t id, std::string* out) override {
    if (id < 0 || static_cast<size_t>(id) >= decoder_->tokens.size()) return;
    const Decoder::Token& token = decoder_->tokens[static_cast<size_t>(id)];
    if (!token.known || (token.special && skip_special_tokens_)) return;
    const bool first = index_++ == 0;
    switch (decoder_->kind) {
      case Decoder::Kind::kByteLevel:
        utf8_.add(token.text, out);
        return;
      case Decoder::Kind::kJoin:
        if (!first) out->push_back(' ');
        out->append(token.text);
        return;
      case Decoder::Kind::kText:
        if (token.byte >= 0) {
          run_.push_back(static_cast<char>(token.byte));
          ++run_tokens_;
          return;
        }
        flush(out);
        emit(first && decoder_->metaspace_drops_first ? token.first_text : token.text, out);
        return;
    }
  }

  void finish(std::string* out) override {
    if (decoder_->kind == Decoder::Kind::kByteLevel) utf8_.finish(out);
    flush(out);
    restart();
  }

 private:
  void restart() {
    index_ = 0;
    strip_left_ = decoder_->strip_start;
  }

  void flush(std::string* out) {
    if (run_tokens_ == 0) return;
    if (IsUtf8(run_)) {
      emit(run_, out);
    } else {
      std::string replacement;
      for (size_t i = 0; i < run_tokens_; ++i) replacement.append(kReplacement);
      emit(replacement, out);
    }
    run_.clear();
    run_tokens_ = 0;
  }

  void emit(std::string_view text, std::string* out) {
    const std::string& strip = decoder_->strip_content;
    while (strip_left_ > 0 && !text.empty()) {
      if (text.compare(0, strip.size(), strip) != 0) {
        strip_left_ = 0;
        break;
      }
      text.remove_prefix(strip.size());
      --strip_left_;
    }
    out->append(text);
  }

  const Decoder* decoder_;
  bool skip_special_tokens_;
  size_t index_ = 0;       // tokens seen since the start
  size_t strip_left_ = 0;  // leading characters Strip may still drop
  Utf8Stream utf8_;        // kByteLevel's bytes
  std::string run_;        // kText's run of byte-fallback tokens
  size_t run_tokens_ = 0;
};

// Reads tokenizer.json into a BpeTokenizer, one part at a time.
class BpeTokenizer::Parser {
 public:
  Parser(const char* file, BpeTokenizer* t) : file_(file), t_(t) {}

  Status model(const Json& model, int64_t* max_id) {
    ES_CHECK_OR_RETURN_ERROR(TypeOf(model) == "BPE", Error::NotSupported,
                             "%s: model '%s' is not supported (only BPE)", file_,
                             TypeOf(model).c_str());
    ES_CHECK_OR_RETURN_ERROR(Get(model, "vocab").is_object(), Error::InvalidData,
                             "%s: the model has no vocab", file_);
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
      ES_CHECK_OR_RETURN_ERROR(it.value().is_number_unsigned(), Error::InvalidData,
                               "%s: vocab entry '%s' has no id", file_, it.key().c_str());
      const int64_t id = it.value().get<int64_t>();
      t_->vocab_[it.key()] = id;
      *max_id = std::max(*max_id, id);
    }
    int32_t rank = 0;
    const Json& merges = Get(model, "merges");
    for (size_t i = 0; merges.is_array() && i < merges.size(); ++i) {
      const Json& merge = merges[i];
      std::string left, right;
      if (merge.is_string()) {
        const std::string pair = merge.get<std::string>();
        const size_t space = pair.find(' ');
        ES_CHECK_OR_RETURN_ERROR(space != std::string::npos, Error::InvalidData,
                                 "%s: merge '%s' is not 'left right'", file_, pair.c_str());
        left = pair.substr(0, space);
        right = pair.substr(space + 1);
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                 merge[1].is_string()) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else {
        return Status::Format(Error::InvalidData, "%s: merge %d is malformed", file_, rank);
      }
      t_->merge_rank_.emplace(left + '\xff' + right, rank++);
    }
    t_->ignore_merges_ = Flag(model, "ignore_merges", false);
    t_->byte_fallback_ = Flag(model, "byte_fallback", false);
    t_->fuse_unk_ = Flag(model, "fuse_unk", false);
    if (Get(model, "unk_token").is_string()) {
      auto unk = t_->vocab_.find(model["unk_token"].get<std::string>());
      if (unk != t_->vocab_.end()) t_->unk_id_ = unk->second;
    }
    ES_CHECK_OR_RETURN_ERROR(Get(model, "dropout").is_null() || Get(model, "dropout") == 0.0,
                             Error::NotSupported, "%s: BPE dropout is not supported", file_);
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const Json& value = Get(model, affix);
      ES_CHECK_OR_RETURN_ERROR(value.is_null() || value == "", Error::NotSupported,
                               "%s: BPE %s is not supported", file_, affix);
    }
    return Status();
  }

  Status normalizer(const Json& node) {
    for (const Json* step : Steps(node, "normalizers")) {
      const std::string type = TypeOf(*step);
      Normalizer n{};
      if (type == "Replace") {
        n.kind = Normalizer::Kind::kReplace;
        ES_ASSIGN_OR_RETURN(Pattern pattern, PatternOf(*step, file_, "a Replace normalizer"));
        ES_CHECK_OR_RETURN_ERROR(Get(*step, "content").is_string(), Error::InvalidData,
                                 "%s: a Replace normalizer has no content", file_);
        n.content = (*step)["content"].get<std::string>();
        if (pattern.regex) {
          ES_ASSIGN_OR_RETURN(n.regex, Regex::compile(pattern.text, file_, "normalizer"));
        } else {
          n.pattern = pattern.text;
        }
      } else if (type == "Prepend") {
        n.kind = Normalizer::Kind::kPrepend;
        ES_CHECK_OR_RETURN_ERROR(Get(*step, "prepend").is_string(), Error::InvalidData,
                                 "%s: a Prepend normalizer has no prepend", file_);
        n.content = (*step)["prepend"].get<std::string>();
      } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
        n.kind = Normalizer::Kind::kUnicode;
        n.unicode_options = UTF8PROC_STABLE |
                            (type[type.size() - 1] == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
        if (type[2] == 'K') n.unicode_options |= UTF8PROC_COMPAT;
      } else if (type == "Lowercase") {
        n.kind = Normalizer::Kind::kLowercase;
      } else if (type == "Strip") {
        n.kind = Normalizer::Kind::kStrip;
        n.strip_left = Flag(*step, "strip_left", true);
        n.strip_right = Flag(*step, "strip_right", true);
      } else {
        return Status::Format(Error::NotSupported, "%s: normalizer '%s' is not supported", file_,
                              type.c_str());
      }
      t_->normalizers_.push_back(std::move(n));
    }
    return Status();
  }

  Status pre_tokenizer(const Json& node) {
    for (const Json* step : Steps(node, "pretokenizers")) {
      const std::string type = TypeOf(*step);
      ES_CHECK_OR_RETURN_ERROR(!t_->byte_level_, Error::NotSupported,
                               "%s: pre-tokenizer '%s' after ByteLevel is not supported", file_,
                               type.c_str());
      PreTokenizer p{};
      if (type == "ByteLevel") {
        if (Flag(*step, "add_prefix_space", false)) {
          p.kind = PreTokenizer::Kind::kPrefixSpace;
          t_->pre_tokenizers_.push_back(std::move(p));
        }
        if (Flag(*step, "use_regex", true)) ES_RETURN_IF_ERROR(add_split(kGpt2Pattern));
        t_->byte_level_ = true;
        continue;
      }
      if (type == "Digits") {
        ES_RETURN_IF_ERROR(
            add_split(Flag(*step, "individual_digits", false) ? "\\p{N}" : "\\p{N}+"));
        continue;
      }
      if (type == "Split") {
        ES_ASSIGN_OR_RETURN(Pattern pattern, PatternOf(*step, file_, "a Split pre-tokenizer"));
        const Json& behavior = Get(*step, "behavior");
        const std::pair<const char*, Behavior> behaviors[] = {
            {"Removed", Behavior::kRemoved},
            {"Isolated", Behavior::kIsolated},
            {"MergedWithPrevious", Behavior::kMergedWithPrevious},
            {"MergedWithNext", Behavior::kMergedWithNext},
            {"Contiguous", Behavior::kContiguous}};
        auto found = std::find_if(std::begin(behaviors), std::end(behaviors),
                                  [&](const auto& b) { return behavior == b.first; });
        ES_CHECK_OR_RETURN_ERROR(found != std::end(behaviors), Error::NotSupported,
                                 "%s: Split behavior '%s' is not supported", file_,
                                 behavior.is_string() ? behavior.get<std::string>().c_str() : "");
        p.kind = PreTokenizer::Kind::kSplit;
        p.behavior = found->second;
        p.invert = Flag(*step, "invert", false);
        if (pattern.regex) {
          ES_ASSIGN_OR_RETURN(p.regex, Regex::compile(pattern.text, file_, "pre-tokenizer"));
        } else {
          p.literal = pattern.text;
        }
      } else if (type == "Metaspace") {
        p.kind = PreTokenizer::Kind::kMetaspace;
        ES_ASSIGN_OR_RETURN(p.replacement, Replacement(*step));
        ES_ASSIGN_OR_RETURN(p.prepend, PrependScheme(*step));
        p.split = Flag(*step, "split", true);
      } else {
        return Status::Format(Error::NotSupported, "%s: pre-tokenizer '%s' is not supported", file_,
                              type.c_str());
      }
      t_->pre_tokenizers_.push_back(std::move(p));
    }
    return Status();
  }

  Status added_tokens(const Json& node, int64_t* max_id) {
    for (size_t i = 0; node.is_array() && i < node.size(); ++i) {
      const Json& token = node[i];
      ES_CHECK_OR_RETURN_ERROR(
          Get(token, "id").is_number_unsigned() && Get(token, "content").is_string() &&
              !token["content"].get<std::string>().empty(),
          Error::InvalidData, "%s: an added token without id or content", file_);
      const std::string content = token["content"].get<std::string>();
      ES_CHECK_OR_RETURN_ERROR(!Flag(token, "single_word", false), Error::NotSupported,
                               "%s: added token '%s' matches single words, which is not "
                               "supported",
                               file_, content.c_str());
      const bool special = Flag(token, "special", false);
      Added added{content,
                  content,
                  token["id"].get<int64_t>(),
                  special,
                  Flag(token, "normalized", !special),
                  Flag(token, "lstrip", false),
                  Flag(token, "rstrip", false)};
      if (added.normalized) {
        ES_ASSIGN_OR_RETURN(added.match, t_->normalize(content));
      }
      *max_id = std::max(*max_id, added.id);
      t_->added_.push_back(std::move(added));
    }
    // By first byte, longest first: the first candidate matching at a position is the one
    // leftmost-longest matching takes there.
    t_->added_by_byte_.assign(512, {});
    for (uint32_t i = 0; i < t_->added_.size(); ++i) {
      const Added& added = t_->added_[i];
      if (added.match.empty()) continue;
      t_->added_by_byte_[(added.normalized ? 256 : 0) + static_cast<uint8_t>(added.match[0])]
          .push_back(i);
    }
    for (std::vector<uint32_t>& candidates : t_->added_by_byte_) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](uint32_t a, uint32_t b) {
        return t_->added_[a].match.size() > t_->added_[b].match.size();
      });
    }
    return Status();
  }

  Status post_processor(const Json& node) {
    for (const Json* step : Steps(node, "processors")) {
      const std::string type = TypeOf(*step);
      if (type == "ByteLevel") continue;
      ES_CHECK_OR_RETURN_ERROR(type == "TemplateProcessing", Error::NotSupported,
                               "%s: post-processor '%s' is not supported", file_, type.c_str());
      const Json& single = Get(*step, "single");
      const Json& specials = Get(*step, "special_tokens");
      ES_CHECK_OR_RETURN_ERROR(single.is_array(), Error::InvalidData,
                               "%s: TemplateProcessing without a single template", file_);
      bool after = false;
      for (const Json& item : single) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        const Json& id = Get(Get(item, "SpecialToken"), "id");
        ES_CHECK_OR_RETURN_ERROR(id.is_string(), Error::InvalidData,
                                 "%s: a template item is malformed", file_);
        const std::string key = id.get<std::string>();
        const Json& ids = Get(Get(specials, key.c_str()), "ids");
        ES_CHECK_OR_RETURN_ERROR(ids.is_array(), Error::InvalidData,
                                 "%s: template token '%s' has no ids", file_, key.c_str());
        for (const Json& value : ids) {
          ES_CHECK_OR_RETURN_ERROR(value.is_number_unsigned(), Error::InvalidData,
                                   "%s: template token '%s' has a bad id", file_, key.c_str());
          (after ? t_->suffix_ids_ : t_->prefix_ids_).push_back(value.get<int64_t>());
        }
      }
    }
    return Status();
  }

  Status decoder(const Json& node) {
    auto d = std::make_unique<Decoder>();
    const std::vector<const Json*> steps = Steps(node, "decoders");
    if (steps.size() == 1 && TypeOf(*steps[0]) == "ByteLevel") {
      d->kind = Decoder::Kind::kByteLevel;
    } else if (!steps.empty()) {
      d->kind = Decoder::Kind::kText;
    }
    for (const Json* step : steps) {
      const std::string type = TypeOf(*step);
      if (d->kind == Decoder::Kind::kByteLevel) break;
      const bool per_token = type == "Replace" || type == "Metaspace";
      ES_CHECK_OR_RETURN_ERROR(!per_token || (!d->byte_fallback && !d->fused), Error::NotSupported,
                               "%s: decoder '%s' after ByteFallback or Fuse is not supported",
                               file_, type.c_str());
      if (type == "Replace") {
        ES_ASSIGN_OR_RETURN(Pattern pattern, PatternOf(*step, file_, "a Replace decoder"));
        ES_CHECK_OR_RETURN_ERROR(!pattern.regex && Get(*step, "content").is_string(),
                                 Error::NotSupported,
                                 "%s: a Replace decoder other than String -> text is not "
                                 "supported",
                                 file_);
        d->replaces.emplace_back(pattern.text, (*step)["content"].get<std::string>());
      } else if (type == "Metaspace") {
        ES_CHECK_OR_RETURN_ERROR(d->metaspace.empty(), Error::NotSupported,
                                 "%s: two Metaspace decoders are not supported", file_);
        ES_ASSIGN_OR_RETURN(d->metaspace, Replacement(*step));
        ES_ASSIGN_OR_RETURN(PreTokenizer::Prepend prepend, PrependScheme(*step));
        d->metaspace_drops_first = prepend != PreTokenizer::Prepend::kNever;
      } else if (type == "ByteFallback") {
        d->byte_fallback = true;
      } else if (type == "ByteLevel") {
        return Status::Format(Error::NotSupported,
                              "%s: a ByteLevel decoder with other steps is not supported", file_);
      } else if (type == "Fuse") {
        d->fused = true;
      } else if (type == "Strip") {
        const Json& content = Get(*step, "content");
        const Json& start = Get(*step, "start");
        const Json& stop = Get(*step, "stop");
        ES_CHECK_OR_RETURN_ERROR(
            d->fused && content.is_string() && start.is_number_unsigned() && stop == 0,
            Error::NotSupported,
            "%s: a Strip decoder other than of leading characters after "
            "Fuse is not supported",
            file_);
        d->strip_content = content.get<std::string>();
        d->strip_start = d->strip_content.empty() ? 0 : start.get<size_t>();
      } else {
        return Status::Format(Error::NotSupported, "%s: decoder '%s' is not supported", file_,
                              type.c_str());
      }
    }
    t_->decoder_ = std::move(d);
    return Status();
  }

  // id -> what it decodes to.
  Status token_table(int64_t max_id) {
    ES_CHECK_OR_RETURN_ERROR(max_id >= 0 && max_id < (int64_t{1} << 31), Error::InvalidData,
                             "%s: no tokens, or ids past 2^31", file_);
    Decoder& d = *t_->decoder_;
    d.tokens.assign(static_cast<size_t>(max_id) + 1, Decoder::Token());
    for (const auto& [token, id] : t_->vocab_) d.set(id, token, false);
    // A normalized added token decodes as its normalized text, as Hugging Face stores it.
    for (const Added& added : t_->added_) {
      d.set(added.id, added.match, added.special);
      t_->vocab_.emplace(added.content, added.id);
      t_->vocab_.emplace(added.match, added.id);
    }
    return Status();
  }

 private:
  Status add_split(const char* pattern) {
    PreTokenizer p{};
    p.kind = PreTokenizer::Kind::kSplit;
    ES_ASSIGN_OR_RETURN(p.regex, Regex::compile(pattern, file_, "pre-tokenizer"));
    t_->pre_tokenizers_.push_back(std::move(p));
    return Status();
  }

  Result<std::string> Replacement(const Json& step) {
    const Json& replacement = Get(step, "replacement");
    ES_CHECK_OR_RETURN_ERROR(replacement.is_string() && !replacement.get<std::string>().empty(),
                             Error::InvalidData, "%s: a Metaspace without a replacement", file_);
    return replacement.get<std::string>();
  }

  // prepend_scheme, or the older add_prefix_space: true is "always".
  Result<PreTokenizer::Prepend> PrependScheme(const Json& step) {
    const Json& scheme = Get(step, "prepend_scheme");
    if (scheme.is_null()) {
      return Flag(step, "add_prefix_space", true) ? PreTokenizer::Prepend::kAlways
                                                  : PreTokenizer::Prepend::kNever;
    }
    if (scheme == "first") return PreTokenizer::Prepend::kFirst;
    if (scheme == "always") return PreTokenizer::Prepend::kAlways;
    if (scheme == "never") return PreTokenizer::Prepend::kNever;
    return Status::Format(Error::InvalidData,
                          "%s: Metaspace prepend_scheme must be first, always "
                          "or never",
                          file_);
  }

  const char* file_;
  BpeTokenizer* t_;
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

Result<BpeTokenizer> BpeTokenizer::load(const std::string& path) {
  ES_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return parse(text, path);
}

// The normalizer comes before the added tokens (normalized ones are matched in normalized text).
Result<BpeTokenizer> BpeTokenizer::parse(std::string_view text, const std::string& name) {
  const char* file = name.c_str();
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  ES_CHECK_OR_RETURN_ERROR(root.is_object(), Error::InvalidData, "%s is not a JSON object", file);
  BpeTokenizer t;
  t.name_ = name;
  Parser parser(file, &t);
  int64_t max_id = -1;
  ES_RETURN_IF_ERROR(parser.model(Get(root, "model"), &max_id));
  ES_RETURN_IF_ERROR(parser.normalizer(Get(root, "normalizer")));
  ES_RETURN_IF_ERROR(parser.pre_tokenizer(Get(root, "pre_tokenizer")));
  ES_RETURN_IF_ERROR(parser.added_tokens(Get(root, "added_tokens"), &max_id));
  ES_RETURN_IF_ERROR(parser.post_processor(Get(root, "post_processor")));
  ES_RETURN_IF_ERROR(parser.decoder(Get(root, "decoder")));
  ES_RETURN_IF_ERROR(parser.token_table(max_id));
  return t;
}

size_t BpeTokenizer::vocab_size() const { return decoder_->tokens.size(); }

int64_t BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

std::unique_ptr<TextStream> BpeTokenizer::stream(bool skip_special_tokens) const {
  return std::make_unique<Stream>(decoder_.get(), skip_special_tokens);
}

std::string BpeTokenizer::decode(Span<const int64_t> ids, bool skip_special_tokens) const {
  Stream stream(decoder_.get(), skip_special_tokens);
  std::string text;
  for (int64_t id : ids) stream.add(id, &text);
  stream.finish(&text);
  return text;
}

Result<std::string> BpeTokenizer::normalize(std::string_view text) const {
  std::string out(text);
  for (const Normalizer& step : normalizers_) ES_RETURN_IF_ERROR(step.apply(&out));
  return out;
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
  const std::vector<std::string_view> symbols = MergeByRank(word, merge_rank_);
  bool previous_unk = false;
  for (std::string_view view : symbols) {
    const std::string symbol(view);
    auto id = vocab_.find(symbol);
    if (id != vocab_.end()) {
      ids->push_back(id->second);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      std::vector<int64_t> bytes;
      for (char c : symbol) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>",
                      static_cast<unsigned>(static_cast<uint8_t>(c)));
        auto byte = vocab_.find(name);
        if (byte == vocab_.end()) break;
        bytes.push_back(byte->second);
      }
      if (bytes.size() == symbol.size()) {
        ids->insert(ids->end(), bytes.begin(), bytes.end());
        previous_unk = false;
        continue;
      }
    }
    ES_CHECK_OR_RETURN_ERROR(unk_id_ >= 0, Error::NotFound,
                             "%s: no token for '%s' (no byte fallback, no unknown token)",
                             name_.c_str(), symbol.c_str());
    // Consecutive unknown characters make one unknown token when fuse_unk.
    if (!(fuse_unk_ && previous_unk)) ids->push_back(unk_id_);
    previous_unk = true;
  }
  return Status();
}

// Normalized text without added tokens: the pre-tokenizer's steps in turn, then BPE per piece.
Status BpeTokenizer::encode_ordinary(std::string_view text, bool at_start,
                                     std::vector<int64_t>* ids) const {
  if (text.empty()) return Status();
  std::vector<Piece> pieces{{std::string(text), at_start}};
  std::vector<Piece> next;
  for (const PreTokenizer& step : pre_tokenizers_) {
    next.clear();
    ES_RETURN_IF_ERROR(step.apply(pieces, &next));
    pieces.swap(next);
  }
  for (const Piece& piece : pieces) ES_RETURN_IF_ERROR(encode_piece(piece.text, ids));
  return Status();
}

// The leftmost match in text[from:] of an added token whose `normalized` is `normalized`, the
// longest of those, widened over whitespace by lstrip / rstrip (never before `from`), as Hugging
// Face's AddedVocabulary finds them. Returns the token or null; *begin / *end the range.
const BpeTokenizer::Added* BpeTokenizer::find_added(std::string_view text, size_t from,
                                                    bool normalized, size_t* begin,
                                                    size_t* end) const {
  const std::vector<uint32_t>* by_byte = &added_by_byte_[normalized ? 256 : 0];
  for (size_t at = from; at < text.size(); ++at) {
    for (uint32_t index : by_byte[static_cast<uint8_t>(text[at])]) {
      const Added& token = added_[index];
      if (text.compare(at, token.match.size(), token.match) != 0) continue;
      *begin = token.lstrip ? SkipWhitespaceBack(text, from, at) : at;
      *end = at + token.match.size();
      if (token.rstrip) *end = SkipWhitespace(text, *end);
      return &token;
    }
  }
  return nullptr;
}

// Raw text between non-normalized added tokens: normalized, then split by normalized ones.
Status BpeTokenizer::encode_segment(std::string_view segment, bool at_start,
                                    std::vector<int64_t>* ids) const {
  if (segment.empty()) return Status();
  ES_ASSIGN_OR_RETURN(const std::string text, normalize(segment));
  size_t done = 0, begin = 0, end = 0;
  while (const Added* added = find_added(text, done, /*normalized=*/true, &begin, &end)) {
    ES_RETURN_IF_ERROR(encode_ordinary(std::string_view(text).substr(done, begin - done),
                                       at_start && done == 0, ids));
    ids->push_back(added->id);
    done = end;
  }
  return encode_ordinary(std::string_view(text).substr(done), at_start && done == 0, ids);
}

Result<std::vector<int64_t>> BpeTokenizer::encode(std::string_view text,
                                                  bool add_special_tokens) const {
  ES_CHECK_OR_RETURN_ERROR(IsUtf8(text), Error::InvalidArgument,
                           "%s: the text to encode is not UTF-8", name_.c_str());
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  size_t done = 0, begin = 0, end = 0;
  while (const Added* added = find_added(text, done, /*normalized=*/false, &begin, &end)) {
    ES_RETURN_IF_ERROR(encode_segment(text.substr(done, begin - done), done == 0, &ids));
    ids.push_back(added->id);
    done = end;
  }
  ES_RETURN_IF_ERROR(encode_segment(text.substr(done), done == 0, &ids));
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

}  // namespace generation
}  // namespace edgeshare
