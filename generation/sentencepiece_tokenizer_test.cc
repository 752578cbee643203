// The C++ SentencePiece tokenizer against the sentencepiece package on a tokenizer.model trained
// offline by //testing:sentencepiece_files: equal ids on a multilingual corpus (control tokens'
// texts, whitespace runs, byte fallback), equal decode of those ids and of random id runs (byte
// runs that are not UTF-8, control and unknown tokens), streaming pieces that concatenate to
// decode(); load_tokenizer's choice of file; a corrupt or missing model is a one-line error.

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

std::string Streamed(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
  std::unique_ptr<TextStream> stream = tokenizer.stream();
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

TEST(SentencePieceTokenizer, ids_and_decode_equal_sentencepiece_on_the_corpus) {
  const nlohmann::json expected = Expected();
  ASSERT_TRUE(expected.is_object()) << "SENTENCEPIECE_EXPECTED_JSON is unreadable";
  const SentencePieceTokenizer tokenizer = Load();
  EXPECT_EQ(tokenizer.vocab_size(), 560u);
  const nlohmann::json& corpus = expected["corpus"];
  ASSERT_GE(corpus.size(), 25u);
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string text = corpus[i].get<std::string>();
    const std::vector<int64_t> want = Ids(expected["ids"][i]);
    auto ids = tokenizer.encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, want) << text;
    auto plain = tokenizer.encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(*plain, Ids(expected["ids_plain"][i])) << text;
    const std::string decoded = expected["decoded"][i].get<std::string>();
    EXPECT_EQ(tokenizer.decode(Span<const int64_t>(want.data(), want.size())), decoded) << text;
    EXPECT_EQ(Streamed(tokenizer, want), decoded) << text;
  }
}

TEST(SentencePieceTokenizer, decode_equals_sentencepiece_on_random_ids) {
  const nlohmann::json expected = Expected();
  ASSERT_TRUE(expected.is_object());
  const SentencePieceTokenizer tokenizer = Load();
  const nlohmann::json& runs = expected["random_ids"];
  ASSERT_GE(runs.size(), 400u);
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::vector<int64_t> ids = Ids(runs[i]);
    const std::string want = expected["random_decoded"][i].get<std::string>();
    EXPECT_EQ(tokenizer.decode(Span<const int64_t>(ids.data(), ids.size())), want) << runs[i];
    EXPECT_EQ(Streamed(tokenizer, ids), want) << runs[i];
  }
}

TEST(SentencePieceTokenizer, special_tokens) {
  const SentencePieceTokenizer tokenizer = Load();
  EXPECT_EQ(tokenizer.token_to_id("<unk>"), 0);
  EXPECT_EQ(tokenizer.token_to_id("<s>"), 1);
  EXPECT_EQ(tokenizer.token_to_id("</s>"), 2);
  EXPECT_EQ(tokenizer.token_to_id("<0x41>"), 3 + 0x41);
  EXPECT_EQ(tokenizer.token_to_id("no such piece"), -1);
  const std::vector<int64_t> ids = {1, 2, 0, 999999, -1};
  EXPECT_EQ(tokenizer.decode(Span<const int64_t>(ids.data(), ids.size()), false),
            "<s></s> \xE2\x81\x87 ");
  // A chat turn's control tokens come back as their text when not skipped.
  const std::string turn = "<s>[INST] Hallo, wie geht's? [/INST] Gut! \xF0\x9F\x99\x82</s>";
  auto turn_ids = tokenizer.encode(turn, /*add_special_tokens=*/false);
  ASSERT_TRUE(turn_ids.ok());
  EXPECT_EQ(turn_ids->front(), 1);
  EXPECT_EQ(turn_ids->back(), 2);
  EXPECT_EQ(tokenizer.decode(Span<const int64_t>(turn_ids->data(), turn_ids->size()), false), turn);
  SentencePieceTokenizer::Options both;
  both.add_eos = true;
  auto with_eos = SentencePieceTokenizer::load(Folder() + "tokenizer.model", both);
  ASSERT_TRUE(with_eos.ok());
  auto encoded = with_eos->encode("hi");
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(encoded->front(), 1);
  EXPECT_EQ(encoded->back(), 2);
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
  const nlohmann::json expected = Expected();
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

  std::ofstream(folder + "tokenizer_config.json") << R"({"add_bos_token": "yes"})";
  auto bad = load_tokenizer(folder);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), Error::InvalidData);

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
