// BatchEngine over the fixture's batch program (a and b in adapter slots 0 and 1, 4 sequences):
// each sequence's greedy tokens equal transformers' (the fixture's expected tokens) and its own
// single-sequence program's, whatever else is in the batch, whenever it joined, with prefill chunks
// and sequences ending early; bad requests refused in one line, leaving the others running.

#include "edgeshare/generation/batch_engine.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeshare/generation/generator.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/core/threads.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::MergedDataMap;

struct Finished {
  std::vector<int64_t> tokens;
  FinishReason reason = FinishReason::kNone;
  bool done = false;
  bool ok = true;
};

class BatchEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    expected_ = ReadExpectedTokens();
    ASSERT_FALSE(expected_.empty());
    auto foundation = DataFile::open(FixturePath("batch/foundation.ptd").c_str());
    ASSERT_TRUE(foundation.ok()) << foundation.status().message();
    foundation_ = *foundation;
    auto tables = DataFile::open(FixturePath("batch/batch_tables.ptd").c_str());
    ASSERT_TRUE(tables.ok()) << tables.status().message();
    tables_ = *tables;
    auto merged = MergedDataMap::create({&foundation_->map(), &tables_->map()});
    ASSERT_TRUE(merged.ok()) << merged.status().message();
    data_ = std::make_unique<MergedDataMap>(std::move(merged).get());
    std::ifstream manifest(FixturePath("batch/batch.json"));
    const nlohmann::json json = nlohmann::json::parse(manifest);
    limits_.slots = json.at("slots").get<size_t>();
    limits_.max_seq_len = json.at("max_seq_len").get<size_t>();
    limits_.adapter_slots = json.at("adapter_slots").get<size_t>();
    limits_.loaded_adapters = json.at("adapters").size();
    ASSERT_EQ(json.at("adapters"), nlohmann::json::array({"a", "b"}));
    batch_ = LoadMethod(FixturePath("batch/batch.pte"), *data_, "forward_batch");
    ASSERT_NE(batch_, nullptr);
  }

  std::unique_ptr<BatchEngine> Engine(BatchEngine::Options options = BatchEngine::Options()) {
    auto engine = BatchEngine::create(&*batch_->method, limits_, options);
    EXPECT_TRUE(engine.ok()) << engine.status().message();
    return engine.ok() ? std::move(engine).get() : nullptr;
  }

  // Submits a greedy request whose tokens and end land in `out`.
  RequestId Submit(BatchEngine& engine, std::vector<int64_t> prompt, int64_t adapter, size_t n,
                   Finished* out) {
    BatchRequest request;
    request.prompt = std::move(prompt);
    request.adapter = adapter;
    request.options.max_new_tokens = n;
    request.on_token = [out](int64_t token) {
      out->tokens.push_back(token);
      return true;
    };
    request.on_finish = [out](FinishReason reason, const runtime::Status& status) {
      out->reason = reason;
      out->ok = status.ok();
      out->done = true;
    };
    auto id = engine.submit(std::move(request));
    EXPECT_TRUE(id.ok()) << id.status().message();
    return id.ok() ? *id : 0;
  }

  // The greedy tokens of one sequence alone through its own program ("a.pte", "b.pte",
  // "foundation.pte" over the fixture's foundation.ptd).
  std::vector<int64_t> Alone(const char* program, const std::vector<int64_t>& prompt, size_t n) {
    auto foundation = DataFile::open(FixturePath("foundation.ptd").c_str());
    EXPECT_TRUE(foundation.ok());
    if (!foundation.ok()) return {};
    auto own = LoadForwardCached(FixturePath(program), (*foundation)->map());
    if (own == nullptr) return {};
    auto generator = Generator::create(&*own->method);
    EXPECT_TRUE(generator.ok());
    return generator.ok() ? GenerateOrFail(*generator, prompt, n) : std::vector<int64_t>();
  }

  static void RunUntilIdle(BatchEngine& engine) {
    for (int i = 0; i < 1000 && engine.busy(); ++i) {
      auto rows = engine.step();
      ASSERT_TRUE(rows.ok()) << rows.status().message();
    }
    ASSERT_FALSE(engine.busy());
  }

  ExpectedTokens expected_;
  std::shared_ptr<const DataFile> foundation_, tables_;
  std::unique_ptr<MergedDataMap> data_;
  BatchLimits limits_;
  std::unique_ptr<LoadedMethod> batch_;
};

