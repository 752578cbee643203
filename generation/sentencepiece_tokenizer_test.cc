// The C++ SentencePiece tokenizer against transformers' LlamaTokenizer (the Hugging Face
// `tokenizers` pipeline transformers converts a tokenizer.model to) on tokenizer.model files trained
// offline by //testing:sentencepiece_files: with Llama 2's settings, with a chat model's (legacy
// false, added tokens), and trained with sentencepiece's defaults (a normalizer transformers
// ignores, no byte fallback). Equal ids on a multilingual corpus (added tokens' texts, whitespace
// runs, byte fallback), equal decode of those ids and of random id runs (byte runs that are not
// UTF-8, special and added tokens) with and without special tokens, streaming pieces that
// concatenate to decode(); load_tokenizer's choice of file and reading of tokenizer_config.json; a
// corrupt or missing model is a one-line error.

#include "edgeshare/generation/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeshare/generation/bpe_tokenizer.h"
#include "edgeshare/generation/tokenizers.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::Error;
using runtime::Span;

std::string Folder() {
  const char* path = std::getenv("SENTENCEPIECE_EXPECTED_JSON");
  std::string p = path ? path : "";
  return p.substr(0, p.rfind('/') + 1);
}

nlohmann::json Expected() {
  std::ifstream file(Folder() + "expected.json");
  return nlohmann::json::parse(file, nullptr, false);
}

SentencePieceTokenizer Load() {
  auto tokenizer = SentencePieceTokenizer::load(Folder() + "tokenizer.model");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return std::move(*tokenizer);
}

std::vector<int64_t> Ids(const nlohmann::json& list) { return list.get<std::vector<int64_t>>(); }

std::string Streamed(const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                     bool skip_special_tokens) {
  std::unique_ptr<TextStream> stream = tokenizer.stream(skip_special_tokens);
  std::string text, piece;
  for (int64_t id : ids) {
    piece.clear();
    stream->add(id, &piece);
    EXPECT_TRUE(is_utf8(piece));
    text += piece;
  }
  piece.clear();
  stream->finish(&piece);
  return text + piece;
}

// The fixture's folder for one of expected.json's configurations, loaded as load_tokenizer loads
// an export folder (tokenizer_config.json read).
std::unique_ptr<Tokenizer> LoadFolder(const std::string& config) {
  auto tokenizer = load_tokenizer(Folder() + (config == "llama2" ? "" : config + "/"));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  if (!tokenizer.ok()) return nullptr;
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(tokenizer->get()), nullptr);
  return std::move(*tokenizer);
}

class EqualsTransformers : public ::testing::TestWithParam<const char*> {};

TEST_P(EqualsTransformers, ids_and_decode_on_the_corpus) {
  const nlohmann::json all = Expected();
  ASSERT_TRUE(all.is_object()) << "SENTENCEPIECE_EXPECTED_JSON is unreadable";
  const nlohmann::json& expected = all[GetParam()];
  const std::unique_ptr<Tokenizer> tokenizer = LoadFolder(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), expected["vocab_size"].get<size_t>());
  const nlohmann::json& corpus = expected["corpus"];
  ASSERT_GE(corpus.size(), 29u);
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const std::vector<int64_t> want = Ids(expected["ids"][i]);
    auto ids = tokenizer->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, want) << text;
    auto plain = tokenizer->encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(*plain, Ids(expected["ids_plain"][i])) << text;
    const Span<const int64_t> span(want.data(), want.size());
    for (bool skip : {true, false}) {
      const std::string decoded =
          expected[skip ? "decoded" : "decoded_special"][i].get<std::string>();
      EXPECT_EQ(tokenizer->decode(span, skip), decoded) << text;
      EXPECT_EQ(Streamed(*tokenizer, want, skip), decoded) << text;
    }
  }
}

TEST_P(EqualsTransformers, decode_of_random_ids) {
  const nlohmann::json all = Expected();
  ASSERT_TRUE(all.is_object());
  const nlohmann::json& expected = all[GetParam()];
  const std::unique_ptr<Tokenizer> tokenizer = LoadFolder(GetParam());
  ASSERT_NE(tokenizer, nullptr);
  const nlohmann::json& runs = expected["random_ids"];
  ASSERT_GE(runs.size(), 400u);
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<int64_t> ids = Ids(runs[i]);
    const Span<const int64_t> span(ids.data(), ids.size());
    for (bool skip : {true, false}) {
      const std::string want =
          expected[skip ? "random_decoded" : "random_decoded_special"][i].get<std::string>();
      EXPECT_EQ(tokenizer->decode(span, skip), want) << runs[i];
      EXPECT_EQ(Streamed(*tokenizer, ids, skip), want) << runs[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SentencePieceTokenizer, EqualsTransformers,
                         ::testing::Values("llama2", "chat", "plain"));

TEST(SentencePieceTokenizer, special_and_added_tokens) {
  const SentencePieceTokenizer tokenizer = Load();
  EXPECT_EQ(tokenizer.token_to_id("<unk>"), 0);
  EXPECT_EQ(tokenizer.token_to_id("<s>"), 1);
  EXPECT_EQ(tokenizer.token_to_id("</s>"), 2);
  EXPECT_EQ(tokenizer.token_to_id("<0x41>"), 3 + 0x41);
  EXPECT_EQ(tokenizer.token_to_id("no such piece"), -1);
  const std::vector<int64_t> ids = {1, 2, 0, 999999, -1};
  EXPECT_EQ(tokenizer.decode(Span<const int64_t>(ids.data(), ids.size()), false), "<s></s><unk>");
  EXPECT_EQ(tokenizer.decode(Span<const int64_t>(ids.data(), ids.size())), "");

  SentencePieceTokenizer::Options chat;
  chat.add_eos = true;
  chat.added_tokens = {{560, "<|im_start|>", true}, {562, "[[image]]", false}};
  auto with_added = SentencePieceTokenizer::load(Folder() + "tokenizer.model", chat);
  ASSERT_TRUE(with_added.ok()) << with_added.status().message();
  EXPECT_EQ(with_added->vocab_size(), 563u);
  EXPECT_EQ(with_added->token_to_id("<|im_start|>"), 560);
  EXPECT_EQ(with_added->token_to_id("[[image]]"), 562);
  auto encoded = with_added->encode("<|im_start|>hi[[image]]");
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->front(), 1);
  EXPECT_EQ((*encoded)[1], 560);
  EXPECT_EQ(encoded->back(), 2);
  EXPECT_EQ((*encoded)[encoded->size() - 2], 562);
  // 561 is a gap between added ids: skipped; the special one is left out, the other one is not.
  const std::vector<int64_t> turn = {560, 561, 562};
  EXPECT_EQ(with_added->decode(Span<const int64_t>(turn.data(), turn.size())), "[[image]]");

  chat.added_tokens = {{-3, "<bad>", true}};
  auto negative = SentencePieceTokenizer::load(Folder() + "tokenizer.model", chat);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error(), Error::InvalidData);
}

