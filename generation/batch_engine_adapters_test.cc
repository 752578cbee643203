// BatchEngine with AdapterTables: adapters put into and taken out of slots while others generate.
// A slot reloaded with another adapter's file gives that adapter's tokens; an unload waits for the
// slot's requests and refuses new ones; bad files and busy slots are refused in one line with the
// slot as it was; a thread loading and unloading slots beside a thread stepping and submitting runs
// clean under ThreadSanitizer, and the tokens of every request equal its adapter's own.

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "edgeshare/generation/adapter_tables.h"
#include "edgeshare/generation/batch_engine.h"
#include "edgeshare/generation/test_fixture.h"
#include "edgeshare/runtime/named_data/data_file.h"
#include "edgeshare/runtime/named_data/merged_data_map.h"

namespace edgeshare {
namespace generation {
namespace {

using runtime::DataFile;
using runtime::Error;
using runtime::MergedDataMap;

std::shared_ptr<const DataFile> Open(const char* name) {
  auto file = DataFile::open(FixturePath(name).c_str());
  EXPECT_TRUE(file.ok()) << file.status().message();
  return file.ok() ? *file : nullptr;
}

class BatchAdaptersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    expected_ = ReadExpectedTokens();
    ASSERT_FALSE(expected_.empty());
    foundation_ = Open("batch/foundation.ptd");
    auto initial = Open("batch/batch_tables.ptd");
    a_ = Open("batch/a.ptd");
    b_ = Open("batch/b.ptd");
    ASSERT_TRUE(foundation_ && initial && a_ && b_);
    auto tables = AdapterTables::create(initial->map(), &foundation_->identity());
    ASSERT_TRUE(tables.ok()) << tables.status().message();
    tables_ = std::move(tables).get();
    auto merged = MergedDataMap::create({&foundation_->map(), tables_.get()});
    ASSERT_TRUE(merged.ok()) << merged.status().message();
    data_ = std::make_unique<MergedDataMap>(std::move(merged).get());
    std::ifstream manifest(FixturePath("batch/batch.json"));
    const nlohmann::json json = nlohmann::json::parse(manifest);
    limits_.slots = json.at("slots").get<size_t>();
    limits_.max_seq_len = json.at("max_seq_len").get<size_t>();
    limits_.adapter_slots = json.at("adapter_slots").get<size_t>();
    limits_.loaded_adapters = json.at("adapters").size();
    batch_ = LoadMethod(FixturePath("batch/batch.pte"), *data_, "forward_batch");
    ASSERT_NE(batch_, nullptr);
    auto engine =
        BatchEngine::create(&*batch_->method, limits_, BatchEngine::Options(), tables_.get());
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    engine_ = std::move(engine).get();
  }

  // Greedy tokens of one request run alone on the engine.
  std::vector<int64_t> Run(int64_t adapter, size_t n) {
    std::vector<int64_t> tokens;
    BatchRequest request;
    request.prompt = expected_.at("prompt");
    request.adapter = adapter;
    request.options.max_new_tokens = n;
    request.on_token = [&tokens](int64_t t) {
      tokens.push_back(t);
      return true;
    };
    EXPECT_TRUE(engine_->submit(std::move(request)).ok());
    while (engine_->busy()) EXPECT_TRUE(engine_->step().ok());
    return tokens;
  }