TEST_F(BatchEngineTest, EachSequenceOfAMixedBatchEqualsTransformers) {
  auto engine = Engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  const size_t n = expected_.at("a").size();
  Finished a, b, bare, a_again;
  Submit(*engine, prompt, 0, n, &a);
  Submit(*engine, prompt, 1, n, &b);
  Submit(*engine, prompt, -1, n, &bare);
  Submit(*engine, prompt, 0, n, &a_again);
  RunUntilIdle(*engine);
  EXPECT_EQ(a.tokens, expected_.at("a"));
  EXPECT_EQ(b.tokens, expected_.at("b"));
  EXPECT_EQ(bare.tokens, expected_.at("foundation"));
  EXPECT_EQ(a_again.tokens, expected_.at("a"));
  for (const Finished* f : {&a, &b, &bare, &a_again}) {
    EXPECT_TRUE(f->done && f->ok);
    EXPECT_EQ(f->reason, FinishReason::kMaxNewTokens);
  }
}

// On a method with two threads the sampled rows draw at once, each sequence its own sampler:
// greedy sequences still give transformers' tokens, and a seeded sampled one the tokens it draws
// on one thread.
TEST_F(BatchEngineTest, RowsDrawnOnTwoThreadsGiveTheTokensOfOne) {
  auto threads = runtime::Threads::create(2);
  ASSERT_TRUE(threads.ok()) << threads.status().message();
  const auto two = std::make_unique<runtime::Threads>(std::move(threads).get());
  std::unique_ptr<LoadedMethod> batch_on_two =
      LoadMethod(FixturePath("batch/batch.pte"), *data_, "forward_batch", two.get());
  ASSERT_NE(batch_on_two, nullptr);
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  const size_t n = expected_.at("a").size();
  std::vector<int64_t> sampled[2];
  for (int t = 0; t < 2; ++t) {
    auto engine = BatchEngine::create(t == 0 ? &*batch_->method : &*batch_on_two->method, limits_,
                                      BatchEngine::Options());
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    Finished a, b, bare, drawn;
    Submit(**engine, prompt, 0, n, &a);
    Submit(**engine, prompt, 1, n, &b);
    Submit(**engine, prompt, -1, n, &bare);
    BatchRequest request;
    request.prompt = prompt;
    request.adapter = 0;
    request.options.max_new_tokens = n;
    request.options.sampling.temperature = 0.8f;
    request.options.sampling.seed = 7;
    request.on_token = [&drawn](int64_t token) {
      drawn.tokens.push_back(token);
      return true;
    };
    ASSERT_TRUE((*engine)->submit(std::move(request)).ok());
    RunUntilIdle(**engine);
    EXPECT_EQ(a.tokens, expected_.at("a")) << t + 1 << " threads";
    EXPECT_EQ(b.tokens, expected_.at("b")) << t + 1 << " threads";
    EXPECT_EQ(bare.tokens, expected_.at("foundation")) << t + 1 << " threads";
    EXPECT_EQ(drawn.tokens.size(), n);
    sampled[t] = drawn.tokens;
  }
  EXPECT_EQ(sampled[0], sampled[1]);
}

TEST_F(BatchEngineTest, JoiningMidDecodeInChunksAndEndingEarlyChangeNoTokens) {
  BatchEngine::Options options;
  options.prefill_chunk = 3;  // prompts run over several steps, beside others' decode rows
  auto engine = Engine(options);
  ASSERT_NE(engine, nullptr);
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  std::vector<int64_t> long_prompt = prompt;
  for (int64_t t : expected_.at("b")) long_prompt.push_back(t);
  long_prompt.resize(prompt.size() + 9);
  const std::vector<int64_t> short_prompt(prompt.begin(), prompt.begin() + 2);

  Finished first, joined, brief, queued;
  Submit(*engine, prompt, 0, 20, &first);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(engine->step().ok());
  Submit(*engine, long_prompt, 1, 12, &joined);
  Submit(*engine, short_prompt, -1, 3, &brief);
  for (int i = 0; i < 2; ++i) {
    auto rows = engine->step();
    ASSERT_TRUE(rows.ok()) << rows.status().message();
  }
  Submit(*engine, short_prompt, 0, 7, &queued);
  RunUntilIdle(*engine);

  EXPECT_EQ(first.tokens, Alone("a.pte", prompt, 20));
  EXPECT_EQ(joined.tokens, Alone("b.pte", long_prompt, 12));
  EXPECT_EQ(brief.tokens, Alone("foundation.pte", short_prompt, 3));
  EXPECT_EQ(queued.tokens, Alone("a.pte", short_prompt, 7));
  EXPECT_EQ(brief.reason, FinishReason::kMaxNewTokens);
}