TEST(SentencePieceTokenizer, bad_input_is_a_one_line_error) {
  const SentencePieceTokenizer tokenizer = Load();
  auto not_utf8 = tokenizer.encode("caf\xC3");
  ASSERT_FALSE(not_utf8.ok());
  EXPECT_EQ(not_utf8.error(), Error::InvalidArgument);

  auto missing = SentencePieceTokenizer::load(Folder() + "no-such.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), Error::AccessFailed);

  std::ifstream file(Folder() + "tokenizer.model", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  for (const std::string& corrupt :
       {bytes.substr(0, bytes.size() / 2), std::string("not a model at all"), std::string()}) {
    auto loaded = SentencePieceTokenizer::parse(corrupt, "bad.model", {});
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.error(), Error::InvalidData);
    const std::string message = loaded.status().message();
    EXPECT_NE(message.find("bad.model"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A scratch export folder with the given files copied from the fixture.
std::string Scratch(const std::string& name, const std::vector<std::string>& files) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string folder = std::string(tmp ? tmp : "/tmp") + "/" + name + "/";
  EXPECT_EQ(std::system(("mkdir -p " + folder).c_str()), 0);
  for (const std::string& f : files) {
    std::ifstream in(Folder() + f, std::ios::binary);
    std::ofstream out(folder + f, std::ios::binary);
    out << in.rdbuf();
  }
  return folder;
}

TEST(LoadTokenizer, picks_tokenizer_model_without_tokenizer_json) {
  const std::string folder = Scratch("spm", {"tokenizer.model", "tokenizer_config.json"});
  auto tokenizer = load_tokenizer(folder);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  ASSERT_NE(tokenizer->get(), nullptr);
  EXPECT_NE(dynamic_cast<SentencePieceTokenizer*>(tokenizer->get()), nullptr);
  const nlohmann::json expected = Expected()["llama2"];
  auto ids = (*tokenizer)->encode(expected["corpus"][0].get<std::string>());
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Ids(expected["ids"][0]));

  // tokenizer_config.json's add_bos_token is honoured.
  std::ofstream(folder + "tokenizer_config.json") << R"({"add_bos_token": false})";
  auto no_bos = load_tokenizer(folder);
  ASSERT_TRUE(no_bos.ok());
  auto plain = (*no_bos)->encode(expected["corpus"][0].get<std::string>());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, Ids(expected["ids_plain"][0]));

  // add_prefix_space false: no "▁" in front of the text, none dropped when decoding.
  std::ofstream(folder + "tokenizer_config.json") << R"({"add_prefix_space": false})";
  auto no_prefix = load_tokenizer(folder);
  ASSERT_TRUE(no_prefix.ok());
  auto hi = (*no_prefix)->encode(" hi", /*add_special_tokens=*/false);
  auto prefixed_hi = (*tokenizer)->encode("hi", /*add_special_tokens=*/false);
  ASSERT_TRUE(hi.ok() && prefixed_hi.ok());
  EXPECT_EQ(*hi, *prefixed_hi);
  EXPECT_EQ((*no_prefix)->decode(Span<const int64_t>(hi->data(), hi->size())), " hi");

  for (const char* bad_config :
       {R"({"add_bos_token": "yes"})", R"({"legacy": 1})", R"({"added_tokens_decoder": []})",
        R"({"added_tokens_decoder": {"x": {"content": "<a>"}}})",
        R"({"added_tokens_decoder": {"600": {"special": true}}})",
        R"({"added_tokens_decoder": {"600": {"content": "<a>", "special": "no"}}})"}) {
    std::ofstream(folder + "tokenizer_config.json") << bad_config;
    auto bad = load_tokenizer(folder);
    ASSERT_FALSE(bad.ok()) << bad_config;
    EXPECT_EQ(bad.error(), Error::InvalidData);
    const std::string message = bad.status().message();
    EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }

  // A folder with neither file has no tokenizer; a corrupt model is an error naming it.
  auto none = load_tokenizer(Scratch("none", {}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);
  const std::string corrupt = Scratch("corrupt", {});
  std::ofstream(corrupt + "tokenizer.model") << "garbage";
  auto failed = load_tokenizer(corrupt);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(std::string(failed.status().message()).find("tokenizer.model"), std::string::npos);
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
