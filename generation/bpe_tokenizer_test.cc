// The C++ tokenizer against Hugging Face `tokenizers` on the text fixture's byte-level BPE (trained
// offline by //testing:text_files): equal ids on a multilingual corpus (special and added tokens
// included, text the merges never saw), equal decode of those ids and of generated ids that are
// not valid UTF-8, streaming pieces that concatenate to decode() and never split a character, and
// files it does not implement refused by name. Then the same on each family's tokenizer.json
// (//testing:tokenizer_files: Gemma 3, Qwen2.5, Llama 3, SmolLM2, Phi-3 and Mistral shapes).

#include "edgeshare/generation/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace edgeshare {
namespace generation {
namespace {

using runtime::Span;

std::string Folder() {
  const char* path = std::getenv("TEXT_EXPECTED_JSON");
  std::string p = path ? path : "";
  return p.substr(0, p.rfind('/') + 1);
}

nlohmann::json Expected() {
  std::ifstream file(Folder() + "expected.json");
  return nlohmann::json::parse(file, nullptr, false);
}

BpeTokenizer Load() {
  auto tokenizer = BpeTokenizer::load(Folder() + "tokenizer.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return std::move(*tokenizer);
}

std::vector<int64_t> Ids(const nlohmann::json& list) { return list.get<std::vector<int64_t>>(); }

TEST(BpeTokenizer, ids_and_decode_equal_hugging_face_on_the_corpus) {
  const nlohmann::json expected = Expected();
  ASSERT_TRUE(expected.is_object()) << "TEXT_EXPECTED_JSON is unreadable";
  const BpeTokenizer tokenizer = Load();
  EXPECT_EQ(tokenizer.vocab_size(), 384u);
  const nlohmann::json& corpus = expected["corpus"];
  ASSERT_GE(corpus.size(), 20u);
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const std::vector<int64_t> want = Ids(expected["corpus_ids"][i]);
    auto ids = tokenizer.encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, want) << text;
    const Span<const int64_t> span(want.data(), want.size());
    EXPECT_EQ(tokenizer.decode(span, /*skip_special_tokens=*/false), text);
    EXPECT_EQ(tokenizer.decode(span), expected["corpus_decoded"][i].get<std::string>()) << text;
  }
  auto prompt = tokenizer.encode(expected["prompt"].get<std::string>());
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, Ids(expected["prompt_ids"]));
  EXPECT_EQ(tokenizer.token_to_id("<|im_end|>"), 2);
}

TEST(BpeTokenizer, generated_ids_decode_as_hugging_face_and_stream_in_whole_characters) {
  const nlohmann::json expected = Expected();
  ASSERT_TRUE(expected.is_object());
  const BpeTokenizer tokenizer = Load();
  for (const auto& [name, generated] : expected["generated"].items()) {
    const std::vector<int64_t> ids = Ids(generated["tokens"]);
    const std::string text = generated["text"].get<std::string>();
    EXPECT_EQ(tokenizer.decode(Span<const int64_t>(ids.data(), ids.size())), text) << name;
    std::unique_ptr<TextStream> stream = tokenizer.stream();
    std::string joined, piece;
    for (int64_t id : ids) {
      piece.clear();
      stream->add(id, &piece);
      joined += piece;
    }
    piece.clear();
    stream->finish(&piece);
    EXPECT_EQ(joined + piece, text) << name;
  }
  // Valid text streamed token by token: no piece holds a broken character.
  for (const nlohmann::json& ids : expected["corpus_ids"]) {
    std::unique_ptr<TextStream> stream = tokenizer.stream();
    for (int64_t id : Ids(ids)) {
      std::string piece;
      stream->add(id, &piece);
      EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos);
    }
  }
}

TEST(BpeTokenizer, utf8_repair_replaces_each_maximal_invalid_subpart) {
  std::string out;
  append_utf8_lossy(std::string("a\xE6\x9D" "b\xFF\xF0\x9F\x99\x82\xC3", 10), &out);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xF0\x9F\x99\x82\xEF\xBF\xBD");
  Utf8Stream stream;
  std::string piece;
  stream.add("\xE6\x9D", &piece);
  EXPECT_EQ(piece, "");
  stream.add("\xB1x", &piece);
  EXPECT_EQ(piece, "\xE6\x9D\xB1x");
}

TEST(BpeTokenizer, parts_it_does_not_implement_are_refused_by_name) {
  const char* bert =
      R"({"normalizer": {"type": "BertNormalizer"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  auto refused = BpeTokenizer::parse(bert, "bert.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("bert.json: normalizer 'BertNormalizer'"),
            std::string::npos)
      << refused.status().message();
  auto wordpiece = BpeTokenizer::parse(R"({"model": {"type": "WordPiece", "vocab": {}}})", "w.json");
  ASSERT_FALSE(wordpiece.ok());
  EXPECT_NE(std::string(wordpiece.status().message()).find("model 'WordPiece'"), std::string::npos);
  EXPECT_FALSE(BpeTokenizer::parse("{not json", "bad.json").ok());
  EXPECT_FALSE(BpeTokenizer::load("/nonexistent/tokenizer.json").ok());
  const BpeTokenizer tokenizer = Load();
  EXPECT_FALSE(tokenizer.encode(std::string("\xFF", 1)).ok());
}