  ExpectedTokens expected_;
  std::shared_ptr<const DataFile> foundation_, a_, b_;
  std::unique_ptr<AdapterTables> tables_;
  std::unique_ptr<MergedDataMap> data_;
  BatchLimits limits_;
  std::unique_ptr<LoadedMethod> batch_;
  std::unique_ptr<BatchEngine> engine_;
};

TEST_F(BatchAdaptersTest, ASlotTakesAnotherAdapterAndAnUnloadWaitsForItsRequests) {
  const size_t n = expected_.at("a").size();
  EXPECT_EQ(Run(0, n), expected_.at("a"));
  ASSERT_TRUE(engine_->load_adapter(0, *b_).ok());
  EXPECT_EQ(Run(0, n), expected_.at("b"));
  ASSERT_TRUE(engine_->load_adapter(3, *a_).ok());
  EXPECT_EQ(Run(3, n), expected_.at("a"));

  // An unload while a request runs on the slot: that request finishes on it, new ones are refused.
  std::vector<int64_t> running;
  BatchRequest request;
  request.prompt = expected_.at("prompt");
  request.adapter = 3;
  request.options.max_new_tokens = n;
  request.on_token = [&running](int64_t t) {
    running.push_back(t);
    return true;
  };
  ASSERT_TRUE(engine_->submit(std::move(request)).ok());
  ASSERT_TRUE(engine_->step().ok());
  const runtime::Status busy = engine_->load_adapter(3, *b_);
  EXPECT_EQ(busy.code(), Error::InvalidState);
  EXPECT_NE(std::string(busy.message()).find("in use by 1 request"), std::string::npos);
  ASSERT_TRUE(engine_->unload_adapter(3).ok());
  EXPECT_FALSE(engine_->adapter_loaded(3));
  BatchRequest late;
  late.prompt = expected_.at("prompt");
  late.adapter = 3;
  late.options.max_new_tokens = 2;
  const runtime::Status refused = engine_->submit(std::move(late)).status();
  EXPECT_EQ(refused.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(refused.message()).find("being unloaded"), std::string::npos);
  while (engine_->busy()) ASSERT_TRUE(engine_->step().ok());
  EXPECT_EQ(running, expected_.at("a"));
  EXPECT_EQ(engine_->unload_adapter(3).code(), Error::InvalidState);  // empty now
}

TEST_F(BatchAdaptersTest, BadAdapterFilesAreRefusedAndTheSlotKeepsItsAdapter) {
  const size_t n = expected_.at("b").size();
  auto other_layout = Open("swap/a.ptd");  // a swappable adapter: other keys
  ASSERT_NE(other_layout, nullptr);
  const runtime::Status keys = engine_->load_adapter(1, *other_layout);
  EXPECT_EQ(keys.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(keys.message()).find("not a layer"), std::string::npos) << keys.message();
  EXPECT_EQ(engine_->load_adapter(limits_.adapter_slots, *a_).code(), Error::OutOfRange);
  EXPECT_EQ(Run(1, n), expected_.at("b"));

  runtime::Digest elsewhere;
  elsewhere.bytes[0] = 1;
  auto strict = AdapterTables::create(*tables_, &elsewhere);
  ASSERT_TRUE(strict.ok());
  const runtime::Status foundation = (*strict)->load(0, *a_);
  EXPECT_EQ(foundation.code(), Error::InvalidArgument);
  EXPECT_NE(std::string(foundation.message()).find("foundation"), std::string::npos);
}

TEST_F(BatchAdaptersTest, SlotsReloadWhileOthersGenerateOnAnotherThread) {
  const size_t n = expected_.at("a").size();
  std::atomic<bool> stop{false};
  std::atomic<int> loads{0};
  // Slot 2 flips between a and b while requests on slots 0 and 1 generate on the main thread.
  std::thread loader([&] {
    while (!stop.load()) {
      if (engine_->load_adapter(2, loads % 2 ? *b_ : *a_).ok()) ++loads;
      if (engine_->adapter_loaded(2)) (void)engine_->unload_adapter(2);
      std::this_thread::yield();
    }
  });
  // Each step waits (bounded) for the loader to have rewritten slot 2 once more, so loads and
  // unloads land between and during the steps of the requests on slots 0 and 1.
  auto step = [&] {
    const int before = loads.load();
    ASSERT_TRUE(engine_->step().ok());
    for (int spin = 0; spin < 20000 && loads.load() == before; ++spin) std::this_thread::yield();
  };
  std::vector<std::vector<int64_t>> out(6);
  for (size_t i = 0; i < out.size(); ++i) {
    BatchRequest request;
    request.prompt = expected_.at("prompt");
    request.adapter = static_cast<int64_t>(i % 2);
    request.options.max_new_tokens = n;
    std::vector<int64_t>* tokens = &out[i];
    request.on_token = [tokens](int64_t t) {
      tokens->push_back(t);
      return true;
    };
    ASSERT_TRUE(engine_->submit(std::move(request)).ok());
    for (int s = 0; s < 3; ++s) step();
  }
  while (engine_->busy()) step();
  stop = true;
  loader.join();
  EXPECT_GT(loads.load(), 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], expected_.at(i % 2 ? "b" : "a")) << i;
}

}  // namespace
}  // namespace generation
}  // namespace edgeshare