TEST_F(BatchEngineTest, MoreRequestsThanSlotsWaitAndSequencesStopAtTheirBound) {
  auto engine = Engine();
  ASSERT_NE(engine, nullptr);
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  std::vector<Finished> out(limits_.slots + 2);
  for (size_t i = 0; i < out.size(); ++i)
    Submit(*engine, prompt, static_cast<int64_t>(i % 3) - 1, 4, &out[i]);
  ASSERT_TRUE(engine->step().ok());
  EXPECT_EQ(engine->running(), limits_.slots);
  EXPECT_EQ(engine->queued(), 2u);
  Finished longest;
  Submit(*engine, prompt, 1, 1000, &longest);
  RunUntilIdle(*engine);
  for (const Finished& f : out) EXPECT_EQ(f.tokens.size(), 4u);
  EXPECT_EQ(longest.reason, FinishReason::kSequenceBound);
  EXPECT_EQ(longest.tokens.size(), limits_.max_seq_len - prompt.size());
}

TEST_F(BatchEngineTest, BadRequestsAreRefusedInOneLineAndOthersRunOn) {
  BatchEngine::Options options;
  options.max_queue = 1;
  auto engine = Engine(options);
  ASSERT_NE(engine, nullptr);
  const std::vector<int64_t>& prompt = expected_.at("prompt");
  Finished a;
  Submit(*engine, prompt, 0, 8, &a);

  auto refused = [&](std::vector<int64_t> ids, int64_t adapter, size_t n) {
    BatchRequest request;
    request.prompt = std::move(ids);
    request.adapter = adapter;
    request.options.max_new_tokens = n;
    return engine->submit(std::move(request)).status();
  };
  const runtime::Status full = refused(prompt, 0, 4);
  EXPECT_EQ(full.code(), Error::ResourceExhausted);
  EXPECT_NE(std::string(full.message()).find("queue is full"), std::string::npos) << full.message();
  ASSERT_TRUE(engine->step().ok());  // a takes a slot: the queue has room again

  const runtime::Status adapter = refused(prompt, static_cast<int64_t>(limits_.adapter_slots), 4);
  EXPECT_EQ(adapter.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(adapter.message()).find("adapter slot"), std::string::npos);
  const runtime::Status long_prompt = refused(std::vector<int64_t>(limits_.max_seq_len, 1), 0, 4);
  EXPECT_EQ(long_prompt.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(long_prompt.message()).find("no room"), std::string::npos);
  const runtime::Status token = refused({1, static_cast<int64_t>(engine->vocab_size())}, 0, 4);
  EXPECT_EQ(token.code(), Error::InvalidArgument);
  EXPECT_EQ(refused({}, 0, 4).code(), Error::InvalidArgument);
  EXPECT_EQ(refused(prompt, 0, 0).code(), Error::InvalidArgument);
  EXPECT_EQ(engine->cancel(12345).code(), Error::NotFound);

  Finished cancelled;
  const RequestId id = Submit(*engine, prompt, 1, 30, &cancelled);
  ASSERT_TRUE(engine->step().ok());
  ASSERT_TRUE(engine->cancel(id).ok());
  RunUntilIdle(*engine);
  EXPECT_EQ(cancelled.reason, FinishReason::kCaller);
  EXPECT_LT(cancelled.tokens.size(), 30u);
  EXPECT_EQ(engine->cancel(id).code(), Error::NotFound);
  EXPECT_EQ(a.tokens,
            std::vector<int64_t>(expected_.at("a").begin(), expected_.at("a").begin() + 8));
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