// Every part outside what the header lists is refused with the file and the part's name, before
// any text is tokenized differently.
TEST(BpeTokenizer, each_unimplemented_step_is_refused_by_name) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []})";
  const std::pair<std::string, std::string> cases[] = {
      {R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
          {"type": "Precompiled", "precompiled_charsmap": ""}]})",
       "normalizer 'Precompiled' is not supported"},
      {R"("pre_tokenizer": {"type": "Whitespace"})", "pre-tokenizer 'Whitespace' is not supported"},
      {R"("pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"})",
       "Split behavior 'Sideways' is not supported"},
      {R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
          {"type": "Digits"}]})",
       "pre-tokenizer 'Digits' after ByteLevel is not supported"},
      {R"("decoder": {"type": "CTC"})", "decoder 'CTC' is not supported"},
      {R"("decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 0, "stop": 1}]})",
       "a Strip decoder other than of leading characters after Fuse is not supported"},
      {R"("decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
          {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}]})",
       "decoder 'Replace' after ByteFallback or Fuse is not supported"},
      {R"("added_tokens": [{"id": 2, "content": "<x>", "single_word": true}])",
       "added token '<x>' matches single words, which is not supported"},
      {R"("post_processor": {"type": "RobertaProcessing"})",
       "post-processor 'RobertaProcessing' is not supported"},
  };
  for (const auto& [part, message] : cases) {
    auto refused = BpeTokenizer::parse("{" + model + ", " + part + "}", "t.json");
    ASSERT_FALSE(refused.ok()) << part;
    EXPECT_EQ(refused.status().code(), runtime::Error::NotSupported) << part;
    EXPECT_NE(std::string(refused.status().message()).find("t.json: " + message), std::string::npos)
        << refused.status().message();
  }
  auto dropout = BpeTokenizer::parse(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}})", "d.json");
  ASSERT_FALSE(dropout.ok());
  EXPECT_NE(std::string(dropout.status().message()).find("d.json: BPE dropout"), std::string::npos);
}

// Each family's file: ids with and without special tokens, decode with and without them, and
// streamed pieces that concatenate to decode(), on a few hundred texts and random id runs.
TEST(BpeTokenizer, each_family_equals_hugging_face_on_texts_and_random_ids) {
  const char* path = std::getenv("TOKENIZERS_EXPECTED_JSON");
  ASSERT_NE(path, nullptr);
  std::ifstream file(path);
  const nlohmann::json expected = nlohmann::json::parse(file, nullptr, false);
  ASSERT_TRUE(expected.is_object()) << path << " is unreadable";
  const std::string folder = std::string(path).substr(0, std::string(path).rfind('/') + 1);
  ASSERT_GE(expected.size(), 6u);
  for (const auto& [family, cases] : expected.items()) {
    SCOPED_TRACE(family);
    auto loaded = BpeTokenizer::load(folder + family + "/tokenizer.json");
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    const BpeTokenizer& tokenizer = *loaded;
    const nlohmann::json& texts = cases["texts"];
    ASSERT_GE(texts.size(), 200u);
    size_t wrong = 0;
    for (size_t i = 0; i < texts.size() && wrong < 5; ++i) {
      const std::string text = texts[i].get<std::string>();
      auto ids = tokenizer.encode(text);
      auto plain = tokenizer.encode(text, /*add_special_tokens=*/false);
      ASSERT_TRUE(ids.ok() && plain.ok()) << ids.status().message();
      const std::vector<int64_t> want = Ids(cases["ids"][i]);
      EXPECT_EQ(*ids, want) << "'" << text << "'";
      EXPECT_EQ(*plain, Ids(cases["ids_plain"][i])) << "'" << text << "'";
      const Span<const int64_t> span(want.data(), want.size());
      EXPECT_EQ(tokenizer.decode(span), cases["decoded"][i].get<std::string>()) << text;
      EXPECT_EQ(tokenizer.decode(span, false), cases["decoded_special"][i].get<std::string>());
      wrong += *ids != want;
    }
    for (size_t i = 0; i < cases["random_ids"].size(); ++i) {
      const std::vector<int64_t> ids = Ids(cases["random_ids"][i]);
      const Span<const int64_t> span(ids.data(), ids.size());
      const std::string text = cases["random_decoded"][i].get<std::string>();
      EXPECT_EQ(tokenizer.decode(span), text) << cases["random_ids"][i].dump();
      EXPECT_EQ(tokenizer.decode(span, false),
                cases["random_decoded_special"][i].get<std::string>())
          << cases["random_ids"][i].dump();
      std::unique_ptr<TextStream> stream = tokenizer.stream();
      std::string joined;
      for (int64_t id : ids) stream->add(id, &joined);
      stream->finish(&joined);
      EXPECT_EQ(joined, text) << cases["random_ids"][i].dump();
    }
  }
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
